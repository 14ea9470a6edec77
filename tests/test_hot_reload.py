"""Hot reload end to end: /functions edited under a running Relay (real redis-server,
real Docker builds and containers), and what ``relay function`` and ``relay stats``
say about it afterwards."""

import re
import shutil
import time

import pytest

from relay.view.reader import StateReader
from relay.view.records import FAILED, PENDING, READY, SUCCESS
from tests.support.commands import view_command
from tests.support.hot_reload import publish, remove_images
from tests.support.workers import (
    Worker,
    engine_env,
    harness_command,
    namespaced_relay_command,
    pending,
    wait_until,
    write_function,
)

SOURCE = 'def handler(event):\n    print("{name} {version} n=" + str(event["n"]), flush=True)\n'
TEMPLATE = """
runtime: python3.14
events:
  - handler: app.handler
    pattern: {{kind: [{name}]}}
"""


def function(root, name, version="v1"):
    return write_function(root, name, TEMPLATE.format(name=name), {"app.py": SOURCE.format(name=name, version=version)})


def save(root, name, version):
    (root / name / "app.py").write_text(SOURCE.format(name=name, version=version))


def count(worker, message, name):
    return sum(1 for line in worker.stderr.splitlines() if f'msg="{message}"' in line and f"function={name} " in
               line + " ")


def tags(docker_engine, name):
    return sorted(tag for image in docker_engine.images.list(name=f"relay-fn-{name}") for tag in image.tags)


@pytest.fixture
def relay(redis_server, redis_client, docker_engine, tmp_path, token):
    """Start one harness worker on tmp_path/functions (no periodic pass, so that only the
    watcher reconciles) with its state database in tmp_path/state. Function names end
    in -<token>; their images are removed afterwards."""
    started = []

    def start(**timing):
        timing.setdefault("rescan_interval", 600)
        command = harness_command(tmp_path / "functions", "hot-reload", state_db=tmp_path / "state" / "db.sqlite3",
                                  **timing)
        worker = Worker(command, engine_env(redis_server), tmp_path, f"relay-{len(started)}")
        started.append(worker)
        worker.wait_for('msg="Relay started"', timeout=180)
        return worker

    (tmp_path / "functions").mkdir()
    yield start
    for worker in started:
        worker.kill()
    remove_images(docker_engine, token)


def test_a_new_function_serves_and_edits_reach_the_next_event(relay, redis_client, docker_engine, tmp_path, token):
    root = tmp_path / "functions"
    name = f"live-{token}"
    worker = relay()
    assert "functions=0" in worker.stderr

    function(root, name)
    worker.wait_for(f'msg="Function ready" function={name} ')
    publish(redis_client, name, 1)
    worker.wait_for(f"{name} v1 n=1", where="stdout")
    first_tag = tags(docker_engine, name)
    assert len(first_tag) == 1

    save(root, name, "v2")
    worker.wait_for(f'msg="Function updated" function={name} ')
    publish(redis_client, name, 2)
    worker.wait_for(f"{name} v2 n=2", where="stdout")
    wait_until(lambda: len(tags(docker_engine, name)) == 1 and tags(docker_engine, name) != first_tag,
               what="the old image to be retired")

    for number in range(3, 13):        # ten quick saves
        save(root, name, f"v{number}")
        time.sleep(0.1)
    worker.wait_for(f'msg="Function updated" function={name} ', count=2)
    time.sleep(3)                      # room for a second rebuild, which must not come
    assert count(worker, "Building function image", name) == 3
    assert count(worker, "Function updated", name) == 2
    publish(redis_client, name, 3)
    worker.wait_for(f"{name} v12 n=3", where="stdout")
    wait_until(lambda: pending(redis_client) == 0, what="every entry to be acknowledged")
    assert worker.stop() == 0


