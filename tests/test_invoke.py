"""``relay invoke``: one handler run on one event, built and run as ``relay start`` would, on the real engine.

The functions live in a temporary directory; the secret store is a
temporary /var/lib/relay mounted in a private mount namespace
(tests.support.commands), so a test never touches the host's.
"""

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from datetime import datetime

import pytest

from relay.functions import load_function
from relay.runtime.images import ImageBuilder
from tests.support.commands import relay_secret, with_service_env
from tests.support.relay_process import ROOT, base_env
from tests.support.runtime import remove_images
from tests.support.workers import write_function

EXAMPLES = ROOT / "examples" / "functions"
INSERT = {"event_id": "evt_1", "event_name": "INSERT", "table_name": "users", "new_image": {"id": "u1"}}

TEMPLATE = """\
runtime: python3.14
env:
  GREETING: hello
secrets:
  API_TOKEN: invoke-token
events:
  - handler: handlers.inspect
    pattern:
      kind: [inspect]
  - handler: handlers.fail
    pattern:
      kind: [fail]
  - handler: handlers.after_fail
    pattern:
      kind: [fail]
  - handler: handlers.slow
    pattern:
      kind: [slow]
    timeout: 1s
  - handler: handlers.context
    pattern:
      kind: [context]
    timeout: 30s
"""

HANDLERS = """\
import json, os, sys, time

def inspect(event):
    print("uid", os.getuid(), "greeting", os.environ["GREETING"], "token", os.environ["API_TOKEN"])
    print("handler", os.environ["RELAY_HANDLER"], "id", event["id"])
    try:
        open("/outside", "w")
    except OSError as error:
        print("root filesystem", error.strerror)

def fail(event):
    print("failing", file=sys.stderr)
    sys.exit(3)

def after_fail(event):
    print("after fail ran")

def slow(event):
    time.sleep(30)

def context(event):
    print(json.dumps({name: value for name, value in os.environ.items() if name.startswith("RELAY_")}))
"""

WARM_TEMPLATE = """\
runtime: python3.14
warm:
  containers: 1
events:
  - handler: handlers.count
    pattern:
      kind: [count]
"""

WARM_HANDLERS = """\
calls = 0

def count(event):
    global calls
    calls += 1
    print("warm call", calls, "id", event["id"])
"""


@pytest.fixture(scope="module")
def functions(tmp_path_factory, docker_engine):
    """Two functions (one cold, one warm) and a secret store holding invoke-token; their images removed after."""
    root = tmp_path_factory.mktemp("functions")
    suffix = secrets.token_hex(3)
    cold, warm = f"invoke-{suffix}", f"invoke-warm-{suffix}"
    write_function(root, cold, TEMPLATE, {"handlers.py": HANDLERS})
    write_function(root, warm, WARM_TEMPLATE, {"handlers.py": WARM_HANDLERS})
    state = tmp_path_factory.mktemp("state")
    assert relay_secret(state, "set", "invoke-token", input=b"s3cret-token").returncode == 0
    yield root, state, cold, warm
    tags = [tag for image in docker_engine.images.list() for tag in image.tags
            if tag.startswith((f"relay-fn-{cold}:", f"relay-fn-{warm}:"))]
    remove_images(docker_engine, tags)


def invoke(state, *args, event=None, env=None, program=(sys.executable, "-m", "relay")):
    """``relay invoke <args>`` with *state* mounted at /var/lib/relay; *event* (a dict or text) on stdin."""
    os.makedirs("/var/lib/relay", exist_ok=True)
    script = 'mount --bind "$1" /var/lib/relay; shift; exec "$@"'
    command = [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "sh", "-ec", script,
               "relay-invoke", str(state), *program, "invoke", *args]
    text = event if isinstance(event, str) or event is None else json.dumps(event)
    return subprocess.run(command, cwd=ROOT, env=env or base_env(), input=text or "", capture_output=True,
                          text=True, timeout=600)


