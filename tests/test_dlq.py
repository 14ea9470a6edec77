"""``relay dlq`` against a real redis-server, run as an operator would (``python -m relay``)."""

import json
import os
import subprocess
import time

import pytest

from relay.errors import DeadLetterError
from relay.stream import keys
from relay.stream.deadletters import DeadLetter, DeadLetters
from tests.support.commands import with_service_env
from tests.support.relay_process import ROOT, base_env, relay_command, run_relay
from tests.support.workers import Worker, engine_env, harness_command, pending, publish, wait_until, write_function

DLQ = "relay:events:dlq"
EVENT = '{"event_id":"evt_1","n":1}'


@pytest.fixture
def dlq(redis_server, redis_client):
    """relay dlq with *args*, against this server's stream "events"; the CompletedProcess."""

    def run(*args, input=None):
        env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM="events", REDIS_GROUP="relay")
        return run_relay("dlq", *args, env=env, input=input)

    return run


def dead_letter(client, event=EVENT, reason="attempts exhausted for orders/app.handler", attempts=5,
                original_id="1-0", **extra):
    """A dead-letter entry exactly as the settler writes it; its id."""
    fields = {keys.DLQ_ORIGINAL_STREAM: "events", keys.DLQ_ORIGINAL_ID: original_id, keys.DLQ_GROUP: "relay",
              keys.DLQ_CONSUMER: "worker-a", keys.EVENT: event, keys.DLQ_REASON: reason,
              keys.DLQ_ATTEMPTS: str(attempts), keys.DLQ_TIMESTAMP: "2026-12-05T10:00:00Z", **extra}
    return client.xadd(DLQ, fields).decode()


def test_ls_of_an_empty_dead_letter_stream_prints_its_header_only(dlq):
    result = dlq("ls")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.split() == ["DLQ", "ID", "ORIGINAL", "ID", "AGE", "ATTEMPTS", "FUNCTION", "REASON"]


def test_ls_lists_oldest_first_and_filters(dlq, redis_client):
    first = dead_letter(redis_client, original_id="1-0")
    second = dead_letter(redis_client, original_id="2-0", reason="attempts exhausted for users/a.h, orders/b.h")
    third = dead_letter(redis_client, original_id="3-0", reason="the event is a JSON list, not an object",
                        attempts=1)
    rows = dlq("ls").stdout.splitlines()[1:]
    assert [row.split()[0] for row in rows] == [first, second, third]
    assert rows[1].split()[1:5] == ["2-0", "0s", "5", "users/a.h,orders/b.h"]
    assert rows[2].split()[4] == "-" and rows[2].endswith("the event is a JSON list, not an object")
    assert [row.split()[0] for row in dlq("ls", "--function=orders").stdout.splitlines()[1:]] == [first, second]
    assert [row.split()[0] for row in dlq("ls", "--limit=2").stdout.splitlines()[1:]] == [second, third]
    assert dlq("ls", "--since=1h").stdout.count("\n") == 4


def test_ls_since_reads_the_age_from_the_entry_id(dlq, redis_client):
    old_ms = int(time.time() * 1000) - 2 * 3600 * 1000
    redis_client.xadd(DLQ, {keys.EVENT: EVENT, keys.DLQ_REASON: "old"}, id=f"{old_ms}-0")
    recent = dead_letter(redis_client)
    assert [row.split()[0] for row in dlq("ls", "--since=1h").stdout.splitlines()[1:]] == [recent]
    assert dlq("ls").stdout.splitlines()[1].split()[2] == "2h"


def test_ls_json_has_every_field_and_keeps_an_event_that_is_not_utf8(dlq, redis_client):
    dead_letter(redis_client)
    dead_letter(redis_client, event=b"\xff\xfe{", reason="the 'event' field is not UTF-8 text")
    lines = [json.loads(line) for line in dlq("ls", "--json").stdout.splitlines()]
    assert lines[0]["event"] == EVENT and lines[0]["targets"] == ["orders/app.handler"]
    assert {"dlq_id", "original_id", "original_stream", "group", "consumer", "reason", "attempts", "timestamp",
            "truncated", "event_bytes"} <= set(lines[0])
    assert "event" not in lines[1] and lines[1]["event_base64"] == "//57"