def test_a_broken_edit_keeps_the_old_version_serving_and_inspect_shows_it(relay, redis_client, tmp_path, token):
    root = tmp_path / "functions"
    name = f"steady-{token}"
    function(root, name)
    worker = relay()
    publish(redis_client, name, 1)
    worker.wait_for(f"{name} v1 n=1", where="stdout")
    good_template = (root / name / "template.yaml").read_text()

    (root / name / "template.yaml").write_text(good_template.replace("python3.14", "python9"))
    save(root, name, "v2")
    worker.wait_for('msg="Invalid function; the previous version keeps serving"')
    publish(redis_client, name, 2)
    worker.wait_for(f"{name} v1 n=2", where="stdout")

    state = tmp_path / "state"
    inspect = view_command(state, "function", "inspect", name)
    assert inspect.returncode == 0, inspect.stderr
    lines = inspect.stdout.splitlines()
    assert "Status:            ready" in lines
    assert any(re.fullmatch(r"Last reconcile:    failed \(\d+s ago\)", line) for line in lines), inspect.stdout
    assert any(line.startswith("Last error:        ") and "template.yaml" in line for line in lines)
    assert "python9" in inspect.stdout
    assert "Image:             relay-fn-" + name in inspect.stdout

    (root / name / "template.yaml").write_text(good_template)     # fixed: v2 of the source goes live
    worker.wait_for(f'msg="Function updated" function={name} ')
    reader = StateReader(state / "db.sqlite3")     # written off the hot path: shortly after the log line

    def summary():
        record = reader.function(name)
        return record.status, record.last_reconcile_status, record.last_error

    wait_until(lambda: summary() == (READY, SUCCESS, None), timeout=10, what="the state database to show the fix")
    publish(redis_client, name, 3)
    worker.wait_for(f"{name} v2 n=3", where="stdout")
    assert worker.stop() == 0


def test_deleting_a_function_stops_matching_and_invalid_siblings_never_stop_a_valid_one(
        relay, redis_client, docker_engine, tmp_path, token):
    root = tmp_path / "functions"
    keeper, doomed = f"keeper-{token}", f"doomed-{token}"
    function(root, keeper)
    function(root, doomed)
    write_function(root, f"broken-{token}", "runtime: python3.14\nevents: []\n", {})
    write_function(root, f"Bad_Name-{token}", TEMPLATE.format(name="bad"), {"app.py": ""})
    write_function(root, f"unbuildable-{token}", TEMPLATE.format(name="never"),
                   {"app.py": "", "requirements.txt": f"this is not a requirement {token} ===\n"})
    worker = relay()
    assert "functions=2" in worker.stderr and "found=5" in worker.stderr
    assert 'msg="Invalid function; skipped"' in worker.stderr
    assert 'msg="Invalid function name; directory skipped"' in worker.stderr
    assert 'msg="Function is pending: its image could not be built"' in worker.stderr
    reader = StateReader(tmp_path / "state" / "db.sqlite3")
    expected = [doomed, keeper, f"unbuildable-{token}"]
    wait_until(lambda: sorted(record.name for record in reader.functions()) == expected, timeout=10,
               what="the state database to list the loaded functions")
    records = {record.name: record for record in reader.functions()}
    assert (records[f"unbuildable-{token}"].status, records[f"unbuildable-{token}"].last_reconcile_status) == (
        PENDING, FAILED)

    doomed_tags = tags(docker_engine, doomed)
    shutil.rmtree(root / doomed)
    worker.wait_for(f'msg="Function removed" function={doomed}')
    publish(redis_client, doomed, 1)
    wait_until(lambda: pending(redis_client) == 0, what="the unmatched entry to be acknowledged")
    assert f"{doomed} v1 n=1" not in worker.stdout
    wait_until(lambda: not any(tag in tags(docker_engine, doomed) for tag in doomed_tags),
               what="the removed function's image to be retired")

    write_function(root, f"late-broken-{token}", "runtime: cobol\nevents: []\n", {})
    worker.wait_for('msg="Invalid function; skipped"', count=2)
    publish(redis_client, keeper, 2)
    worker.wait_for(f"{keeper} v1 n=2", where="stdout")
    listing = view_command(tmp_path / "state", "function", "ls")
    assert [line.split()[0] for line in listing.stdout.splitlines()[1:]] == [keeper, f"unbuildable-{token}"]
    assert worker.stop() == 0


