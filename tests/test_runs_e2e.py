"""The run ledger through a real ``relay start``, real Redis and real containers.

One Relay runs five handlers once each: one that fails with exit code 3
after writing to both streams (and printing the secret it was given), one
that times out, one that goes past its container's memory limit, one that
succeeds, and one warm handler that raises. Every attempt has its record
(cold or warm, container, exit code, the ends of stdout and stderr, the
secret masked), a timeout and an out-of-memory kill are told apart, and the
dead letters name the last attempt's run, its status, exit code and stderr,
as ``relay dlq show`` prints them.
"""

import secrets

import pytest

from relay.runs.record import RunStatus, Settled, decode
from relay.stream.deadletters import DeadLetters
from relay.stream.keys import runs_stream
from tests.support.commands import relay_secret
from tests.support.relay_process import base_env, run_relay
from tests.support.workers import (
    Worker,
    engine_env,
    namespaced_relay_command,
    pending,
    publish,
    wait_until,
    write_function,
)

pytestmark = pytest.mark.integration

HANDLERS = """
import os
import sys
import time


def fails(event):
    print("charging order", event["n"], flush=True)
    print(f"token rejected: {os.environ['API_TOKEN']}", file=sys.stderr, flush=True)
    sys.exit(3)


def slow(event):
    print("starting a long job", flush=True)
    time.sleep(30)


def hog(event):
    print("allocating", flush=True)
    blocks = [bytearray(16 * 1024 * 1024) for _ in range(64)]     # 1 GiB against the 128 MiB limit
    print(len(blocks))


def ok(event):
    print("done", event["n"], flush=True)


def raises(event):
    raise ValueError(f"no such sku {event['n']}")
"""
COLD = """
runtime: python3.14
secrets:
  API_TOKEN: runs-token
events:
  - handler: app.fails
    pattern: {kind: [fails]}
    retries: 0
  - handler: app.slow
    pattern: {kind: [slow]}
    timeout: 2s
    retries: 0
  - handler: app.hog
    pattern: {kind: [hog]}
    retries: 0
  - handler: app.ok
    pattern: {kind: [ok]}
"""
WARM = """
runtime: python3.14
warm: {containers: 1}
events:
  - handler: app.raises
    pattern: {kind: [raises]}
    retries: 0
"""


def runs_of(client):
    return {run.entry: run for run in (decode(*entry) for entry in client.xrange(runs_stream("events")))}


def test_every_attempt_is_on_record_and_a_dead_letter_says_why(redis_server, redis_client, docker_engine, workers,
                                                               tmp_path):
    suffix = secrets.token_hex(3)
    cold, warm = f"runs-cold-{suffix}", f"runs-warm-{suffix}"
    functions, state = tmp_path / "functions", tmp_path / "state"
    write_function(functions, cold, COLD, {"app.py": HANDLERS})
    write_function(functions, warm, WARM, {"app.py": HANDLERS})
    state.mkdir()
    token = "tok_" + secrets.token_hex(12)
    assert relay_secret(state, "set", "runs-token", input=token.encode()).returncode == 0
    relay = Worker(namespaced_relay_command(functions, state, f"runs-{suffix}"), engine_env(redis_server),
                   tmp_path, "relay")
    workers.append(relay)
    relay.wait_for('msg="Relay started"', timeout=300)
    ids = {kind: publish(redis_client, {"kind": kind, "n": n, "event_id": f"evt_{kind}"})
           for n, kind in enumerate(("fails", "slow", "hog", "ok", "raises"))}
    wait_until(lambda: pending(redis_client) == 0 and len(runs_of(redis_client)) == 5, timeout=180,
               what="every entry to be settled and on record")
    runs = runs_of(redis_client)

    failed = runs[ids["fails"]]
    assert (failed.function, failed.handler, failed.attempt, failed.event_id) == (cold, "app.fails", 1, "evt_fails")
    assert (failed.status, failed.exit_code, failed.mode) == (RunStatus.FAILED, 3, "cold")
    assert len(failed.container) == 64 and failed.host == f"runs-{suffix}" and failed.pid > 1
    assert failed.stdout == "charging order 0" and failed.stderr == "token rejected: ***"
    assert failed.settled is Settled.DEAD_LETTERED and failed.reason == f"attempts exhausted for {cold}/app.fails"
    assert token.encode() not in b"".join(value for _id, fields in redis_client.xrange(runs_stream("events"))
                                          for value in fields.values())

    timed_out, killed = runs[ids["slow"]], runs[ids["hog"]]
    assert (timed_out.status, timed_out.exit_code, timed_out.stdout) == (RunStatus.TIMED_OUT, None,
                                                                         "starting a long job")
    assert 2000 <= timed_out.duration_ms < 30_000
    assert (killed.status, killed.exit_code, killed.stdout) == (RunStatus.KILLED, 137, "allocating")

    succeeded = runs[ids["ok"]]
    assert (succeeded.status, succeeded.exit_code, succeeded.stdout, succeeded.settled) == (
        RunStatus.SUCCEEDED, 0, "done 3", Settled.ACKNOWLEDGED)

    raised = runs[ids["raises"]]
    assert (raised.function, raised.mode, raised.status) == (warm, "warm", RunStatus.FAILED)
    assert "ValueError: no such sku 4" in raised.stderr

    letters = {letter.original_id: letter for letter in DeadLetters(redis_client, "events").newest()}
    assert set(letters) == {ids["fails"], ids["slow"], ids["hog"], ids["raises"]}
    assert (letters[ids["fails"]].run_id, letters[ids["fails"]].run_status, letters[ids["fails"]].exit_code,
            letters[ids["fails"]].stderr) == (failed.run_id, "failed", 3, "token rejected: ***")
    assert (letters[ids["slow"]].run_status, letters[ids["slow"]].exit_code) == ("timed out", None)
    assert (letters[ids["hog"]].run_status, letters[ids["hog"]].exit_code) == ("killed", 137)
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM="events")
    shown = run_relay("dlq", "show", letters[ids["fails"]].dlq_id, env=env).stdout
    assert "Last attempt:    failed, exit code 3\n" in shown
    assert f"Run:             {failed.run_id} (relay runs show {failed.run_id})\n" in shown
    assert shown.endswith("Stderr (its end):\n  token rejected: ***\n")

    # relay runs, on the records the worker wrote: the list, one entry's attempts, and the filters.
    listed = run_relay("runs", "ls", env=env)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 6     # the header and five runs
    for kind, outcome in (("fails", "failed"), ("slow", "timed out"), ("hog", "killed"), ("ok", "succeeded")):
        assert any(line.endswith(ids[kind]) and outcome in line for line in listed.stdout.splitlines()), kind
    report = run_relay("runs", "show", ids["fails"], env=env).stdout
    for expected in (f"{cold}/app.fails", "exit code 3", "charging order 0", "token rejected: ***",
                     failed.run_id, "dead-lettered"):
        assert expected in report, expected
    assert token not in report
    killed_only = run_relay("runs", "ls", "--status=killed,timed-out", f"--function={cold}", env=env).stdout
    assert sorted(line.split()[-1] for line in killed_only.splitlines()[1:]) == sorted([ids["hog"], ids["slow"]])
    assert relay.stop() == 0
