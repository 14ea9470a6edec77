"""The verdict of a fleet run, from Redis and the workers' output alone.

Every stream entry is judged on its own: a well-formed event's handlers must
each have run at least once for that entry, and the entry must be acked, in
the DLQ exactly once if and only if one of its handlers could never succeed.
Malformed entries must be in the DLQ exactly once, with the reason their kind
of damage calls for, and run nothing. Field values are read as text with
surrogate escapes, so bytes that are not UTF-8 compare exactly.
"""

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from relay.runs.record import RunStatus, decode
from tests.fleet import duplicates
from tests.fleet.faults import HARMLESS
from tests.fleet.functions import (
    ATTEMPTS,
    FAILING_FOREVER,
    KEPT_BYTES,
    MALFORMED_REASONS,
    MUST_SUCCEED,
    RATE_LIMIT,
    expected_functions,
)

MARK = re.compile(r'message "(?P<message>[^"]+)".*?: FLEET-MARK (?P<function>\S+) (?P<seq>\d+) (?P<outcome>\w+)'
                  r'(?: (?P<at>[\d.]+))?$')
START = re.compile(r": FLEET-START fleet-rated (?P<seq>\d+) (?P<at>[\d.]+)$")
SPAN = re.compile(r": FLEET-SPAN fleet-keyed (?P<seq>\d+) (?P<account>\S+) (?P<start>[\d.]+) (?P<end>[\d.]+)$")
RATE_WINDOW = 10.0      # seconds: the window the rate bound is checked on, outside faults
FAULT_MARGIN = (1.0, 20.0)   # seconds before and after a fault in which the limits may not hold (fail open)
DLQ_FIELDS = {"original_stream", "original_id", "group", "consumer", "event", "reason", "attempts", "timestamp"}
MAX_EVENT_BYTES = 1024 * 1024   # the workers' default


def _text(value):
    """A Redis value as text; bytes that are not UTF-8 survive as surrogates."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _fields(raw):
    return {_text(key): _text(value) for key, value in raw.items()}


EXPECTED_REASONS = {_text(fields.get("event")): reason for fields, reason in MALFORMED_REASONS}


@dataclass
class Verdict:
    events: int = 0                 # events the producer had acknowledged
    entries: int = 0                # stream entries, malformed ones included
    malformed: int = 0
    executions: int = 0             # handler runs seen (marks)
    duplicates: int = 0             # successful runs beyond the first, per entry and function
    duplicate_account: list = field(default_factory=list)   # duplicates.Duplicate: when, where, which fault
    producer_duplicates: int = 0    # events added twice by the producer's own retries
    dlq: int = 0
    dlq_expected: int = 0
    lost: int = 0
    rated_starts: int = 0           # fleet-rated starts seen
    rate_max: dict = field(default_factory=dict)   # window seconds → most starts in one such window
    keyed_spans: int = 0            # fleet-keyed invocations seen whole
    key_concurrency: int = 0        # most fleet-keyed invocations of one account running at once
    key_overlaps_outside_faults: int = 0
    runs_recorded: int = 0          # run records in the ledger of attempts a handler ran
    runs_unrecorded: int = 0        # executions the handlers marked with no run record (a Redis fault, a kill)
    problems: list = field(default_factory=list)

    @property
    def duplicate_share(self):
        """Duplicates as a percentage of the executions."""
        return 100 * self.duplicates / self.executions if self.executions else 0.0

    @property
    def passed(self):
        return not self.problems

    def fail(self, text):
        self.problems.append(text)


def parse_executions(paths):
    """Every execution the marks tell of; a worker's output is <run dir>/<host name>/run<N>.out."""
    executions = []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            found = MARK.search(line)
            if found:
                at = float(found["at"]) if found["at"] else None
                executions.append(duplicates.Execution(found["message"], found["function"], found["outcome"], at,
                                                       path.parent.name))
    return executions


def parse_marks(executions):
    """(message id, function) → Counter of outcomes, from parse_executions."""
    marks = defaultdict(Counter)
    for execution in executions:
        marks[execution.entry, execution.function][execution.outcome] += 1
    return marks


def parse_limits(paths):
    """(fleet-rated start times, fleet-keyed (account, start, end) spans), from the handlers' own clocks."""
    starts, spans = [], []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            if (found := START.search(line)) is not None:
                starts.append(float(found["at"]))
            elif (found := SPAN.search(line)) is not None:
                spans.append((found["account"], float(found["start"]), float(found["end"])))
    return sorted(starts), spans