def test_the_final_flush_on_shutdown_persists_the_last_counters(relay, redis_client, tmp_path, token):
    root = tmp_path / "functions"
    name = f"counted-{token}"
    function(root, name)
    worker = relay(stats_interval=600)   # only the final flush writes counters
    for number in range(3):
        publish(redis_client, name, number)
    worker.wait_for(f"{name} v1 n=", where="stdout", count=3)
    wait_until(lambda: pending(redis_client) == 0, what="the entries to be acknowledged")
    reader = StateReader(tmp_path / "state" / "db.sqlite3")
    assert reader.stats().updated_at is None
    assert worker.stop() == 0
    stats = reader.stats()
    assert (stats.counters.events_processed, stats.counters.handler_successes) == (3, 3)
    assert stats.updated_at is not None
    counters = reader.function_stats(name).counters
    assert (counters.events_processed, counters.handler_successes, counters.handler_failures) == (3, 3, 0)


def test_relay_start_keeps_the_state_at_the_fixed_path_for_the_cli(redis_server, redis_client, docker_engine,
                                                                    tmp_path, token):
    functions, state = tmp_path / "functions", tmp_path / "state"
    state.mkdir()
    name = f"fixed-{token}"
    function(functions, name)
    worker = Worker(namespaced_relay_command(functions, state, f"relay-state-{token}"), engine_env(redis_server),
                    tmp_path, "relay")
    try:
        worker.wait_for('msg="Relay started"', timeout=180)
        publish(redis_client, name, 1)
        worker.wait_for(f"{name} v1 n=1", where="stdout")

        def flushed():
            stats = view_command(state, "stats")
            return "Events processed:    1\n" in stats.stdout and "Updated:             never" not in stats.stdout

        wait_until(flushed, timeout=20, what="the 5 s counter snapshot")
        listing = view_command(state, "function", "ls")
        assert listing.returncode == 0
        assert re.fullmatch(rf"{name} +python3\.14 +ready +1 +\d+s ago", listing.stdout.splitlines()[1])
        assert worker.stop() == 0
        stats = view_command(state, "stats")   # Relay and its Redis are not needed to read it
        assert stats.returncode == 0 and "Handler successes:   1\n" in stats.stdout
    finally:
        worker.kill()
        remove_images(docker_engine, token)


def test_a_function_removed_while_relay_was_down_loses_its_image_at_the_next_start(relay, docker_engine, tmp_path,
                                                                                    token):
    root = tmp_path / "functions"
    gone, kept = f"gone-{token}", f"kept-{token}"
    function(root, gone)
    function(root, kept)
    assert relay().stop() == 0
    assert len(tags(docker_engine, gone)) == 1 and len(tags(docker_engine, kept)) == 1
    shutil.rmtree(root / gone)
    second = relay()
    wait_until(lambda: tags(docker_engine, gone) == [], timeout=30, what="the image of the removed function to go")
    assert len(tags(docker_engine, kept)) == 1
    reader = StateReader(tmp_path / "state" / "db.sqlite3")
    wait_until(lambda: [record.name for record in reader.functions()] == [kept], timeout=10,
               what="the state database to forget the removed function")
    assert second.stop() == 0


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_an_image_removed_under_relay_is_built_again_and_its_event_runs_uncharged(relay, redis_client, docker_engine,
                                                                                   tmp_path, token, warm):
    """An operator's `docker image prune -a`, or a concurrent build's clean-up, takes the active image."""
    root = tmp_path / "functions"
    name = f"pruned-{token}"
    template = TEMPLATE.format(name=name) + ("warm:\n  containers: 1\n" if warm else "")
    write_function(root, name, template, {"app.py": SOURCE.format(name=name, version="v1")})
    worker = relay()
    worker.wait_for(f'msg="Function ready" function={name} ')
    [image] = tags(docker_engine, name)
    docker_engine.api.remove_image(image, force=True)

    publish(redis_client, name, 1)
    worker.wait_for(f'msg="Function image is missing from the engine; building it again" function={name} ')
    worker.wait_for(f'msg="Function image rebuilt" function={name} ', timeout=120)
    worker.wait_for(f"{name} v1 n=1", where="stdout", timeout=60)    # the reclaimer's next pass
    wait_until(lambda: pending(redis_client) == 0, what="the entry to be acknowledged")
    assert tags(docker_engine, name) == [image]
    assert "attempt not charged" in worker.stderr and "Handler failed" not in worker.stderr
    assert worker.stdout.count(f"{name} v1 n=1") == 1
    assert worker.stop() == 0