def test_show_prints_every_field_and_the_event_pretty(dlq, redis_client):
    entry = dead_letter(redis_client)
    result = dlq("show", entry)
    assert result.returncode == 0
    assert f"DLQ ID:          {entry}" in result.stdout
    assert "Reason:          attempts exhausted for orders/app.handler" in result.stdout
    assert result.stdout.endswith('Event:\n{\n  "event_id": "evt_1",\n  "n": 1\n}\n')


def test_show_and_json_name_the_schedule_occurrence_a_dead_letter_was(dlq, redis_client):
    occurrence = "schedule:reports:app.nightly:2026-12-05T03:00:00Z"
    entry = dead_letter(redis_client, **{keys.DLQ_SCHEDULE: occurrence})
    plain = dead_letter(redis_client)
    assert f"Schedule:        {occurrence}\n" in dlq("show", entry).stdout
    assert "Schedule:" not in dlq("show", plain).stdout
    records = [json.loads(line) for line in dlq("ls", "--json").stdout.splitlines()]
    assert [record["schedule"] for record in records] == [occurrence, None]


def test_show_and_json_give_the_last_attempt_s_outcome_and_run(dlq, redis_client):
    entry = dead_letter(redis_client, **{keys.DLQ_RUN_ID: "1796600000000-3", keys.DLQ_RUN_STATUS: "killed",
                                         keys.DLQ_EXIT_CODE: "137",
                                         keys.DLQ_STDERR: "Traceback (most recent call last):\nMemoryError\x1b[2J"})
    unwritten = dead_letter(redis_client, **{keys.DLQ_RUN_STATUS: "timed out"})
    shown = dlq("show", entry).stdout
    assert "Last attempt:    killed, exit code 137\n" in shown
    assert "Run:             1796600000000-3 (relay runs show 1796600000000-3)\n" in shown
    assert shown.endswith("Stderr (its end):\n  Traceback (most recent call last):\n  MemoryError\\x1b[2J\n")
    assert "Last attempt:    timed out\n" in dlq("show", unwritten).stdout
    assert "could not be written to the run ledger" in dlq("show", unwritten).stdout
    records = [json.loads(line) for line in dlq("ls", "--json").stdout.splitlines()]
    assert [(record["run_id"], record["run_status"], record["exit_code"]) for record in records] == [
        ("1796600000000-3", "killed", 137), (None, "timed out", None)]
    assert records[0]["stderr"].endswith("MemoryError\x1b[2J")


HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e\x7f\r\x00"   # title, clear screen, C1 CSI, bidi override, DEL


def printable_lines(text):
    return all(line.isprintable() for line in text.split("\n"))


@pytest.mark.parametrize("event", [f'{{"event_id":"evt_1","note":"{HOSTILE}"}}', f"plain text {HOSTILE}\nline 2"])
def test_show_escapes_every_control_character_a_producer_wrote(dlq, redis_client, event):
    entry = dead_letter(redis_client, event=event, reason=f"handler failed: {HOSTILE}", attempts="\x1b[5m",
                        original_id=f"1-0{HOSTILE}", **{keys.DLQ_CONSUMER: f"worker{HOSTILE}",
                                                         keys.DLQ_GROUP: f"relay{HOSTILE}",
                                                         keys.DLQ_ORIGINAL_STREAM: f"events{HOSTILE}",
                                                         keys.DLQ_TIMESTAMP: f"2026{HOSTILE}"})
    result = dlq("show", entry)
    assert (result.returncode, result.stderr) == (0, "")
    assert printable_lines(result.stdout), result.stdout
    assert "Consumer:        worker\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202e\\x7f\\r\\x00" in result.stdout
    assert "Attempts:        \\x1b[5m" in result.stdout
    assert "\\x1b[2J" in result.stdout.partition("Event:\n")[2]
    assert json.loads(dlq("show", "--json", entry).stdout)["consumer"] == f"worker{HOSTILE}"