def leftover_containers(docker_engine, function):
    return docker_engine.containers.list(all=True, filters={"label": f"relay.function={function}"})


def test_the_example_functions_run_as_relay_runs_them(tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps(INSERT))
    result = invoke(tmp_path, "user-events-python", f"--dir={EXAMPLES}", f"--event={event}")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r'relay: function "user-events-python" handler "events.created.handler" '
                        r'message "invoke-[0-9a-f]{16}" event "evt_1": User created: u1\n', result.stdout)
    assert "relay invoke: events.created.handler succeeded in " in result.stderr
    node = invoke(tmp_path, "welcome-email-node", "handler.handler", f"--dir={EXAMPLES}",
                  event={**INSERT, "new_image": {"email": "a@example.com"}})
    assert node.returncode == 0, node.stderr
    assert node.stdout.endswith(": Sending welcome email to a@example.com\n")


def test_the_same_hardening_env_and_secrets_and_the_image_relay_start_would_use(functions, docker_engine):
    root, state, cold, _ = functions
    result = invoke(state, cold, f"--dir={root}", event={"kind": "inspect", "id": 7})
    assert result.returncode == 0, result.stderr
    lines = [line.split('": ', 1)[1] for line in result.stdout.splitlines()]
    assert lines == ["uid 10001 greeting hello token s3cret-token", "handler handlers.inspect id 7",
                     "root filesystem Read-only file system"]
    assert "s3cret-token" not in result.stderr
    # The tag start would run is the one invoke built: preparing it again builds nothing.
    tags = [tag for image in docker_engine.images.list() for tag in image.tags if tag.startswith(f"relay-fn-{cold}:")]
    assert tags == [ImageBuilder(docker_engine).prepare(load_function(root / cold))]
    assert leftover_containers(docker_engine, cold) == []


def test_the_first_failure_stops_the_run_and_its_exit_status_is_the_command_s(functions, docker_engine):
    root, state, cold, _ = functions
    result = invoke(state, cold, f"--dir={root}", event={"kind": "fail", "id": 1})
    assert result.returncode == 3, result.stderr
    assert re.fullmatch(f'relay: function "{cold}" handler "handlers.fail" message "invoke-[0-9a-f]{{16}}": failing\n',
                        result.stdout)
    assert "after fail ran" not in result.stdout
    assert f'relay invoke: function "{cold}" handler "handlers.fail": exited with code 3' in result.stderr
    # Named, the second handler runs alone; the event does not have to match it.
    named = invoke(state, cold, "handlers.after_fail", f"--dir={root}", event={"kind": "other", "id": 2})
    assert named.returncode == 0, named.stderr
    assert named.stdout.endswith(": after fail ran\n")
    assert ("relay invoke: note: the event does not match handlers.after_fail's pattern "
            '(kind: "other" is not one of ["fail"]); running it anyway') in named.stderr


def test_the_handler_context_says_it_is_a_first_attempt_outside_any_stream(functions):
    root, state, cold, _ = functions
    before = time.time()
    result = invoke(state, cold, f"--dir={root}", event={"kind": "context", "event_id": "evt_7"})
    assert result.returncode == 0, result.stderr
    prefix, _, printed = result.stdout.partition('": ')
    seen = json.loads(printed)
    assert re.fullmatch(r"invoke-[0-9a-f]{16}", seen.pop("RELAY_MESSAGE_ID")) and seen.get("RELAY_EVENT_ID")
    assert 'message "invoke-' in prefix
    assert re.fullmatch(r"invoke-[0-9a-f]{32}", seen.pop("RELAY_IDEMPOTENCY_KEY"))
    assert before + 30 < datetime.fromisoformat(seen.pop("RELAY_DEADLINE")).timestamp() < time.time() + 30
    assert seen == {"RELAY_FUNCTION": cold, "RELAY_HANDLER": "handlers.context", "RELAY_EVENT_ID": "evt_7",
                    "RELAY_ATTEMPT": "1"}


