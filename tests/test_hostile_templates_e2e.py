"""Hostile templates and the webhook's secret under a real ``python -m relay start``
(real redis-server, Docker builds and containers), /functions and /var/lib/relay
bind-mounted from temporary directories in a private mount namespace."""

import json
import os
import stat

from relay.functions.document import MAX_NODES
from relay.gitsync.layout import Layout
from relay.gitsync.source import make_source, save_source
from relay.secrets.store import FileSecretStore
from relay.view.reader import StateReader
from relay.view.records import FAILED, READY
from tests.support.hot_reload import publish, remove_images
from tests.support.templates import alias_bomb
from tests.support.workers import Worker, engine_env, namespaced_relay_command, wait_until, write_function

SOURCE = 'def handler(event):\n    print("{name} v1 n=" + str(event["n"]), flush=True)\n'
TEMPLATE = """runtime: python3.14
events:
  - handler: app.handler
    pattern: {{kind: [{name}]}}
secrets:
  {variable}: {secret}
"""
REFUSAL = "is the git webhook's HMAC secret (relay git set --webhook-secret) and is never handed to a function"


def webhook_secret(state, name):
    save_source(Layout(state_dir=state), make_source("git@github.com:acme/repo.git", webhook_secret=name))


def start_relay(redis_server, tmp_path, functions, state, token):
    worker = Worker(namespaced_relay_command(functions, state, f"relay-hostile-{token}"), engine_env(redis_server),
                    tmp_path, "relay")
    worker.wait_for('msg="Relay started"', timeout=180)
    return worker


def test_a_bomb_hot_reloaded_into_a_running_relay_never_stops_events_and_the_state_shows_a_short_error(
        redis_server, redis_client, docker_engine, tmp_path, token):
    functions, state = tmp_path / "functions", tmp_path / "state"
    functions.mkdir()
    state.mkdir()
    steady = f"steady-{token}"
    write_function(functions, steady, TEMPLATE.format(name=steady, variable="API_TOKEN", secret="api-token"),
                   {"app.py": SOURCE.format(name=steady)})
    FileSecretStore(state / "secrets").set("api-token", b"token-value")
    worker = None
    try:
        worker = start_relay(redis_server, tmp_path, functions, state, token)
        publish(redis_client, steady, 1)
        worker.wait_for(f"{steady} v1 n=1", where="stdout")

        (functions / steady / "template.yaml").write_text(alias_bomb("secrets: {API_TOKEN: *l7}"))
        worker.wait_for('msg="Invalid function; the previous version keeps serving"')
        publish(redis_client, steady, 2)             # events keep flowing: the old version serves
        worker.wait_for(f"{steady} v1 n=2", where="stdout")
        reader = StateReader(state / "db.sqlite3")
        expected = f"/functions/{steady}/template.yaml: expands to more than {MAX_NODES} nodes"

        def row():
            record = reader.function(steady)
            return record.status, record.last_reconcile_status, record.last_error

        wait_until(lambda: row() == (READY, FAILED, expected), timeout=20, what="the state to show the short error")
        assert len(worker.stderr) < 100_000
        assert "Traceback" not in worker.stderr      # the refusal is one log line, not a gevent report too
    finally:
        if worker is not None:
            worker.kill()
        remove_images(docker_engine, token)


def test_the_webhook_secret_is_never_handed_to_a_function_and_the_store_is_narrowed_at_start(
        redis_server, redis_client, docker_engine, tmp_path, token):
    functions, state = tmp_path / "functions", tmp_path / "state"
    functions.mkdir()
    steady, hooked = f"steady-{token}", f"hooked-{token}"
    store = FileSecretStore(state / "secrets")
    store.set("api-token", b"token-value")
    store.set("github-webhook", b"hmac-key")
    os.chmod(state / "secrets", 0o755)               # as an older Relay or a hand-made directory left it
    webhook_secret(state, "github-webhook")
    write_function(functions, steady, TEMPLATE.format(name=steady, variable="API_TOKEN", secret="api-token"),
                   {"app.py": SOURCE.format(name=steady)})
    write_function(functions, hooked, TEMPLATE.format(name=hooked, variable="HOOK", secret="github-webhook"),
                   {"app.py": SOURCE.format(name=hooked)})
    worker = None
    try:
        worker = start_relay(redis_server, tmp_path, functions, state, token)
        refused = [line for line in worker.stderr.splitlines() if 'msg="Invalid function; skipped"' in line]
        assert len(refused) == 1 and hooked in refused[0] and "secrets.HOOK" in refused[0], worker.stderr[-3000:]
        assert REFUSAL in refused[0]
        assert stat.S_IMODE((state / "secrets").stat().st_mode) == 0o700
        publish(redis_client, steady, 1)
        worker.wait_for(f"{steady} v1 n=1", where="stdout")

        webhook_secret(state, "api-token")           # named after the load: still never handed over
        publish(redis_client, steady, 2)
        worker.wait_for(f"cannot set API_TOKEN: secret 'api-token' {REFUSAL}")
        assert f"{steady} v1 n=2" not in worker.stdout
        assert "token-value" not in worker.stderr and "hmac-key" not in worker.stderr
        assert json.loads((state / "git" / "source.json").read_text())["webhook_secret"] == "api-token"
    finally:
        if worker is not None:
            worker.kill()
        remove_images(docker_engine, token)


