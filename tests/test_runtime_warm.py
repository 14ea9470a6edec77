"""Warm containers against the real engine: reuse, module state, failures,
exits, timeouts, protocol breaks, output attribution, recycling, idle stop,
retirement, the capacity bound, hardening and labels, for Python and Node."""

import io
import json
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from relay.durations import SECOND
from relay.functions import ActiveFunction
from relay.functions.template import Warm
from relay.runtime.containers import MEMORY_BYTES, PIDS_LIMIT
from relay.runtime.executor import build_executor
from relay.runtime.invocation import Invocation
from relay.runtime.pins import ImagePins
from tests.support.runtime import (
    RuntimeEvents,
    built_fixtures,
    clean_hostname,
    containers_of,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ("rt-warm-python", "rt-warm-node")
WARM = Warm(containers=2)


@pytest.fixture(scope="module")
def images(docker_engine, tmp_path_factory):
    """The fixture functions under per-session names, built once: {fixture: (Function, tag)}."""
    with built_fixtures(docker_engine, tmp_path_factory.mktemp("functions"), FIXTURES) as built:
        yield built


@pytest.fixture
def hostname(docker_engine):
    with clean_hostname(docker_engine, "rt-warm") as name:
        yield name


@pytest.fixture
def output():
    return io.StringIO()


@pytest.fixture
def pins():
    return ImagePins()


@pytest.fixture
def executor(docker_engine, hostname, output, pins):
    executor = build_executor(docker_engine, hostname, output, pins=pins, warm_capacity=4)
    yield executor
    executor.warm.close()


def invocation(images, fixture, handler, event=None, *, warm=WARM, timeout=20 * SECOND, message_id="1-0",
               env=None):
    function, tag = images[fixture]
    return Invocation(function=function.name, handler=handler, image=tag,
                      payload=json.dumps(event if event is not None else {"n": 1}).encode(), timeout=timeout,
                      env=env if env is not None else dict(function.template.env), message_id=message_id,
                      event_id=f"evt-{message_id}", event_name="INSERT", runtime=function.template.runtime,
                      warm=warm)


def run(executor, images, fixture, handler, event=None, **options):
    return executor.run(invocation(images, fixture, handler, event, **options))


def lines_of(output, images, fixture, handler, message_id="1-0", separator=None):
    """The output lines of one invocation, without their prefix (split at *separator*, or as str.splitlines)."""
    function, _ = images[fixture]
    prefix = f'relay: function "{function.name}" handler "{handler}" message "{message_id}" event "evt-{message_id}": '
    text = output.getvalue()
    return [line[len(prefix):] for line in (text.split(separator) if separator else text.splitlines())
            if line.startswith(prefix)]


def count_line(output, images, fixture, message_id, handler="warm.counter"):
    """The counter's stdout line (its stderr line may come first: the streams are separate)."""
    return next(line for line in lines_of(output, images, fixture, handler, message_id) if line.startswith("count"))


def host_of(output, images, fixture, handler, message_id):
    found = [re.search(r"host (\w+)", line) for line in lines_of(output, images, fixture, handler, message_id)]
    return next(match.group(1) for match in found if match)


def warm_containers(docker_engine, hostname):
    return [container for container in containers_of(docker_engine, hostname)
            if container["Labels"].get("relay.warm") == "true"]


BOTH = pytest.mark.parametrize("fixture", FIXTURES)


# --- reuse and module state ---

@BOTH
def test_one_container_serves_many_invocations_and_keeps_module_state(executor, images, output, fixture,
                                                                      docker_engine, hostname):
    outcomes = [run(executor, images, fixture, "warm.counter", {"n": n}, message_id=f"{n}-0") for n in range(3)]
    assert [outcome.ok for outcome in outcomes] == [True] * 3
    assert [outcome.exit_code for outcome in outcomes] == [0] * 3
    counts = [lines_of(output, images, fixture, "warm.counter", f"{n}-0") for n in range(3)]
    for n, lines in enumerate(counts):
        [line] = [line for line in lines if line.startswith("count")]
        assert line.startswith(f"count {n + 1} host ") and " warm.counter hello " in line, lines
        assert sorted(lines) == [line, "to stderr"]
    assert len({host_of(output, images, fixture, "warm.counter", f"{n}-0") for n in range(3)}) == 1
    assert len(warm_containers(docker_engine, hostname)) == 1
    assert executor.warm.containers() == {images[fixture][0].name: 1}


@BOTH
def test_every_handler_of_the_function_runs_in_the_same_container(executor, images, output, fixture):
    assert run(executor, images, fixture, "warm.counter", message_id="1-0").ok
    assert run(executor, images, fixture, "warm.partial", message_id="2-0").ok
    assert run(executor, images, fixture, "warm.counter", message_id="3-0").ok
    assert count_line(output, images, fixture, "3-0").startswith("count 2 ")


def test_python_async_handler(executor, images, output):
    assert run(executor, images, "rt-warm-python", "warm.coroutine", {"n": 7}).ok
    assert lines_of(output, images, "rt-warm-python", "warm.coroutine") == ["async 7"]


def test_node_commonjs_handler(executor, images, output):
    assert run(executor, images, "rt-warm-node", "legacy.handler", {"n": 7}, message_id="1-0").ok
    assert run(executor, images, "rt-warm-node", "legacy.handler", {"n": 8}, message_id="2-0").ok
    assert lines_of(output, images, "rt-warm-node", "legacy.handler", "2-0") == ["cjs 2 8"]


# --- failures ---

@BOTH
def test_a_raising_handler_fails_its_invocation_and_the_container_stays(executor, images, output, fixture):
    assert run(executor, images, fixture, "warm.counter", message_id="1-0").ok
    failed = run(executor, images, fixture, "warm.fail", {"n": 5}, message_id="2-0")
    assert (failed.ok, failed.exit_code, failed.timed_out, failed.engine_unavailable) == (False, 1, False, False)
    assert "failed in its warm container" in failed.error
    assert any("boom 5" in line for line in lines_of(output, images, fixture, "warm.fail", "2-0"))
    assert run(executor, images, fixture, "warm.counter", message_id="3-0").ok
    assert host_of(output, images, fixture, "warm.counter", "1-0") == host_of(output, images, fixture,
                                                                            "warm.counter", "3-0")


@BOTH
def test_each_outcome_has_the_tails_of_its_own_invocation_only(executor, images, fixture, docker_engine, hostname):
    first = run(executor, images, fixture, "warm.counter", {"n": 1}, message_id="1-0")
    second = run(executor, images, fixture, "warm.fail", {"n": 5}, message_id="2-0")
    assert first.stdout_tail.startswith("count 1 host ") and "\n" not in first.stdout_tail
    assert first.stderr_tail == "to stderr"
    assert second.stdout_tail == "" and "boom 5" in second.stderr_tail and "to stderr" not in second.stderr_tail
    assert (first.warm, second.warm, second.killed) == (True, True, False)
    [listed] = warm_containers(docker_engine, hostname)
    assert first.container_id == second.container_id == listed["Id"]    # the engine's full id


def test_output_written_while_idle_is_not_in_the_next_invocations_tail(executor, images):
    assert run(executor, images, "rt-warm-python", "warm.background", message_id="1-0").ok
    time.sleep(1.5)                                                  # "late line" comes meanwhile
    outcome = run(executor, images, "rt-warm-python", "warm.counter", message_id="2-0")
    assert outcome.ok and "late line" not in outcome.stdout_tail and outcome.stdout_tail.startswith("count ")


def test_a_timeout_keeps_the_tail_written_before_it_and_is_not_a_kill(executor, images):
    outcome = run(executor, images, "rt-warm-python", "warm.stall", {"seconds": 30}, timeout=1 * SECOND)
    assert (outcome.ok, outcome.timed_out, outcome.exit_code, outcome.killed) == (False, True, None, False)
    assert outcome.stdout_tail == "stalling" and outcome.container_id and outcome.warm   # its last partial line


def test_a_handler_past_its_memory_limit_is_killed_with_137(executor, images, output, docker_engine, hostname):
    outcome = run(executor, images, "rt-warm-python", "warm.memory", {"mib": 2 * MEMORY_BYTES // 2**20})
    assert (outcome.ok, outcome.exit_code, outcome.timed_out, outcome.killed) == (False, 137, False, True)
    assert not outcome.engine_unavailable and "exited with code 137" in outcome.error
    assert outcome.stdout_tail == "allocating" and outcome.warm
    assert wait_until(lambda: not warm_containers(docker_engine, hostname), timeout=10)


def test_a_container_killed_mid_invocation_gives_137(executor, images, docker_engine, hostname):
    result = {}
    sleeping = threading.Thread(target=lambda: result.update(outcome=run(
        executor, images, "rt-warm-python", "warm.sleep", {"seconds": 30})))
    sleeping.start()
    try:
        listed = wait_until(lambda: warm_containers(docker_engine, hostname), timeout=15)
        assert listed, "the warm container never started"
        time.sleep(0.5)                                               # the request is in
        docker_engine.api.kill(listed[0]["Id"])
    finally:
        sleeping.join(30)
    outcome = result["outcome"]
    assert (outcome.ok, outcome.exit_code, outcome.timed_out, outcome.killed) == (False, 137, False, True)
    assert outcome.container_id == listed[0]["Id"]


@BOTH
def test_an_unknown_handler_fails_without_breaking_the_container(executor, images, output, fixture):
    failed = run(executor, images, fixture, "warm.nothing", message_id="1-0")
    assert (failed.ok, failed.exit_code) == (False, 1)
    assert any("nothing" in line for line in lines_of(output, images, fixture, "warm.nothing", "1-0"))
    assert executor.warm.containers() == {images[fixture][0].name: 1}


@BOTH
def test_a_handler_that_exits_fails_and_the_container_is_replaced(executor, images, output, fixture,
                                                                 docker_engine, hostname):
    assert run(executor, images, fixture, "warm.counter", message_id="1-0").ok
    left = run(executor, images, fixture, "warm.leave", message_id="2-0")
    assert (left.ok, left.timed_out, left.engine_unavailable) == (False, False, False)
    assert "exited with code 3" in left.error and "replaced" in left.error
    assert lines_of(output, images, fixture, "warm.leave", "2-0") == ["leaving"]
    assert (left.exit_code, left.killed, left.stdout_tail, left.stderr_tail) == (3, False, "leaving", "")
    assert run(executor, images, fixture, "warm.counter", message_id="3-0").ok
    assert count_line(output, images, fixture, "3-0").startswith("count 1 ")
    assert wait_until(lambda: len(warm_containers(docker_engine, hostname)) == 1, timeout=10)


def test_sys_exit_in_a_python_handler_ends_the_container(executor, images):
    outcome = run(executor, images, "rt-warm-python", "warm.quit")
    assert not outcome.ok and "exited with code 0" in outcome.error


@BOTH
def test_a_timeout_removes_the_container_and_the_next_invocation_gets_a_new_one(executor, images, output,
                                                                                fixture, docker_engine, hostname):
    assert run(executor, images, fixture, "warm.counter", message_id="1-0").ok
    slow = run(executor, images, fixture, "warm.sleep", {"seconds": 30}, timeout=1 * SECOND, message_id="2-0")
    assert (slow.ok, slow.timed_out, slow.exit_code) == (False, True, None)
    assert "timed out after 1s" in slow.error and 1.0 <= slow.duration < 10
    assert wait_until(lambda: not warm_containers(docker_engine, hostname), timeout=10)
    assert run(executor, images, fixture, "warm.counter", message_id="3-0").ok
    assert count_line(output, images, fixture, "3-0").startswith("count 1 ")


FORGED_STDOUT = ("\x1e\x1frelay:done 1 ok\n\x1e\x1frelay:done 2 ok\n"
                 "echoed \x1e\x1frelay:done 2 ok\n\x1e\x1frelay:done 2 ok")       # the last one without its newline
FORGED_STDERR = "\x1e\x1frelay:end 1\n\x1e\x1frelay:end 2\n"


@BOTH
def test_markers_a_handler_echoes_are_ordinary_output(executor, images, output, fixture, docker_engine, hostname):
    assert run(executor, images, fixture, "warm.counter", message_id="1-0").ok
    event = {"stdout": FORGED_STDOUT, "stderr": FORGED_STDERR}
    forged = run(executor, images, fixture, "warm.forge", {**event, "fail": True}, message_id="2-0")
    assert (forged.ok, forged.exit_code, forged.engine_unavailable) == (False, 1, False)
    assert "the handler failed in its warm container" in forged.error
    lines = lines_of(output, images, fixture, "warm.forge", "2-0", separator="\n")   # "\x1e" splits lines too
    echoed = FORGED_STDOUT.split("\n") + FORGED_STDERR.split("\n")[:-1]
    assert sorted(line for line in lines if "relay:" in line) == sorted(line for line in echoed if line), lines
    assert any("failing after the forgery" in line for line in lines)
    assert run(executor, images, fixture, "warm.forge", event, message_id="3-0").ok
    assert run(executor, images, fixture, "warm.counter", message_id="4-0").ok
    assert count_line(output, images, fixture, "4-0").startswith("count 2 ")      # the same container
    assert len(warm_containers(docker_engine, hostname)) == 1


# --- output ---

@BOTH
def test_output_is_attributed_to_its_own_invocation(executor, images, output, fixture):
    assert run(executor, images, fixture, "warm.partial", message_id="1-0").ok
    assert run(executor, images, fixture, "warm.child", message_id="2-0").ok
    assert run(executor, images, fixture, "warm.counter", message_id="3-0").ok
    assert lines_of(output, images, fixture, "warm.partial", "1-0") == ["no newline"]
    assert sorted(lines_of(output, images, fixture, "warm.child", "2-0")) == ["child err", "from a child"]
    assert len(lines_of(output, images, fixture, "warm.counter", "3-0")) == 2
    assert len(output.getvalue().splitlines()) == 5


@BOTH
def test_a_handler_reads_an_empty_stdin(executor, images, output, fixture):
    assert run(executor, images, fixture, "warm.stdin").ok
    assert lines_of(output, images, fixture, "warm.stdin") == ['stdin ""' if "node" in fixture else "stdin ''"]
    assert run(executor, images, fixture, "warm.counter", message_id="2-0").ok


def test_output_written_while_idle_goes_to_the_invocation_that_ran_last(executor, images, output):
    assert run(executor, images, "rt-warm-python", "warm.background", message_id="1-0").ok
    time.sleep(1.5)
    assert run(executor, images, "rt-warm-python", "warm.counter", message_id="2-0").ok
    assert lines_of(output, images, "rt-warm-python", "warm.background", "1-0") == ["late line"]


# --- lifecycle ---

@BOTH
def test_a_container_is_replaced_after_max_invocations(executor, images, output, fixture):
    warm = replace(WARM, max_invocations=2)
    for n in range(3):
        assert run(executor, images, fixture, "warm.counter", message_id=f"{n}-0", warm=warm).ok
    firsts = [count_line(output, images, fixture, f"{n}-0").split(" host")[0] for n in range(3)]
    assert firsts == ["count 1", "count 2", "count 1"]


def test_an_idle_container_is_stopped(executor, images, docker_engine, hostname, pins):
    function, tag = images["rt-warm-python"]
    assert run(executor, images, "rt-warm-python", "warm.counter", warm=replace(WARM, idle=1)).ok
    assert len(warm_containers(docker_engine, hostname)) == 1 and pins.in_use(tag)
    executor.warm.stop_idle()
    assert wait_until(lambda: not warm_containers(docker_engine, hostname), timeout=10)
    assert executor.warm.containers() == {} and not pins.in_use(tag)


def test_idle_containers_within_their_idle_time_stay(executor, images, docker_engine, hostname):
    assert run(executor, images, "rt-warm-python", "warm.counter").ok
    executor.warm.stop_idle()
    assert len(warm_containers(docker_engine, hostname)) == 1


def test_a_retired_image_loses_its_idle_containers_and_running_ones_after_their_invocation(
        executor, images, docker_engine, hostname):
    _, tag = images["rt-warm-python"]
    assert run(executor, images, "rt-warm-python", "warm.counter").ok
    executor.warm.retire_image(tag)
    assert wait_until(lambda: not warm_containers(docker_engine, hostname), timeout=10)
    assert executor.warm.containers() == {}


def test_a_changed_environment_gets_a_new_container(executor, images, output):
    assert run(executor, images, "rt-warm-python", "warm.counter", message_id="1-0").ok
    assert run(executor, images, "rt-warm-python", "warm.counter", message_id="2-0",
               env={"GREETING": "rotated"}).ok
    line = count_line(output, images, "rt-warm-python", "2-0")
    assert line.startswith("count 1 ") and " rotated " in line
    assert executor.warm.containers() == {images["rt-warm-python"][0].name: 1}


def test_the_pool_never_holds_more_than_its_capacity(docker_engine, hostname, images, output):
    executor = build_executor(docker_engine, hostname, output, warm_capacity=1)
    try:
        for n in range(4):
            fixture = FIXTURES[n % 2]
            assert run(executor, images, fixture, "warm.counter", message_id=f"{n}-0").ok
            assert len(warm_containers(docker_engine, hostname)) <= 1
            assert sum(executor.warm.containers().values()) == 1
    finally:
        executor.warm.close()
    assert wait_until(lambda: not warm_containers(docker_engine, hostname), timeout=10)


def test_close_removes_every_container(executor, images, docker_engine, hostname, pins):
    assert run(executor, images, "rt-warm-python", "warm.counter").ok
    assert run(executor, images, "rt-warm-node", "warm.counter").ok
    assert len(warm_containers(docker_engine, hostname)) == 2
    assert executor.warm.close()
    assert not warm_containers(docker_engine, hostname) and not pins.pinned()
    refused = run(executor, images, "rt-warm-python", "warm.counter")
    assert refused.engine_unavailable and "Relay is stopping" in refused.error


def test_an_image_that_does_not_exist_fails_like_an_engine_error_and_is_reported(docker_engine, hostname, output,
                                                                                images):
    missing = replace(invocation(images, "rt-warm-python", "warm.counter"), image="relay-fn-missing:0000000000000000")
    events = RuntimeEvents()
    executor = build_executor(docker_engine, hostname, output, observer=events)
    outcome = executor.run(missing)
    assert (outcome.ok, outcome.engine_unavailable) == (False, True)
    assert "does not exist" in outcome.error
    assert events.missing == [(missing.function, missing.image)]


# --- what a warm container is ---

def test_a_warm_container_is_hardened_and_labelled_without_invocation_ids(executor, images, docker_engine,
                                                                          hostname):
    function, tag = images["rt-warm-python"]
    assert run(executor, images, "rt-warm-python", "warm.counter").ok
    [listed] = warm_containers(docker_engine, hostname)
    details = docker_engine.api.inspect_container(listed["Id"])
    labels = {key: value for key, value in details["Config"]["Labels"].items()
              if key.startswith("relay.") and not key.startswith("relay.build.")}   # not the image's own
    assert labels == {"relay.function": function.name, "relay.hostname": hostname, "relay.image": tag,
                      "relay.warm": "true"}
    host = details["HostConfig"]
    assert details["Config"]["User"] == "10001:10001"
    assert (host["ReadonlyRootfs"], host["CapDrop"], host["SecurityOpt"]) == (True, ["ALL"], ["no-new-privileges"])
    assert (host["Memory"], host["MemorySwap"], host["PidsLimit"], host["NanoCpus"]) == (
        MEMORY_BYTES, MEMORY_BYTES, PIDS_LIMIT, 1_000_000_000)
    assert host["AutoRemove"] and "/tmp" in host["Tmpfs"]
    assert "RELAY_HANDLER" not in " ".join(details["Config"]["Env"])


def test_a_container_that_died_while_idle_is_replaced_before_the_invocation(executor, images, output,
                                                                           docker_engine, hostname):
    assert run(executor, images, "rt-warm-python", "warm.counter", message_id="1-0").ok
    [listed] = warm_containers(docker_engine, hostname)
    docker_engine.api.kill(listed["Id"])
    assert wait_until(lambda: not warm_containers(docker_engine, hostname), timeout=10)
    outcome = run(executor, images, "rt-warm-python", "warm.counter", message_id="2-0")
    assert outcome.ok, outcome.error
    assert count_line(output, images, "rt-warm-python", "2-0").startswith("count 1 ")


def test_prestart_starts_the_containers_once_per_version(docker_engine, hostname, images, output, pins):
    function, tag = images["rt-warm-python"]
    function = replace(function, template=replace(function.template, warm=Warm(containers=2, prestart=True)))
    active = [ActiveFunction(function=function, image=tag)]
    executor = build_executor(docker_engine, hostname, output, pins=pins, warm_capacity=4, functions=lambda: active,
                              environment=lambda function: dict(function.template.env))
    try:
        executor.warm.prestart()
        assert len(warm_containers(docker_engine, hostname)) == 2
        assert executor.warm.containers() == {function.name: 2} and pins.in_use(tag)
        outcome = executor.run(replace(invocation(images, "rt-warm-python", "warm.counter"),
                                       warm=function.template.warm))
        assert outcome.ok and count_line(output, images, "rt-warm-python", "1-0").startswith("count 1 ")
        executor.warm.retire_image(tag)
        executor.warm.prestart()   # once per version: a retired one is not started again
        assert wait_until(lambda: not warm_containers(docker_engine, hostname), timeout=10)
    finally:
        executor.warm.close()


def test_every_change_of_a_functions_container_count_is_reported(docker_engine, hostname, images, output):
    events = RuntimeEvents()
    executor = build_executor(docker_engine, hostname, output, observer=events)
    try:
        assert run(executor, images, "rt-warm-python", "warm.counter").ok
        assert run(executor, images, "rt-warm-python", "warm.leave", message_id="2-0").error
        assert [count for _, count in events.warm_counts] == [1, 0]
    finally:
        executor.warm.close()