def test_ls_escapes_every_control_character_a_producer_wrote(dlq, redis_client):
    dead_letter(redis_client, reason=f"attempts exhausted for orders{HOSTILE}/app.handler",
                original_id=f"1-0{HOSTILE}")
    result = dlq("ls")
    assert (result.returncode, result.stderr) == (0, "")
    assert printable_lines(result.stdout), result.stdout
    assert "orders\\x1b]0;owned" in result.stdout.splitlines()[1]


@pytest.mark.parametrize("attempts", ["\u00b2", "\u0663", "9" * 5000, "-1", " 3", "3.0"])
def test_attempts_that_are_not_ascii_digits_are_shown_as_text(dlq, redis_client, attempts):
    entry = dead_letter(redis_client, attempts=attempts)
    listed = dlq("ls")
    assert (listed.returncode, listed.stderr) == (0, "")
    shown = attempts if len(attempts) < 40 else attempts[:37] + "..."
    assert shown.strip() in listed.stdout.splitlines()[1]
    detail = dlq("show", entry)
    assert (detail.returncode, detail.stderr) == (0, "")
    assert f"Attempts:        {shown}\n" in detail.stdout
    assert json.loads(dlq("ls", "--json").stdout)["attempts"] is None


def test_a_limit_that_is_not_ascii_digits_is_refused_in_one_line(dlq):
    assert dlq("ls", "--limit=\u00b2").stderr == "relay dlq ls: --limit='\u00b2' is not a positive whole number\n"


def test_dlq_reads_the_services_environment_file_for_what_the_environment_lacks(redis_server, redis_client,
                                                                                 tmp_path):
    """A host installed as the README says: the settings are in /etc/relay/relay.env, and ``sudo relay dlq ls``
    runs without them in its environment."""
    entry = dead_letter(redis_client)
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "relay.env").write_text(f"# Environment of the relay service\nREDIS_URI='{redis_server.address}'\n"
                                   "REDIS_STREAM=events  \nREDIS_GROUP=relay\n")
    os.chmod(etc / "relay.env", 0o600)
    mine = tmp_path / "mine.env"
    mine.write_text(f"REDIS_URI={redis_server.address}\nREDIS_STREAM=other\n")

    def dlq_ls(*args, **variables):
        return subprocess.run(with_service_env(relay_command("dlq", "ls", *args), etc), cwd=ROOT,
                              env=base_env(**variables), capture_output=True, text=True, timeout=60)

    found = dlq_ls()
    assert (found.returncode, found.stderr) == (0, "")
    assert [row.split()[0] for row in found.stdout.splitlines()[1:]] == [entry]
    assert dlq_ls(REDIS_STREAM="other").stdout.splitlines()[1:] == []           # the environment wins
    assert dlq_ls(f"--env-file={mine}").stdout.splitlines()[1:] == []          # the file named instead
    assert dlq_ls("--env-file=/dev/null").stderr == "relay dlq ls: REDIS_URI is required and must not be empty\n"


@pytest.mark.parametrize("command", ["show", "redrive", "purge"])
def test_an_unknown_id_is_one_line_and_changes_nothing(dlq, redis_client, command):
    known = dead_letter(redis_client)
    extra = ["--yes"] if command == "purge" else []
    result = dlq(command, "1-1", *extra) if command == "show" else dlq(command, known, "1-1", *extra)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"relay dlq {command}: no dead-letter entry 1-1 in {DLQ}\n"
    assert redis_client.xlen(DLQ) == 1 and redis_client.xlen("events") == 0


def test_an_id_that_is_not_an_entry_id_is_refused(dlq):
    result = dlq("show", "bogus")
    assert result.returncode == 1 and "'bogus' is not a stream entry id" in result.stderr


