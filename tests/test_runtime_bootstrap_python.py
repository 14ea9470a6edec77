"""The Python bootstrap on its own, run by this interpreter (the container runs it the same way)."""

import json
import subprocess
import sys
import textwrap

import pytest

from relay.functions.runtimes import RUNTIMES

BOOTSTRAP = RUNTIMES["python3.14"].bootstrap_source()


@pytest.fixture
def function_dir(tmp_path):
    directory = tmp_path / "function"
    files = {
        "handler.py": """
            def handler(event):
                print("sync", event["n"])
        """,
        "coroutines.py": """
            import asyncio

            async def handler(event):
                await asyncio.sleep(0)
                print("async", event["n"])

            class Later:
                def __await__(self):
                    yield from asyncio.sleep(0).__await__()
                    print("awaitable ran")

            def awaitable(event):
                return Later()
        """,
        "events/__init__.py": "",
        "events/created.py": """
            def handler(event):
                print("nested", __name__)
        """,
        "namespace/deeper/jobs.py": """
            def run(event):
                print("namespace", __name__, event)
        """,
        "failing.py": """
            def handler(event):
                print("before the failure")
                raise ValueError("boom")

            async def later(event):
                raise KeyError("async boom")

            def exits(event):
                raise SystemExit(3)

            not_callable = 42
        """,
        "bootstrap.py": """
            def handler(event):
                print("a user module may be called bootstrap")
        """,
    }
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "relay_bootstrap.py").write_bytes(BOOTSTRAP)
    return directory


def run(function_dir, handler, event=None, raw=None):
    stdin = raw if raw is not None else json.dumps(event if event is not None else {"n": 1}).encode()
    env = {"RELAY_HANDLER": handler, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-u", "-B", str(function_dir.parent / "opt" / "relay_bootstrap.py")],
                          input=stdin, capture_output=True, cwd=function_dir, env=env, timeout=60)


@pytest.mark.parametrize("handler, expected", [
    ("handler.handler", "sync 1"),
    ("coroutines.handler", "async 1"),
    ("coroutines.awaitable", "awaitable ran"),
    ("events.created.handler", "nested events.created"),
    ("namespace.deeper.jobs.run", "namespace namespace.deeper.jobs {'n': 1}"),
    ("bootstrap.handler", "a user module may be called bootstrap"),
])
def test_handlers_run_and_exit_zero(function_dir, handler, expected):
    result = run(function_dir, handler)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == expected


@pytest.mark.parametrize("handler, message", [
    ("failing.handler", "ValueError: boom"),
    ("failing.later", "KeyError: 'async boom'"),
    ("missing.handler", "ModuleNotFoundError: No module named 'missing'"),
    ("handler.absent", "module 'handler' has no function 'absent'"),
    ("failing.not_callable", "module 'failing' has no function 'not_callable'"),
    ("nodot", "is not of the form module.function"),
])
def test_failures_exit_one_with_the_reason_on_stderr(function_dir, handler, message):
    result = run(function_dir, handler)
    assert result.returncode == 1
    assert message in result.stderr.decode()


def test_a_raised_exception_prints_a_traceback_after_the_output(function_dir):
    result = run(function_dir, "failing.handler")
    assert result.stdout.decode() == "before the failure\n"
    assert result.stderr.decode().startswith("Traceback (most recent call last):")


def test_a_handler_may_choose_its_exit_status(function_dir):
    assert run(function_dir, "failing.exits").returncode == 3


def test_invalid_event_json_fails(function_dir):
    result = run(function_dir, "handler.handler", raw=b"{not json")
    assert result.returncode == 1 and "JSONDecodeError" in result.stderr.decode()


# --- warm: the handler context of each request ---

def nonce(seq):
    return b"%032x" % (0xC0FFEE * seq)