def test_a_handler_past_its_timeout_is_killed_and_exits_124(functions, docker_engine):
    root, state, cold, _ = functions
    result = invoke(state, cold, f"--dir={root}", event={"kind": "slow", "id": 3})
    assert result.returncode == 124, result.stderr
    assert "timed out after 1s" in result.stderr
    assert leftover_containers(docker_engine, cold) == []


def test_a_warm_function_runs_in_a_warm_container_that_is_removed_afterwards(functions, docker_engine):
    root, state, _, warm = functions
    result = invoke(state, warm, f"--dir={root}", event={"kind": "count", "id": 4})
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(": warm call 1 id 4\n")
    assert leftover_containers(docker_engine, warm) == []


@pytest.mark.parametrize(("args", "event", "status", "message"), [
    (("nope",), {"kind": "inspect"}, 1, 'relay invoke: no function "nope" in '),
    (("{cold}", "handlers.missing"), {"kind": "inspect"}, 1,
     'has no handler "handlers.missing"; its handlers: handlers.after_fail, handlers.context, handlers.fail, '
     "handlers.inspect, handlers.slow"),
    (("{cold}",), {"kind": "nothing"}, 3, 'relay invoke: no handler of "{cold}" matches this event'),
    (("{cold}",), "{not json", 1, "the 'event' field is not valid JSON"),
    (("{cold}",), "[1, 2]", 1, "the event is a JSON list, not an object; Relay would dead-letter this entry"),
])
def test_what_cannot_run_says_why_in_one_line(functions, args, event, status, message):
    root, state, cold, _ = functions
    result = invoke(state, *(arg.format(cold=cold) for arg in args), f"--dir={root}", event=event)
    assert result.returncode == status
    assert result.stdout == ""
    assert message.format(cold=cold) in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_missing_secret_or_an_unreachable_engine_stops_it_before_any_container(functions, tmp_path):
    root, state, cold, _ = functions
    empty_store = tmp_path / "empty-state"
    empty_store.mkdir()
    missing = invoke(empty_store, cold, f"--dir={root}", event={"kind": "inspect", "id": 5})
    assert missing.returncode == 1
    assert missing.stderr == (f'relay invoke: function "{cold}": cannot set API_TOKEN: '
                              "secret 'invoke-token' is not in the secret store\n")
    unreachable = invoke(state, cold, f"--dir={root}", event={"kind": "inspect", "id": 6},
                         env=base_env(DOCKER_HOST="tcp://127.0.0.1:1"))
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("relay invoke: Docker engine at tcp://127.0.0.1:1 is unreachable")
    assert len(unreachable.stderr.splitlines()) == 1


def test_the_docker_variables_come_from_the_services_environment_file(functions, tmp_path):
    root, state, cold, _ = functions
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "relay.env").write_text("# the service's Docker engine\nDOCKER_HOST=tcp://127.0.0.1:1\n")
    result = invoke(state, cold, f"--dir={root}", event={"kind": "inspect", "id": 7},
                    program=with_service_env([sys.executable, "-m", "relay"], etc))
    assert result.returncode == 1
    assert result.stderr.startswith("relay invoke: Docker engine at tcp://127.0.0.1:1 is unreachable")


def test_relay_pyz_invokes_a_handler(pyz, tmp_path):
    result = invoke(tmp_path, "user-events-python", f"--dir={EXAMPLES}", event=INSERT,
                    program=(sys.executable, str(pyz)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("User created: u1\n")


def test_a_whole_invocation_never_imports_gevent():
    probe = ("import sys\nfrom relay.entry import main\n"
             f"code = main(['invoke', 'user-events-python', '--dir={EXAMPLES}'])\n"
             "print('CODE', code, 'GEVENT', 'gevent' in sys.modules, file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=base_env(), capture_output=True,
                            text=True, timeout=600, input=json.dumps(INSERT))
    assert "CODE 0 GEVENT False" in result.stderr, result.stderr