def most_in_window(times, seconds):
    """The most of the sorted *times* that fall in one window [t, t + seconds)."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while times[first] <= at - seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


def judge_limits(verdict, paths, fault_windows):
    """fleet-rated's rate and fleet-keyed's per-account concurrency, measured; outside the faults (when the
    limits fail open or lose their Redis state) the rate must keep its bound and no account may overlap."""
    starts, spans = parse_limits(paths)
    verdict.rated_starts, verdict.keyed_spans = len(starts), len(spans)
    verdict.rate_max = {seconds: most_in_window(starts, seconds) for seconds in (1.0, RATE_WINDOW)}

    def in_fault(begin, end):
        return any(begin < stop + FAULT_MARGIN[1] and end > start - FAULT_MARGIN[0] for start, stop in fault_windows)

    quiet = [at for at in starts if not in_fault(at - RATE_WINDOW, at + RATE_WINDOW)]
    bound = RATE_LIMIT * (RATE_WINDOW + 1)
    if quiet and most_in_window(quiet, RATE_WINDOW) > bound:
        verdict.fail(f"fleet-rated started {most_in_window(quiet, RATE_WINDOW)} times in {RATE_WINDOW:g}s "
                     f"outside the faults; rate_limit {RATE_LIMIT}/s allows {bound:g}")
    by_account = defaultdict(list)
    for account, start, end in spans:
        by_account[account].append((start, end))
    for intervals in by_account.values():
        intervals.sort()
        running = []
        for start, end in intervals:
            overlapping = [other for other in running if other[1] > start]
            if overlapping and not in_fault(start, end):
                verdict.key_overlaps_outside_faults += 1
            running = [*overlapping, (start, end)]
            verdict.key_concurrency = max(verdict.key_concurrency, len(running))
    if verdict.key_overlaps_outside_faults:
        verdict.fail(f"fleet-keyed ran one account twice at once {verdict.key_overlaps_outside_faults} times "
                     "outside the faults")


def judge(*, client, produced, output_paths, hostnames, stream="events", group="relay", fault_windows=(),
          max_duplicates=None):
    """*fault_windows* are faults.FaultWindow; *max_duplicates* the most duplicates a run may have, in percent
    of its executions (None: any number)."""
    verdict = Verdict(events=len(produced))
    entries = [(message_id.decode(), _fields(fields)) for message_id, fields in client.xrange(stream)]
    verdict.entries = len(entries)
    dlq = [_fields(fields) for _, fields in client.xrange(f"relay:{stream}:dlq")]
    verdict.dlq = len(dlq)
    dlq_by_id = defaultdict(list)
    for record in dlq:
        dlq_by_id[record.get("original_id")].append(record)
    executions = parse_executions(output_paths)
    marks = parse_marks(executions)
    judge_limits(verdict, output_paths, [(window.start, window.end) for window in fault_windows])
    verdict.executions = sum(sum(outcomes.values()) for outcomes in marks.values())
    judge_ledger(verdict, client, stream, marks)

    seen_seqs = Counter()
    duplicated = []     # (message id, function) that succeeded more than once
    for message_id, fields in entries:
        reason = EXPECTED_REASONS.get(fields.get("event"))
        event = None if reason else _event(fields)
        records = dlq_by_id.pop(message_id, [])
        if len(records) > 1:
            verdict.fail(f"{message_id}: dead-lettered {len(records)} times")
        if event is None:
            verdict.malformed += 1
            verdict.dlq_expected += 1
            _judge_malformed(verdict, message_id, fields, records, marks, reason)
            continue
        seen_seqs[event["seq"]] += 1
        _judge_event(verdict, message_id, fields, event, records, marks, hostnames, duplicated)

    for message_id in dlq_by_id:
        verdict.fail(f"DLQ entry for {message_id}, which is not in the stream")
    verdict.lost = sum(1 for seq in produced if seq not in seen_seqs)
    if verdict.lost:
        missing = sorted(seq for seq in produced if seq not in seen_seqs)[:10]
        verdict.fail(f"{verdict.lost} acknowledged events are not in the stream (first: {missing})")
    verdict.producer_duplicates = sum(count - 1 for count in seen_seqs.values())

    pending = client.xpending(stream, group)["pending"]
    if pending:
        verdict.fail(f"{pending} entries still pending (PEL not empty)")
    lag = undelivered(client, stream, group)
    if lag:
        verdict.fail(f"{lag} entries never delivered to the group")
    leftover = list(client.scan_iter(match="relay:invocation:*", count=1000))
    if leftover:
        verdict.fail(f"{len(leftover)} invocation-state keys left behind (e.g. {leftover[0].decode()})")
    if verdict.dlq != verdict.dlq_expected:
        verdict.fail(f"DLQ holds {verdict.dlq} entries, {verdict.dlq_expected} expected")
    harmful = [window for window in fault_windows if window.name not in HARMLESS]
    verdict.duplicate_account = duplicates.account(executions, duplicated, harmful)
    judge_duplicates(verdict, max_duplicates)
    return verdict


def judge_duplicates(verdict, max_duplicates):
    """Fail a run whose duplicates are more than *max_duplicates* percent of its executions (None: never)."""
    if max_duplicates is not None and verdict.duplicates > verdict.executions * max_duplicates / 100:
        verdict.fail(f"{verdict.duplicates} duplicates, {verdict.duplicate_share:.2f} % of "
                     f"{verdict.executions} executions: more than the {max_duplicates:g} % allowed")


RAN = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.KILLED}


def judge_ledger(verdict, client, stream, marks):
    """The run ledger against the handlers' marks: every execution has at most one run record, and one
    unless its record was lost (a write that met a Redis fault, a worker killed before its settle), which
    is counted, not failed. A success on record that no handler marked is a record too many."""
    ran, succeeded = Counter(), Counter()
    last = "-"
    while page := client.xrange(f"relay:{stream}:runs", min=last, count=1000):
        for run_id, fields in page:
            run = decode(run_id, fields)
            if run.kind == "run" and run.status in RAN:
                ran[run.entry, run.function] += 1
                succeeded[run.entry, run.function] += run.status is RunStatus.SUCCEEDED
        last = "(" + page[-1][0].decode()
    verdict.runs_recorded = sum(ran.values())
    for key, outcomes in marks.items():
        verdict.runs_unrecorded += max(0, sum(outcomes.values()) - ran[key])
        if succeeded[key] > outcomes["ok"]:
            verdict.fail(f"{key[0]}: {succeeded[key]} successes of {key[1]} on record, {outcomes['ok']} ran")


def _event(fields):
    try:
        event = json.loads(fields["event"])
    except (KeyError, ValueError, RecursionError):
        return None
    return event if isinstance(event, dict) else None


def _judge_malformed(verdict, message_id, fields, records, marks, reason=None):
    """*reason* is the start of the reason the entry's damage calls for (None: any reason)."""
    where = f"malformed entry {message_id}"
    if len(records) != 1:
        verdict.fail(f"{where}: {len(records)} DLQ entries, 1 expected")
        return
    record = records[0]
    event = fields.get("event", "").encode("utf-8", "surrogateescape")
    if len(event) > MAX_EVENT_BYTES:
        kept = {"event": _text(event[:KEPT_BYTES]), "truncated": "true", "event_bytes": str(len(event))}
    else:
        kept = {"event": _text(event), "truncated": None, "event_bytes": None}
    for key, value in kept.items():
        if record.get(key) != value:
            shown = record.get(key) if key != "event" else (record.get(key) or "")[:60]
            verdict.fail(f"{where}: DLQ {key} {shown!r} differs from what the entry calls for")
    if not record.get("reason"):
        verdict.fail(f"{where}: DLQ entry has no reason")
    elif reason and not record["reason"].startswith(reason):
        verdict.fail(f"{where}: DLQ reason {record['reason'][:120]!r}, expected {reason!r}")
    if any(key[0] == message_id for key in marks):
        verdict.fail(f"{where}: a handler ran for it")


