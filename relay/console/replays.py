"""The console's replay: ``relay replay`` as a form, its dry-run count first, then the adding with its progress.

A replay is a job that runs in a greenlet of its own. ``count`` reads the
window once, as ``relay replay --dry-run`` does (relay.runs.replay), and
stops at COUNTED with the tally; nothing is added until ``add`` is asked for
that job, which reads the window again and adds each chosen entry's copies
at the rate, counting them as it goes. The console keeps the last KEPT jobs
in memory; one adds at a time. The functions are those the worker (or the
``relay console`` command) loaded, matched offline as the consumer would.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gevent
import redis

from relay.errors import RelayError
from relay.runs.replay import DEFAULT_RATE, Adder, Failures, Selection, Tally, Window, chosen, window

if TYPE_CHECKING:
    from relay.functions import ActiveFunction

log = logging.getLogger("relay.console.replays")

KEPT = 20

COUNTING, COUNTED, ADDING, DONE, FAILED = "counting", "counted", "adding", "done", "failed"


@dataclass(frozen=True)
class ReplayRequest:
    since: str
    until: str = "now"
    function: str | None = None
    handler: str | None = None
    failed_only: bool = False


@dataclass
class ReplayJob:
    job_id: str
    request: ReplayRequest
    state: str = COUNTING
    tally: Tally = field(default_factory=Tally)
    span: Window | None = None
    added: int = 0
    last: str | None = None      # the source entry replayed last
    error: str = ""

    def to_json(self) -> dict[str, object]:
        return {"id": self.job_id, "state": self.state, "entries": self.tally.entries, "copies": self.tally.total,
                "read": self.tally.read, "added": self.added, "last": self.last, "error": self.error,
                "by_target": dict(self.tally.copies), "schedules": self.tally.schedules,
                "replays": self.tally.replays, "unreadable": self.tally.unreadable,
                "not_failed": self.tally.not_failed}


class Replays:
    def __init__(self, client: redis.Redis, stream: str, functions: Callable[[], Sequence[ActiveFunction]],
                 max_event_bytes: int, rate: float = DEFAULT_RATE) -> None:
        self.client, self.stream = client, stream
        self.functions = functions
        self.max_event_bytes = max_event_bytes
        self.rate = rate
        self.jobs: dict[str, ReplayJob] = {}
        self._ids = itertools.count(1)

    def count(self, request: ReplayRequest) -> ReplayJob:
        """Start counting what *request* would add; RunsError at once when the window or names are wrong."""
        span = window(request.since, request.until)
        self._selection(request, span)   # an unknown function or handler is said now, not in the job
        job = ReplayJob(job_id=str(next(self._ids)), request=request, span=span)
        self.jobs[job.job_id] = job
        while len(self.jobs) > KEPT:
            self.jobs.pop(next(iter(self.jobs)))
        gevent.spawn(self._run, job, adding=False)
        return job

    def add(self, job_id: str) -> ReplayJob | None:
        """Start adding the copies a counted job found; None when there is no such job to add."""
        job = self.jobs.get(job_id)
        if job is None or job.state != COUNTED or any(other.state == ADDING for other in self.jobs.values()):
            return None
        job.state = ADDING
        gevent.spawn(self._run, job, adding=True)
        return job

    def _selection(self, request: ReplayRequest, span: Window) -> Selection:
        failures = (Failures.scan(self.client, self.stream, span, request.handler, request.function)
                    if request.failed_only else None)
        return Selection(self.functions(), request.function, request.handler, failures, self.max_event_bytes)

    def _run(self, job: ReplayJob, adding: bool) -> None:
        assert job.span is not None
        try:
            tally = Tally()
            selection = self._selection(job.request, job.span)
            if not adding:
                job.tally = tally
                for _ in chosen(self.client, self.stream, job.span, selection, tally):
                    pass
                job.state = COUNTED
                return
            adder = Adder(self.client, self.stream, self.rate, sleep=gevent.sleep)
            for entry_id, event, targets in chosen(self.client, self.stream, job.span, selection, tally):
                adder.add(entry_id, event, targets)
                job.added += len(targets)
                job.last = entry_id
            job.state = DONE
        except (RelayError, redis.RedisError) as error:
            job.state, job.error = FAILED, str(error)
        except Exception as error:   # a job never takes the console with it
            log.exception("Replay failed")
            job.state, job.error = FAILED, f"{type(error).__name__}: {error}"
