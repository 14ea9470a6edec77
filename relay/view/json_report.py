"""The ``--json`` forms of ``relay function ls``, ``function inspect`` and ``stats``.

Their shape is documented in docs/operations.md and stays stable: fields
are only ever added. Times are RFC 3339 in UTC, or null.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.runs.report import LastRuns
    from relay.view.records import FunctionRecord, FunctionStats, Stats


def function_list(records: Sequence[FunctionRecord]) -> str:
    return _dumps([{"name": record.name, "runtime": record.runtime, "status": record.status,
                    "handlers": len(record.events), "schedules": len(record.schedules),
                    "updated_at": _time(record.prepared_at or record.updated_at)} for record in records])


def function(record: FunctionRecord, stats: FunctionStats, last_runs: LastRuns | None = None) -> str:
    """inspect's object; with *last_runs*, "runs" (the ledger's records, newest first, or null when it was not
    read) and "runs_unavailable" (why not, or null)."""
    runs: dict[str, object] = {} if last_runs is None else {
        "runs": None if last_runs.missing else [run.to_json() for run in last_runs.runs],
        "runs_unavailable": last_runs.missing or None}
    return _dumps({
        "name": record.name, "runtime": record.runtime, "status": record.status, "image": record.image,
        "fingerprint": record.fingerprint, "prepared_at": _time(record.prepared_at),
        "last_reconcile_at": _time(record.last_reconcile_at), "last_reconcile_status": record.last_reconcile_status,
        "last_error": record.last_error, "env": dict(record.env), "secrets": dict(record.secrets),
        "events": [{"handler": item.handler, "timeout": item.timeout} for item in record.events],
        "schedules": [{"handler": item.handler, "timeout": item.timeout, "cron": item.cron,
                       "timezone": item.timezone} for item in record.schedules],
        "warm": None if record.warm is None else {**asdict(record.warm), "running": stats.warm_containers},
        "rate_limit": None if record.rate_limit is None else {
            "rate": record.rate_limit, "waits": stats.waits.rate_limit_waits,
            "wait_seconds": stats.waits.rate_limit_wait_seconds},
        "concurrency_key": None if record.concurrency_key is None else {
            "field": record.concurrency_key, "waits": stats.waits.concurrency_key_waits,
            "wait_seconds": stats.waits.concurrency_key_wait_seconds},
        "counters": asdict(stats.counters), **runs})


def stats(snapshot: Stats) -> str:
    return _dumps({**asdict(snapshot.counters), "pending_entries": snapshot.pending_entries,
                   "oldest_pending_age_seconds": snapshot.oldest_pending_age_seconds,
                   "updated_at": _time(snapshot.updated_at)})


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _dumps(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"