def _judge_event(verdict, message_id, fields, event, records, marks, hostnames, duplicated):
    failing = FAILING_FOREVER.get(event["kind"])
    _judge_runs(verdict, message_id, event, marks, failing, duplicated)

    if failing is None and event["kind"] == "flaky":
        flaky = marks.get((message_id, "fleet-flaky"), Counter())
        if records and not flaky["fail"]:
            verdict.fail(f"{message_id} (seq {event['seq']}): dead-lettered, yet fleet-flaky never failed")
        if not records and not flaky["ok"]:
            verdict.fail(f"{message_id} (seq {event['seq']}): acked, yet fleet-flaky never succeeded")
        failing = "fleet-flaky" if records else None
    if failing is None:
        if records:
            verdict.fail(f"{message_id} (seq {event['seq']}, {event['kind']}): dead-lettered although it succeeded")
        return
    verdict.dlq_expected += 1
    if len(records) != 1:
        verdict.fail(f"{message_id} (seq {event['seq']}, {event['kind']}): {len(records)} DLQ entries, 1 expected")
        return
    _check_dlq_record(verdict, message_id, fields, records[0], failing, hostnames)


def _judge_runs(verdict, message_id, event, marks, failing, duplicated):
    """Every expected function ran; the ones that must succeed did; extra successes count as duplicates
    (and their (entry, function) goes to *duplicated*)."""
    functions = expected_functions(event)
    for function in functions:
        outcomes = marks.get((message_id, function), Counter())
        if function == "fleet-hang":
            continue    # a start cut off before its first line prints no mark; its DLQ entry proves its attempts
        if not outcomes:
            verdict.fail(f"{message_id} (seq {event['seq']}): {function} never ran")
            continue
        if function != failing and outcomes["ok"] > 1:
            verdict.duplicates += outcomes["ok"] - 1
            duplicated.append((message_id, function))
    for function in functions:
        if function in MUST_SUCCEED and not marks.get((message_id, function), Counter())["ok"]:
            verdict.fail(f"{message_id} (seq {event['seq']}): {function} never succeeded")


