"""The Admission on its own: what a Ticket holds and gives back, and the typed refusals.

No Redis: the slots are the real ones, the fleet-wide limits a fake. How
admission behaves inside a dispatch (waits, retries, log lines, metrics) is
in test_dispatch_limits.py.
"""

import pytest

from relay.functions.rules import Target
from relay.stream.admission import Admission, Refusal
from relay.stream.limits import Blocked, Limit, Passage
from relay.stream.slots import Slots
from tests.support.engine import AUDIT, function

LIMITED = function("limited", """
runtime: python3.14
concurrency: 1
rate_limit: 5/s
events:
  - handler: limited.handler
    pattern: {kind: [limited]}
""")


def target(active):
    return Target(active, active.function.template.rules[0])


class Limits:
    """Answers each enter with the next of *answers*; records what is left, and the slots free then."""

    def __init__(self, slots, *answers):
        self.slots = slots
        self.answers = list(answers)
        self.left = []

    def enter(self, function, template, event, timeout):
        return self.answers.pop(0)

    def leave(self, passage):
        self.left.append((passage, self.slots.function_limit("limited", 1).counter))


class Waits:
    def __init__(self):
        self.events = []

    def limit_waited(self, function, limit, seconds):
        self.events.append((function, limit, seconds))


def test_a_ticket_holds_the_slots_until_its_block_ends():
    slots = Slots(4)
    admission = Admission(slots, Limits(slots), Waits(), slot_wait=0.01)
    audit = slots.function_limit("audit", AUDIT.function.template.running_limit)
    free = audit.counter
    ticket = admission.admit(target(AUDIT), {"kind": "order"})
    assert ticket is not Refusal.NO_SLOT and audit.counter == free - 1
    with ticket:
        assert audit.counter == free - 1
    assert audit.counter == free


def test_a_limited_ticket_leaves_its_passage_holding_the_slot_even_when_the_invocation_raises():
    slots = Slots(4)
    passage = Passage()
    limits = Limits(slots, passage)
    admission = Admission(slots, limits, Waits(), slot_wait=0.01)
    ticket = admission.admit(target(LIMITED), {"kind": "limited"})
    with pytest.raises(RuntimeError), ticket:
        raise RuntimeError("the invocation failed")
    assert limits.left == [(passage, 0)]           # left while the function's one slot was still held
    assert slots.function_limit("limited", 1).counter == 1 and slots._global.counter == 4


@pytest.mark.parametrize(("limit", "refusal"), [(Limit.RATE, Refusal.RATE_LIMIT),
                                                (Limit.KEY, Refusal.CONCURRENCY_KEY)])
def test_a_limit_refusing_past_the_slot_wait_is_a_refusal_that_names_it(limit, refusal):
    slots, waits = Slots(4), Waits()
    admission = Admission(slots, Limits(slots, Blocked(limit, 60.0)), waits, slot_wait=1.0)
    assert admission.admit(target(LIMITED), {"kind": "limited"}) is refusal
    assert waits.events == [("limited", limit, 0.0)]
    assert slots.function_limit("limited", 1).counter == 1


def test_busy_slots_are_a_refusal_of_their_own():
    slots, waits = Slots(4), Waits()
    slots.function_limit("limited", 1).acquire()
    admission = Admission(slots, Limits(slots), waits, slot_wait=0.01)
    assert admission.admit(target(LIMITED), {"kind": "limited"}) is Refusal.NO_SLOT
    assert waits.events == []