FIFO = "is a FIFO (named pipe), not a regular file; Relay reads only regular files"
NUMERIC = """runtime: python3.14
events:
  - handler: app.handler
    pattern: {{kind: [{name}], price: {{numeric: [">", 100]}}}}
"""


def refusals(worker):
    return [line for line in worker.stderr.splitlines() if 'msg="Invalid function; skipped"' in line]


def test_fifos_are_refused_by_a_running_relay_which_keeps_serving_the_other_functions(
        redis_server, redis_client, docker_engine, tmp_path, token):
    """FIFOs where Relay reads files -- template.yaml, a handler module, requirements.txt,
    package.json -- at start and hot-reloaded: each function is refused with one log line
    naming the file, never opened, and the other functions keep serving. Before, a FIFO
    template was taken for a missing one and a FIFO module or manifest was silently left out
    of the image (and ``relay validate`` hung on the template)."""
    functions, state = tmp_path / "functions", tmp_path / "state"
    functions.mkdir()
    steady = f"steady-{token}"
    write_function(functions, steady, TEMPLATE.format(name=steady, variable="API_TOKEN", secret="api-token"),
                   {"app.py": SOURCE.format(name=steady)})
    FileSecretStore(state / "secrets").set("api-token", b"token-value")
    piped = {}
    for kind, runtime in (("template", "python3.14"), ("handler", "python3.14"), ("requirements", "python3.14"),
                          ("package", "node24")):
        name = f"piped-{kind}-{token}"
        module = {"python3.14": "app.py", "node24": "app.mjs"}[runtime]
        template = f"runtime: {runtime}\nevents:\n  - handler: app.handler\n    pattern: {{kind: [{name}]}}\n"
        piped[kind] = write_function(functions, name, template, {module: "" if kind == "handler" else "x = 1\n"})
    os.unlink(piped["template"] / "template.yaml")
    os.mkfifo(piped["template"] / "template.yaml")
    os.unlink(piped["handler"] / "app.py")
    os.mkfifo(piped["handler"] / "app.py")
    os.mkfifo(piped["requirements"] / "requirements.txt")
    os.mkfifo(piped["package"] / "package.json")
    worker = None
    try:
        worker = start_relay(redis_server, tmp_path, functions, state, token)
        refused = {line.split("function=", 1)[1].split(" ", 1)[0]: line for line in refusals(worker)}
        assert sorted(refused) == sorted(directory.name for directory in piped.values()), worker.stderr[-3000:]
        inside = {"template": "template.yaml", "handler": "app.py", "requirements": "requirements.txt",
                  "package": "package.json"}
        for kind, directory in piped.items():
            assert f"/functions/{directory.name}/{inside[kind]}" in refused[directory.name]
            assert FIFO in refused[directory.name]
        publish(redis_client, steady, 1)
        worker.wait_for(f"{steady} v1 n=1", where="stdout")

        late = functions / f"late-{token}"                 # hot reload: a new function whose template is a FIFO
        late.mkdir()
        os.mkfifo(late / "template.yaml")
        wait_until(lambda: len(refusals(worker)) == 5, timeout=30, what="the late FIFO to be refused")
        assert f"/functions/{late.name}/template.yaml" in refusals(worker)[-1] and FIFO in refusals(worker)[-1]
        publish(redis_client, steady, 2)                   # the worker never waited on it
        worker.wait_for(f"{steady} v1 n=2", where="stdout")

        priced = f"priced-{token}"                         # a warning is logged and changes nothing
        write_function(functions, priced, NUMERIC.format(name=priced), {"app.py": SOURCE.format(name=priced)})
        worker.wait_for('msg="Template warning; the function loads all the same"')
        warning = next(line for line in worker.stderr.splitlines() if "Template warning" in line)
        assert f"function={priced} " in warning and "line=4 " in warning
        assert "field=events[0].pattern.price.numeric " in warning and "write {gt: 100}" in warning
        assert "Traceback" not in worker.stderr
    finally:
        if worker is not None:
            worker.kill()
        remove_images(docker_engine, token)