def _check_dlq_record(verdict, message_id, fields, record, function, hostnames):
    where = f"DLQ entry for {message_id}"
    missing = DLQ_FIELDS - record.keys()
    if missing:
        verdict.fail(f"{where}: missing fields {sorted(missing)}")
    expected = {"original_stream": "events", "group": "relay", "event": fields["event"]}
    for key, value in expected.items():
        if record.get(key) != value:
            verdict.fail(f"{where}: {key} is {record.get(key)!r}, expected {value!r}")
    if record.get("consumer") not in hostnames:
        verdict.fail(f"{where}: consumer {record.get('consumer')!r} is not a fleet worker")
    if record.get("attempts") != str(ATTEMPTS[function]):
        verdict.fail(f"{where}: attempts {record.get('attempts')!r}, expected {ATTEMPTS[function]} ({function})")
    if not record.get("reason"):
        verdict.fail(f"{where}: no reason")
    try:
        datetime.fromisoformat(record.get("timestamp", "").replace("Z", "+00:00"))
    except ValueError:
        verdict.fail(f"{where}: timestamp {record.get('timestamp')!r} is not RFC 3339")


def judge_replicas(verdict, primary, replica, streams, timeout_ms=5000):
    """Under Sentinel, at the end: the replica is linked to the primary and, once it has
    everything the primary wrote (WAIT), holds as many entries in each of *streams*."""
    info = replica.info("replication")
    if info.get("role") != "slave" or info.get("master_link_status") != "up":
        verdict.fail(f"the replica is not a linked replica (role {info.get('role')!r}, "
                     f"link {info.get('master_link_status')!r})")
        return
    if primary.wait(1, timeout_ms) < 1:
        verdict.fail(f"the replica did not confirm the primary's writes within {timeout_ms} ms")
    for stream in streams:
        lengths = primary.xlen(stream), replica.xlen(stream)
        if lengths[0] != lengths[1]:
            verdict.fail(f"{stream}: {lengths[0]} entries on the primary, {lengths[1]} on the replica")


def undelivered(client, stream, group):
    """Entries not yet delivered to the group (-1: no such group): none when the group's
    last delivered id is the stream's last id, whatever Redis's lag says. That lag counts
    from the group's entries-read, which Redis can lose on a restart and, before 7.2, gets
    wrong on a replica (redis/redis#12898), so after a failover it can stay above 0 for
    good; when the ids differ and the lag says 0, the entries after the id are counted."""
    for info in client.xinfo_groups(stream):
        if info["name"].decode() == group:
            last_delivered = info["last-delivered-id"]
            if last_delivered == client.xinfo_stream(stream)["last-generated-id"]:
                return 0
            if info.get("lag"):
                return int(info["lag"])
            return len(client.xrange(stream, min=b"(" + last_delivered))
    return -1
