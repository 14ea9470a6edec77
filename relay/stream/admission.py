"""Admission: whether an invocation may start now, on this worker and across the fleet.

Two things let an invocation start: this worker's concurrency slots
(relay.stream.slots: MAX_CONCURRENCY and the function's ``concurrency``) and,
when its template sets any, the function's fleet-wide limits, shared in
Redis (relay.stream.limits: ``rate_limit`` and ``concurrency_key``).
``Admission.admit`` asks both, within the slot wait, and answers with a
Ticket, to hold while the invocation runs (``with ticket:``; everything it
holds is given back at the end of the block), or with a Refusal that says
what stayed busy. A refused invocation is left pending and costs no attempt.

The rate permit and the key's lease are asked for only while the slots are
held, so an admitted invocation starts right after its permit and starts
are never bunched by a later wait for a slot. While a limit refuses, the
slots are given back: a function waiting for its rate or its key never
keeps a slot from the others. A refusal whose wait would end past the slot
wait gives up at once. Each limit that refused an invocation is reported
once to the observer (``limit_waited``, with the seconds waited in all),
before the answer, whether the invocation is then admitted or not.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import TYPE_CHECKING

import gevent

from relay.stream import seams
from relay.stream.limits import Blocked, Limit
from relay.stream.seams import Refusal

if TYPE_CHECKING:
    from relay.functions.rules import Target

__all__ = ["SLOT_WAIT", "Admission", "Refusal", "Ticket"]

SLOT_WAIT = 15.0  # seconds; well under the reclaimer's 1m idle time; a wait for a rate permit or a key too

_REFUSED_BY = {Limit.RATE: Refusal.RATE_LIMIT, Limit.KEY: Refusal.CONCURRENCY_KEY}


class Ticket(ExitStack):
    """An admitted invocation's hold on its slots and, under fleet-wide limits, its Passage (the
    concurrency key's lease; the rate permit is spent): given back when its ``with`` block ends."""


class Admission:
    """The worker's slots and the functions' fleet-wide limits, asked together (a relay.stream.seams.Admission)."""

    def __init__(self, slots: seams.Slots, limits: seams.Limits, observer: seams.Observer,
                 slot_wait: float = SLOT_WAIT) -> None:
        self.slots = slots
        self.limits = limits
        self.observer = observer
        self.slot_wait = slot_wait

    def admit(self, target: Target, event: dict[str, object] | None) -> Ticket | Refusal:
        """A Ticket for *target*'s invocation on *event*, or why it was refused within the slot wait."""
        active = target.active
        template = active.function.template
        if template.rate_limit is None and template.concurrency_key is None:
            ticket = Ticket()
            if ticket.enter_context(self.slots.hold(active.name, template.running_limit, self.slot_wait)):
                return ticket
            ticket.close()
            return Refusal.NO_SLOT
        deadline = time.monotonic() + self.slot_wait
        waited: dict[Limit, float] = {}
        while True:
            with Ticket() as held:
                timeout = max(0.0, deadline - time.monotonic())
                if not held.enter_context(self.slots.hold(active.name, template.running_limit, timeout)):
                    self._waited(active.name, waited)
                    return Refusal.NO_SLOT
                passage = self.limits.enter(active.name, template, event, target.rule.timeout)
                if not isinstance(passage, Blocked):
                    held.callback(self.limits.leave, passage)   # before the slots are given back
                    self._waited(active.name, waited)
                    return held.pop_all()
            paused = time.monotonic()        # the slots are given back while the limit refuses
            waited.setdefault(passage.limit, 0.0)
            if paused + passage.retry_in > deadline:
                self._waited(active.name, waited)
                return _REFUSED_BY[passage.limit]
            gevent.sleep(passage.retry_in)
            waited[passage.limit] += time.monotonic() - paused

    def _waited(self, function: str, waited: dict[Limit, float]) -> None:
        for limit, seconds in waited.items():
            self.observer.limit_waited(function, limit, seconds)