def test_redrive_adds_the_event_back_and_deletes_the_dead_letter_in_one_step(dlq, redis_client):
    first, second = dead_letter(redis_client), dead_letter(redis_client, event='{"n":2}')
    result = dlq("redrive", first, second)
    assert result.returncode == 0 and result.stdout.endswith("redriven 2 entries\n")
    added = redis_client.xrange("events")
    assert [(fields[b"event"], fields[b"redriven_from"].decode()) for _, fields in added] == [
        (EVENT.encode(), first), (b'{"n":2}', second)]
    assert f"{first} -> events {added[0][0].decode()}" in result.stdout
    assert redis_client.xlen(DLQ) == 0


def test_redrive_dry_run_and_all_with_a_function(dlq, redis_client):
    orders = dead_letter(redis_client)
    dead_letter(redis_client, reason="attempts exhausted for users/a.h")
    dry = dlq("redrive", "--all", "--function=orders", "--dry-run")
    assert dry.returncode == 0 and dry.stdout == f"would redrive {orders} to events\nwould redrive 1 entry\n"
    assert redis_client.xlen("events") == 0 and redis_client.xlen(DLQ) == 2
    assert dlq("redrive", "--all", "--function=orders").stdout.endswith("redriven 1 entry\n")
    assert redis_client.xlen("events") == 1 and redis_client.xlen(DLQ) == 1


def test_an_event_that_was_cut_is_never_redriven(dlq, redis_client):
    cut = dead_letter(redis_client, event="x" * 4096, reason="event is 2097152 bytes, over MAX_EVENT_BYTES",
                      truncated="true", event_bytes="2097152")
    whole = dead_letter(redis_client)
    refused = dlq("redrive", whole, cut)
    assert refused.returncode == 1 and f"dead-letter entry {cut} holds only the start of its event" in refused.stderr
    assert redis_client.xlen("events") == 0 and redis_client.xlen(DLQ) == 2
    result = dlq("redrive", "--all")
    assert f"skipping 1 entry whose event was too big to keep whole: {cut}" in result.stdout
    assert result.stdout.endswith("redriven 1 entry\n") and redis_client.xlen(DLQ) == 1


def test_purge_asks_on_a_terminal_only_and_refuses_without_one(dlq, redis_client):
    first, second = dead_letter(redis_client), dead_letter(redis_client)
    refused = dlq("purge", "--all")
    assert refused.returncode == 1 and "add --yes" in refused.stderr and redis_client.xlen(DLQ) == 2
    assert dlq("purge", first, "--yes").stdout == "purged 1 entry\n"
    assert [entry_id.decode() for entry_id, _ in redis_client.xrange(DLQ)] == [second]


def test_purge_before_reads_the_age_from_the_entry_id(dlq, redis_client):
    old_ms = int(time.time() * 1000) - 2 * 86400 * 1000
    redis_client.xadd(DLQ, {keys.EVENT: EVENT, keys.DLQ_REASON: "old"}, id=f"{old_ms}-0")
    recent = dead_letter(redis_client)
    assert dlq("purge", "--before=24h", "--yes").stdout == "purged 1 entry\n"
    assert [entry_id.decode() for entry_id, _ in redis_client.xrange(DLQ)] == [recent]


def test_bad_options_and_an_unreachable_redis_are_one_line(dlq, redis_server):
    assert dlq("ls", "--limit=0").stderr == "relay dlq ls: --limit='0' is not a positive whole number\n"
    assert "--since: " in dlq("ls", "--since=1d").stderr
    env = base_env(REDIS_URI="127.0.0.1:1", REDIS_STREAM="events")
    result = run_relay("dlq", "ls", env=env)
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("relay dlq ls: Redis at redis://127.0.0.1:1/0 is unreachable")


@pytest.mark.parametrize("change", ["purge", "redrive"])
def test_the_scripts_change_nothing_when_one_id_went_missing_meanwhile(redis_client, change):
    """The command looks the ids up first; an entry deleted after that still changes nothing."""
    letters = DeadLetters(redis_client, "events")
    known = dead_letter(redis_client)
    with pytest.raises(DeadLetterError, match="no dead-letter entry 9-9 in relay:events:dlq; nothing was changed"):
        getattr(letters, change)([known, "9-9"])
    assert redis_client.xlen(DLQ) == 1 and redis_client.xlen("events") == 0