def serve(function_dir, *requests):
    """The bootstrap in warm mode, as a warm container runs it, fed *requests* then end-of-file."""
    from relay.runtime.warm import request

    data = b"".join(request(str(seq).encode(), nonce(seq), handler, variables, json.dumps(event).encode())
                    for seq, (handler, variables, event) in enumerate(requests, 1))
    bootstrap = function_dir.parent / "opt" / "relay_bootstrap.py"
    return subprocess.run(["/bin/sh", "-c", f'exec "{sys.executable}" -u -B "{bootstrap}" --warm 3<&0 </dev/null'],
                          input=data, capture_output=True, cwd=function_dir,
                          env={"PATH": "/usr/bin:/bin", "RELAY_FUNCTION": "fn"}, timeout=60)


def test_a_warm_request_s_context_is_in_the_environment_for_its_handler_call_only(function_dir):
    (function_dir / "context.py").write_text(
        "import json, os\n\n"
        "def show(event):\n"
        "    print(json.dumps({name: value for name, value in os.environ.items() if name.startswith('RELAY_')}))\n")
    first = {"RELAY_MESSAGE_ID": "1-0", "RELAY_EVENT_ID": "evt 1\nnext line", "RELAY_ATTEMPT": "2",
             "RELAY_DEADLINE": "2026-12-06T10:00:06.250Z", "RELAY_IDEMPOTENCY_KEY": "ab" * 16}
    second = {"RELAY_MESSAGE_ID": "2-0", "RELAY_ATTEMPT": "1", "RELAY_DEADLINE": "2026-12-06T10:00:07.000Z",
              "RELAY_IDEMPOTENCY_KEY": "cd" * 16}
    result = serve(function_dir, ("context.show", first, {}), ("context.show", second, {}), ("context.show", {}, {}))
    assert result.returncode == 0, result.stderr.decode()
    replies = result.stdout.decode().split("\x1e\x1frelay:")
    assert replies[0] == "" and replies[1].startswith("ready 3\n")
    shown = [json.loads(reply.partition("\n")[2]) for reply in replies[1:4]]   # each after the previous marker
    assert shown == [{"RELAY_FUNCTION": "fn", "RELAY_HANDLER": "context.show", **first},
                     {"RELAY_FUNCTION": "fn", "RELAY_HANDLER": "context.show", **second},
                     {"RELAY_FUNCTION": "fn", "RELAY_HANDLER": "context.show"}]
    assert replies[4:] == [f"done 3 {nonce(3).decode()} ok\n"]


def test_a_warm_request_s_markers_carry_its_nonce_which_its_handler_cannot_see(function_dir):
    (function_dir / "echo.py").write_text(
        "import os, sys\n\n"
        "def forge(event):\n"
        "    print(event['forged'])\n"
        "    print(event['forged'], file=sys.stderr)\n"
        "    print('environment', sorted(os.environ.values()))\n"
        "    raise RuntimeError('after the forgery')\n")
    forged = "\x1e\x1frelay:done 1 ok"
    result = serve(function_dir, ("echo.forge", {"RELAY_ATTEMPT": "1"}, {"forged": forged}),
                   ("handler.handler", {}, {"n": 2}))
    assert result.returncode == 0, result.stderr.decode()
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    ready, echoed, environment, done, *_ = stdout.split("\n")
    assert (ready, echoed) == ("\x1e\x1frelay:ready 3", forged)
    assert environment.startswith("environment [") and nonce(1).decode() not in environment
    assert done == f"\x1e\x1frelay:done 1 {nonce(1).decode()} error"
    assert stdout.endswith(f"sync 2\n\x1e\x1frelay:done 2 {nonce(2).decode()} ok\n")
    assert stderr.startswith(forged + "\nTraceback") and "RuntimeError: after the forgery" in stderr
    assert stderr.endswith(f"\x1e\x1frelay:end 1 {nonce(1).decode()}\n\x1e\x1frelay:end 2 {nonce(2).decode()}\n")
