"""The worker's side of the run ledger: records of the engine's attempts, written with the settle.

RunLedger is an Observer of the stream engine (relay.stream.seams): it
hears each attempt end (``invocation_finished``) and each rule not run
because its entry expired, and keeps the record in memory under the
entry's id. It writes nothing then. The Settler hands the entry's records
to Redis with the settlement (relay.stream.seams.RunLedger): for an
acknowledged entry, on the acknowledgment's own pipeline (``queue``), so the
hot path pays no round trip; for a dead-lettered one, just before the
dead-letter script, so that entry can name its last run's id (``write``);
for one left pending, on their own. The last record of a dispatch says how
the entry was settled.

The ledger never holds up delivery: its commands share a pipeline with the
acknowledgment but not its fate (a refused XADD does not stop the XACK),
and a record that could not be written is counted
(``relay_runs_unrecorded_total``) with one WARN per run of failures. Every
XADD caps the stream near RUNS_MAX_ENTRIES; at most once a minute an XTRIM
MINID drops records older than RUNS_MAX_AGE, on the same pipeline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import redis
from redis.typing import EncodableT, FieldT

from relay.runs import record
from relay.runs.record import (
    DLQ_STDERR_BYTES,
    ERROR_CHARS,
    SETTLEMENT,
    TAIL_BYTES,
    Run,
    RunStatus,
    Settled,
    status_of,
    tail,
)
from relay.stream.keys import runs_stream
from relay.stream.seams import Attempt, LastRun, RetryDue
from relay.stream.verdict import Settlement, Verdict

if TYPE_CHECKING:
    from redis.client import Pipeline

    from relay.runtime.invocation import Outcome
    from relay.stream.limits import Limit
    from relay.stream.plans import Plan

log = logging.getLogger("relay.runs.ledger")

Fields = dict[str, str]   # one record as the ledger's stream entry holds it (relay.runs.record)

DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_MAX_AGE_MS = 7 * 24 * 3600 * 1000
TRIM_INTERVAL_MS = 60_000
MAX_PENDING_ENTRIES = 10_000   # entries whose records wait for their settle; more means a settle was lost


class RunLedger:
    def __init__(self, client: redis.Redis, stream: str, *, host: str, pid: int,
                 max_entries: int = DEFAULT_MAX_ENTRIES, max_age_ms: int = DEFAULT_MAX_AGE_MS,
                 unrecorded: Callable[[int], object] = lambda count: None,
                 clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        """*unrecorded* is told how many records could not be written, each time some could not."""
        self.client = client
        self.key = runs_stream(stream)
        self.host = host
        self.pid = pid
        self._pid = str(pid)
        self.max_entries = max_entries
        self.max_age_ms = max_age_ms
        self._unrecorded = unrecorded
        self._clock_ms = clock_ms
        self._pending: dict[str, list[Fields]] = {}   # entry id → its records, until its settle
        self._queued: dict[str, list[Fields]] = {}   # entry id → records on a pipeline not yet sent
        self._next_trim = 0
        self._failing = False

    # --- the engine's events (relay.stream.seams.Observer) --------------------------

    def invocation_finished(self, attempt: Attempt, outcome: Outcome | None) -> None:
        try:
            self._add(attempt, self._run(attempt, outcome))
        except Exception as error:   # an observer never raises into the hot path; the record is counted lost
            self._broken(error)

    def invocation_expired(self, attempt: Attempt) -> None:
        try:
            fields = self._named(attempt)
            fields[record.STATUS] = RunStatus.EXPIRED.value
            self._add(attempt, fields)
        except Exception as error:
            self._broken(error)

    def received(self, count: int) -> None:
        pass

    def matched(self, function: str) -> None:
        pass

    def invocation_started(self, attempt: Attempt) -> None:
        pass

    def limit_waited(self, function: str, limit: Limit, seconds: float) -> None:
        pass

    def settled(self, settlement: Settlement, count: int) -> None:
        pass

    def expired(self, function: str) -> None:
        pass

    def ran_twice(self, attempt: Attempt) -> None:
        pass

    # --- writing, with the settle (relay.stream.seams.RunLedger) --------------------

    def queue(self, pipe: Pipeline, plan: Plan, settlement: Settlement) -> int:
        records = self._take(plan, settlement, None)
        if not records:
            return 0
        for fields in records:
            pipe.xadd(self.key, _entry(fields), maxlen=self.max_entries, approximate=True)
        self._queued[plan.message_id] = records
        return len(records) + self._queue_trim(pipe)

    def queued(self, plan: Plan, replies: Sequence[object]) -> None:
        records = self._queued.pop(plan.message_id, None)
        count = len(replies) if records is None else len(records)
        failed = [reply for reply in replies[:count] if isinstance(reply, Exception)]
        self._account(len(failed), failed[0] if failed else None)

    def unsent(self, plan: Plan) -> list[Fields]:
        return self._queued.pop(plan.message_id, [])

    def write(self, plan: Plan, settlement: Settlement, retry: RetryDue | None = None) -> LastRun | None:
        records = self._take(plan, settlement, retry)
        if not records:
            return None
        pipe = self.client.pipeline(transaction=False)
        for fields in records:
            pipe.xadd(self.key, _entry(fields), maxlen=self.max_entries, approximate=True)
        self._queue_trim(pipe)
        try:
            replies: list[object] = pipe.execute(raise_on_error=False)
        except redis.RedisError as error:
            replies = [error] * len(records)
        failed = [reply for reply in replies[:len(records)] if isinstance(reply, Exception)]
        self._account(len(failed), failed[0] if failed else None)
        ran = [(fields, reply) for fields, reply in zip(records, replies, strict=False)
               if fields[record.KIND] == record.RUN and fields[record.STATUS] != RunStatus.EXPIRED.value]
        if not ran:
            return None
        last, reply = ran[-1]
        run_id = reply.decode() if isinstance(reply, bytes) else reply if isinstance(reply, str) else None
        exit_code = last.get(record.EXIT_CODE)
        return LastRun(run_id=run_id, status=last[record.STATUS],
                       exit_code=int(exit_code) if exit_code is not None else None,
                       stderr=tail(last.get(record.STDERR, ""), DLQ_STDERR_BYTES))

    # --- the records: their fields as written (relay.runs.record), built straight, as this is the hot path --

    def _named(self, attempt: Attempt) -> Fields:
        fields = {record.KIND: record.RUN, record.ENTRY: attempt.message_id, record.FUNCTION: attempt.function,
                  record.HANDLER: attempt.handler, record.RULE: attempt.rule, record.ATTEMPT: str(attempt.number),
                  record.KEY: attempt.idempotency_key, record.HOST: self.host, record.PID: self._pid,
                  record.STARTED: str(attempt.started_at // 1_000_000)}
        if attempt.event_id:
            fields[record.EVENT_ID] = attempt.event_id
        if attempt.replay_of:
            fields[record.REPLAY_OF] = attempt.replay_of
        return fields

    def _run(self, attempt: Attempt, outcome: Outcome | None) -> Fields:
        fields = self._named(attempt)
        if outcome is None:
            fields[record.STATUS] = RunStatus.FAILED.value
            fields[record.ERROR] = "Relay failed while running it (see its log)"
            return fields
        fields[record.STATUS] = status_of(outcome).value
        fields[record.DURATION] = f"{outcome.duration * 1000:.3f}"
        if outcome.exit_code is not None:
            fields[record.EXIT_CODE] = str(outcome.exit_code)
        if outcome.error:
            fields[record.ERROR] = outcome.error[:ERROR_CHARS]
        if outcome.container_id:
            fields[record.MODE] = "warm" if outcome.warm else "cold"
            fields[record.CONTAINER] = outcome.container_id
        if outcome.stdout_tail:
            fields[record.STDOUT] = tail(outcome.stdout_tail, TAIL_BYTES)
        if outcome.stderr_tail:
            fields[record.STDERR] = tail(outcome.stderr_tail, TAIL_BYTES)
        return fields

    def _add(self, attempt: Attempt, fields: Fields) -> None:
        pending = self._pending
        records = pending.get(attempt.message_id)
        if records is None:
            if len(pending) >= MAX_PENDING_ENTRIES:
                lost = pending.pop(next(iter(pending)))
                self._account(len(lost), None)
            records = pending[attempt.message_id] = []
        records.append(fields)

    def _take(self, plan: Plan, settlement: Settlement, retry: RetryDue | None) -> list[Fields]:
        """The entry's records, the last one saying how it was settled; a settlement record alone when
        the entry with targets was acknowledged or dead-lettered without an attempt here."""
        records = self._pending.pop(plan.message_id, [])
        settled, retry_at = _settled(settlement, retry, self._clock_ms())
        reason = (settlement.reason or "")[:ERROR_CHARS] if settlement.verdict is Verdict.DEAD_LETTER else ""
        if records:
            last = records[-1]
            last[record.SETTLED] = settled.value
            if retry_at is not None:
                last[record.RETRY_AT] = str(retry_at)
            if reason:
                last[record.REASON] = reason
        elif plan.targets and settlement.verdict is not Verdict.LEAVE_PENDING:
            records.append(Run(kind=SETTLEMENT, entry=plan.message_id, event_id=plan.event_id or "",
                               function=",".join(dict.fromkeys(t.active.name for t in plan.targets)),
                               host=self.host, pid=self.pid, started_ms=self._clock_ms(), settled=settled,
                               reason=reason, replay_of=plan.replay_of or "").fields())
        return records

    def _queue_trim(self, pipe: Pipeline) -> int:
        now = self._clock_ms()
        if now < self._next_trim:
            return 0
        self._next_trim = now + TRIM_INTERVAL_MS
        pipe.xtrim(self.key, minid=f"{max(0, now - self.max_age_ms)}-0", approximate=True)
        return 1

    def _broken(self, error: Exception) -> None:
        """A record Relay could not even build (a bug): counted, logged with its traceback, delivery goes on."""
        self._unrecorded(1)
        log.error("Cannot build a run record; the run goes unrecorded", exc_info=error,
                  extra={"ledger": self.key, "error": str(error)})

    def _account(self, failed: int, error: object) -> None:
        if failed:
            self._unrecorded(failed)
            if not self._failing:
                self._failing = True
                log.warning("Cannot write to the run ledger; runs go unrecorded until it can",
                            extra={"ledger": self.key, "count": failed, "error": str(error)})
        elif self._failing:
            self._failing = False
            log.info("The run ledger is written again", extra={"ledger": self.key})


def _entry(fields: Fields) -> dict[FieldT, EncodableT]:
    """*fields* as redis-py's xadd annotates them (the same dict: its values are only read)."""
    return cast("dict[FieldT, EncodableT]", fields)


def _settled(settlement: Settlement, retry: RetryDue | None, now_ms: int) -> tuple[Settled, int | None]:
    if settlement.verdict is Verdict.ACK:
        return Settled.ACKNOWLEDGED, None
    if settlement.verdict is Verdict.DEAD_LETTER:
        return Settled.DEAD_LETTERED, None
    if retry is not None and retry.after_failure:
        return Settled.RETRY_DUE, now_ms + int(retry.delay * 1000)
    return Settled.PENDING, None