def test_an_operator_fixes_a_function_and_redrives_its_dead_letters(redis_server, redis_client, docker_engine,
                                                                     workers, tmp_path, dlq):
    """The whole story with a real worker: dead-lettered, fixed (hot reload), sent back, handled once."""
    template = "runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {kind: [order]}\n    retries: 0\n"
    directory = write_function(tmp_path / "functions", "orders", template,
                               {"app.py": "def handler(event):\n    raise RuntimeError('bug')\n"})
    worker = Worker(harness_command(tmp_path / "functions", "worker-1"), engine_env(redis_server), tmp_path,
                    "worker")
    workers.append(worker)
    worker.wait_for('msg="Relay started"')
    original = publish(redis_client, {"kind": "order", "event_id": "evt_o"})
    worker.wait_for('msg="Entry dead-lettered"')
    [(dead_id, _fields)] = redis_client.xrange(DLQ)
    dead_id = dead_id.decode()
    assert f"{dead_id}  {original}" in dlq("ls").stdout

    (directory / "app.py").write_text("def handler(event):\n    print('handled', event['event_id'], flush=True)\n")
    worker.wait_for('msg="Function updated" function=orders ')
    result = dlq("redrive", dead_id)
    assert result.returncode == 0 and result.stdout.endswith("redriven 1 entry\n")
    worker.wait_for("handled evt_o", where="stdout")
    [(new_id, fields)] = [entry for entry in redis_client.xrange("events") if entry[0].decode() != original]
    line = next(line for line in worker.stderr.splitlines() if 'msg="Redriven entry received"' in line)
    assert f"message_id={new_id.decode()}" in line and f"redriven_from={dead_id}" in line
    wait_until(lambda: pending(redis_client) == 0, what="the redriven entry to be acknowledged")
    executed = next(line for line in worker.stderr.splitlines()
                    if 'msg="Handler executed"' in line and f"message_id={new_id.decode()}" in line)
    assert "attempt=1 " in executed and fields[b"redriven_from"].decode() == dead_id
    assert redis_client.xlen(DLQ) == 0
    assert worker.stop() == 0


def test_dlq_imports_nothing_heavy_but_redis(redis_server):
    import subprocess
    import sys

    from tests.support.relay_process import ROOT

    probe = ("import sys\nfrom relay.entry import main\ncode = main(['dlq', 'ls'])\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('gevent', 'docker', 'yaml'))\n"
             "print('HEAVY', heavy, file=sys.stderr)\n")
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM="events")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert "HEAVY []" in result.stderr, result.stderr


def test_a_reason_with_expired_targets_after_the_exhausted_ones_still_names_those():
    def letter(reason):
        return DeadLetter.of(b"5-0", {keys.DLQ_REASON.encode(): reason.encode()})

    mixed = letter("attempts exhausted for orders/app.h, users/a.h; older than max_event_age (1h): 3h12m")
    assert mixed.targets == ("orders/app.h", "users/a.h") and mixed.functions == ("orders", "users")
    assert letter("older than max_event_age (1h): 3h12m").targets == ()
    assert letter("attempts exhausted for orders/app.h").targets == ("orders/app.h",)


def test_a_reasons_cause_leaves_out_the_targets_it_names():
    def letter(reason):
        return DeadLetter.of(b"5-0", {keys.DLQ_REASON.encode(): reason.encode()})

    assert letter("attempts exhausted for orders/app.h, users/a.h; older than max_event_age (1h): 3h12m").cause == (
        "attempts exhausted; older than max_event_age (1h): 3h12m")
    assert letter("attempts exhausted for orders/app.h").cause == "attempts exhausted"
    assert letter("older than max_event_age (1h): 3h12m").cause == "older than max_event_age (1h): 3h12m"
