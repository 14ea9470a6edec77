"""What the write-behind owes Redis for one entry (relay.stream.writebehind), as plain values."""

from __future__ import annotations

from dataclasses import dataclass

Record = dict[str, str]   # a run-ledger record's fields (relay.runs.record)


@dataclass(frozen=True)
class Mark:
    """One marker to write: *value* into *field*; a claim (*expected* not None) only over *expected*."""

    field: str
    value: str
    expected: bytes | None = None


@dataclass(frozen=True)
class Owed:
    """What is owed for one entry: its markers, or its acknowledgment (which makes the markers moot)."""

    since: float                                   # monotonic time of the first write that failed
    marks: tuple[Mark, ...] = ()
    ack: bool = False
    clear_state: bool = True
    records: tuple[Record, ...] = ()               # run-ledger records unsent with the acknowledgment
