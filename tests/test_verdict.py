"""The settle decision, pure: from a plan and its targets' outcomes to a Settlement, no Redis."""

from types import SimpleNamespace

import pytest

from relay.durations import SECOND
from relay.functions.rules import Target
from relay.functions.template import OnExpired
from relay.stream import markers
from relay.stream.plans import Plan
from relay.stream.verdict import (
    COMPLETE,
    Cause,
    Settlement,
    Status,
    TargetOutcome,
    Verdict,
    decide_provenance,
    decide_settlement,
    expired,
    stored_outcome,
)

NOW = 1_800_000_000 * SECOND


def target(function, handler, retries=2, max_event_age=None, on_expired=OnExpired.DEAD_LETTER):
    return Target(SimpleNamespace(name=function), SimpleNamespace(handler=handler, retries=retries,
                                                                  max_event_age=max_event_age, on_expired=on_expired,
                                                                  repeat=0))


FIRST, SECOND_RULE, AUDIT = target("orders", "first"), target("orders", "second", retries=0), target("audit", "a")


def plan(*targets, **fields):
    return Plan("1-0", '{"kind": "order"}', {"kind": "order"}, targets, **fields)


def terminal(attempts):
    return TargetOutcome(Status.TERMINAL, attempts)


OPEN = TargetOutcome(Status.OPEN, 1)


# --- before a dispatch: what the consumer settles itself -------------------------


def test_a_trimmed_entry_is_acknowledged_and_its_state_cleared():
    settlement = decide_settlement(Plan("1-0", None, trimmed=True))
    assert settlement == Settlement(Verdict.ACK, Cause.TRIMMED, clear_state=True, counts_processed=False)


def test_an_obsolete_occurrence_is_acknowledged_without_counting_it_processed():
    settlement = decide_settlement(Plan("1-0", "{}", {}, scheduled=True, obsolete=True))
    assert (settlement.verdict, settlement.cause, settlement.clear_state, settlement.counts_processed) == (
        Verdict.ACK, Cause.OBSOLETE, True, False)


OCCURRENCE = "schedule:nightly:jobs.run:2026-12-06T03:00:00Z"


def test_only_the_entry_the_scheduler_published_runs_its_occurrence():
    scheduled = plan(target("nightly", "jobs.run"), scheduled=True, occurrence=OCCURRENCE)
    assert decide_provenance(scheduled, "1-0") is None
    refused = {published: decide_provenance(scheduled, published) for published in (None, "1", "2-0")}
    assert {(s.verdict, s.cause, s.attempts, s.functions, s.occurrence) for s in refused.values()} == {
        (Verdict.DEAD_LETTER, Cause.FORGED, 0, (), None)}
    prefix = "the 'schedule' field was not written by Relay's scheduler: "
    assert refused[None].reason == (
        f"{prefix}there is no record of {OCCURRENCE!r} being published (records are kept 7 days)")
    assert refused["1"].reason == f"{prefix}the event is not the one published for {OCCURRENCE!r}"
    assert refused["2-0"].reason == f"{prefix}{OCCURRENCE!r} was published as entry 2-0"


def test_an_exhausted_occurrence_s_dead_letter_keeps_its_id():
    scheduled = plan(target("nightly", "jobs.run", retries=0), scheduled=True, occurrence=OCCURRENCE)
    settlement = decide_settlement(scheduled, {0: terminal(1)})
    assert (settlement.verdict, settlement.occurrence) == (Verdict.DEAD_LETTER, OCCURRENCE)
    assert decide_settlement(plan(FIRST), {0: terminal(3)}).occurrence is None


def test_a_malformed_entry_is_dead_lettered_with_no_attempts():
    settlement = decide_settlement(Plan("1-0", None, problem="the entry has no 'event' field"))
    assert settlement == Settlement(Verdict.DEAD_LETTER, Cause.MALFORMED, reason="the entry has no 'event' field",
                                    attempts=0, event_bytes=0, functions=())


def test_a_malformed_entry_over_the_size_limit_keeps_its_size():
    settlement = decide_settlement(Plan("1-0", None, problem="too big", raw=b"x" * 10, event_bytes=5_000_000))
    assert (settlement.verdict, settlement.event_bytes, settlement.attempts) == (Verdict.DEAD_LETTER, 5_000_000, 0)


def test_an_entry_matching_a_function_not_built_yet_is_left_pending():
    settlement = decide_settlement(plan(AUDIT, waiting=("orders",)))
    assert (settlement.verdict, settlement.cause) == (Verdict.LEAVE_PENDING, Cause.WAITING)


def test_an_entry_matching_nothing_is_acknowledged_without_clearing_state():
    settlement = decide_settlement(plan())
    assert settlement == Settlement(Verdict.ACK, Cause.UNMATCHED, clear_state=False, counts_processed=True)


def test_an_entry_with_targets_is_dispatched_first():
    assert decide_settlement(plan(FIRST)) is None


def test_obsolete_wins_over_everything_else_and_problem_over_waiting():
    assert decide_settlement(Plan("1-0", "{}", obsolete=True, problem="x")).cause is Cause.OBSOLETE
    assert decide_settlement(Plan("1-0", "{}", problem="x", waiting=("a",))).cause is Cause.MALFORMED


# --- after a dispatch -----------------------------------------------------------------


def test_all_complete_is_an_ack_that_counts_as_processed():
    settlement = decide_settlement(plan(AUDIT, FIRST), {0: COMPLETE, 1: TargetOutcome(Status.COMPLETE, 2)})
    assert settlement == Settlement(Verdict.ACK, Cause.DONE, clear_state=True, counts_processed=True)


def test_a_completed_schedule_occurrence_is_not_counted_as_processed():
    settlement = decide_settlement(plan(FIRST, scheduled=True), {0: COMPLETE})
    assert (settlement.verdict, settlement.counts_processed) == (Verdict.ACK, False)


@pytest.mark.parametrize("outcomes", [
    {0: COMPLETE, 1: OPEN},
    {0: terminal(3), 1: OPEN, 2: COMPLETE},
    {0: OPEN, 1: terminal(1), 2: terminal(3)},
])
def test_any_open_target_leaves_the_entry_pending(outcomes):
    settlement = decide_settlement(plan(AUDIT, FIRST, SECOND_RULE), outcomes)
    assert (settlement.verdict, settlement.cause) == (Verdict.LEAVE_PENDING, Cause.OPEN)


def test_every_unfinished_target_exhausted_dead_letters_with_the_most_attempts():
    settlement = decide_settlement(plan(AUDIT, FIRST, SECOND_RULE), {0: COMPLETE, 1: terminal(3), 2: terminal(1)})
    assert settlement == Settlement(Verdict.DEAD_LETTER, Cause.EXHAUSTED,
                                    reason="attempts exhausted for orders/first, orders/second", attempts=3,
                                    functions=("audit", "orders"))


def test_two_rules_with_the_same_handler_name_the_field_once():
    twin = target("orders", "first")
    settlement = decide_settlement(plan(FIRST, twin), {0: terminal(2), 1: terminal(3)})
    assert (settlement.reason, settlement.attempts) == ("attempts exhausted for orders/first", 3)


# --- targets the dispatch did not reach: judged by their stored markers -----------


def test_targets_not_reached_are_judged_by_their_stored_markers():
    stored = {"orders/first": b"ok", "orders/second": markers.exhausted(4).encode()}
    settlement = decide_settlement(plan(AUDIT, FIRST, SECOND_RULE), {0: COMPLETE}, stored=stored, now=NOW)
    assert settlement == Settlement(Verdict.DEAD_LETTER, Cause.EXHAUSTED,
                                    reason="attempts exhausted for orders/second", attempts=4,
                                    functions=("audit", "orders"))


def test_a_target_not_reached_and_never_tried_keeps_the_entry_pending():
    settlement = decide_settlement(plan(AUDIT, FIRST), {0: terminal(1)}, stored={}, now=NOW)
    assert settlement.verdict is Verdict.LEAVE_PENDING


def test_stored_markers_complete_every_target_not_reached():
    settlement = decide_settlement(plan(AUDIT, FIRST), {}, stored={"audit/a": "ok", "orders/first": b"ok"}, now=NOW)
    assert (settlement.verdict, settlement.cause) == (Verdict.ACK, Cause.DONE)


@pytest.mark.parametrize(("raw", "retries", "expected"), [
    (None, 2, TargetOutcome(Status.OPEN)),
    (b"ok", 2, COMPLETE),
    (markers.exhausted(5).encode(), 2, TargetOutcome(Status.TERMINAL, 5)),
    (markers.running(NOW + SECOND, 1), 2, TargetOutcome(Status.OPEN)),           # busy
    (markers.waiting(NOW - SECOND, 3), 2, TargetOutcome(Status.OPEN)),           # due to exhaust: not terminal yet
    (markers.waiting(NOW - SECOND, 1), 2, TargetOutcome(Status.OPEN)),           # runnable
    (b"garbage", 2, TargetOutcome(Status.OPEN)),                                 # unreadable: absent, eligible
])
def test_stored_outcome(raw, retries, expected):
    assert stored_outcome(plan(), target("orders", "first", retries), raw, NOW) == expected


def test_an_outcome_of_this_dispatch_wins_over_the_stored_marker():
    settlement = decide_settlement(plan(FIRST), {0: COMPLETE}, stored={"orders/first": b"exhausted:3"}, now=NOW)
    assert settlement.verdict is Verdict.ACK


# --- stale work: max_event_age ---------------------------------------------------------

HOUR = 3600 * SECOND
OLD_ID = f"{(NOW - 3 * HOUR - 12 * 60 * SECOND) // 1_000_000}-0"      # 3h12m before NOW
WELCOME = target("welcome", "app.send", max_event_age=HOUR)
DIGEST = target("digest", "app.add", max_event_age=HOUR, on_expired=OnExpired.DROP)
LIMITLESS = target("orders", "first")


def old(*targets, message_id=OLD_ID):
    return Plan(message_id, '{"kind": "user"}', {"kind": "user"}, targets)


def expired_outcome(attempts=0):
    return TargetOutcome(Status.EXPIRED, attempts)


def judge(plan_, target_, raw=None, now=NOW):
    marker = markers.parse(raw)
    return expired(plan_, target_, marker, markers.decide(marker, now, target_.rule.retries), now)


def test_an_entry_older_than_max_event_age_is_expired_before_its_first_attempt():
    assert judge(old(WELCOME), WELCOME) == expired_outcome(0)


def test_the_age_comes_from_the_entry_id_and_only_older_expires():
    at_limit = Plan(f"{(NOW - HOUR) // 1_000_000}-5", "{}", {}, (WELCOME,))
    assert judge(at_limit, WELCOME) is None
    assert judge(at_limit, WELCOME, now=NOW + 1_000_000) == expired_outcome(0)


def test_a_redriven_entry_is_judged_by_its_own_id_the_redrive_time():
    """``relay dlq redrive`` adds a new entry: its id is when it was redriven, however old the event."""
    redriven = Plan(f"{(NOW - 60 * SECOND) // 1_000_000}-0", "{}", {}, (WELCOME,))
    assert judge(redriven, WELCOME) is None


def test_a_rule_without_max_event_age_never_expires():
    assert judge(old(LIMITLESS), LIMITLESS) is None
    assert judge(Plan("1-0", "{}", {}, (LIMITLESS,)), LIMITLESS) is None


@pytest.mark.parametrize(("raw", "outcome"), [
    (markers.waiting(NOW - SECOND, 1), expired_outcome(1)),        # its retry is due: not run, it expired
    (markers.waiting(NOW + SECOND, 2), expired_outcome(2)),        # still backing off: expired without waiting
    (markers.running(NOW - SECOND, 1), expired_outcome(1)),        # its worker died: the attempt counts
    (markers.running(NOW + SECOND, 1), None),                      # running now: let it finish
    (markers.exhausted(3), None),                                  # exhausted wins
    (markers.waiting(NOW - SECOND, 3), None),                      # its last attempt failed: exhausted, not expired
    (b"ok", None),
])
def test_expiry_is_judged_from_the_stored_marker(raw, outcome):
    assert judge(old(WELCOME), WELCOME, raw) == outcome


def test_an_expired_entry_is_dead_lettered_with_its_age_and_no_attempts():
    settlement = decide_settlement(old(WELCOME), {0: expired_outcome()}, now=NOW)
    assert settlement == Settlement(Verdict.DEAD_LETTER, Cause.EXPIRED,
                                    reason="older than max_event_age (1h): 3h12m", attempts=0,
                                    functions=("welcome",), expired=("welcome",))


def test_the_age_in_the_reason_is_cut_to_seconds():
    settlement = decide_settlement(old(WELCOME), {0: expired_outcome()}, now=NOW + 7_654_000_000)
    assert settlement.reason == "older than max_event_age (1h): 3h12m7s"


def test_an_expired_entry_with_on_expired_drop_is_acknowledged_not_processed():
    settlement = decide_settlement(old(DIGEST), {0: expired_outcome()}, now=NOW)
    assert settlement == Settlement(Verdict.ACK, Cause.EXPIRED, clear_state=True, counts_processed=False,
                                    expired=("digest",))


def test_the_other_targets_decide_while_open():
    settlement = decide_settlement(old(WELCOME, LIMITLESS), {0: expired_outcome(), 1: OPEN}, now=NOW)
    assert (settlement.verdict, settlement.expired) == (Verdict.LEAVE_PENDING, ())


def test_complete_and_dropped_targets_acknowledge_the_entry():
    settlement = decide_settlement(old(DIGEST, LIMITLESS), {0: expired_outcome(), 1: COMPLETE}, now=NOW)
    assert (settlement.verdict, settlement.cause, settlement.expired) == (Verdict.ACK, Cause.EXPIRED, ("digest",))


def test_complete_and_expired_targets_dead_letter_the_entry():
    settlement = decide_settlement(old(LIMITLESS, WELCOME), {0: COMPLETE, 1: expired_outcome()}, now=NOW)
    assert (settlement.verdict, settlement.reason, settlement.functions) == (
        Verdict.DEAD_LETTER, "older than max_event_age (1h): 3h12m", ("orders", "welcome"))


def test_one_expired_target_saying_dead_letter_outweighs_one_saying_drop():
    settlement = decide_settlement(old(DIGEST, WELCOME), {0: expired_outcome(), 1: expired_outcome()}, now=NOW)
    assert (settlement.verdict, settlement.reason, settlement.expired) == (
        Verdict.DEAD_LETTER, "older than max_event_age (1h): 3h12m", ("digest", "welcome"))


def test_exhausted_and_expired_targets_are_both_named():
    short = target("audit", "app.log", max_event_age=30 * 60 * SECOND)
    settlement = decide_settlement(old(short, LIMITLESS, WELCOME),
                                   {0: expired_outcome(1), 1: terminal(3), 2: expired_outcome()}, now=NOW)
    assert settlement == Settlement(
        Verdict.DEAD_LETTER, Cause.EXHAUSTED,
        reason="attempts exhausted for orders/first; older than max_event_age (30m): 3h12m; "
               "older than max_event_age (1h): 3h12m",
        attempts=3, functions=("audit", "orders", "welcome"), expired=("audit", "welcome"))


def test_a_dropped_target_leaves_the_exhausted_ones_to_the_reason():
    settlement = decide_settlement(old(DIGEST, LIMITLESS), {0: expired_outcome(), 1: terminal(2)}, now=NOW)
    assert (settlement.verdict, settlement.reason, settlement.attempts, settlement.expired) == (
        Verdict.DEAD_LETTER, "attempts exhausted for orders/first", 2, ("digest",))


def test_a_target_not_reached_is_judged_expired_by_its_marker():
    """The dispatch stopped at an exhausted target; the expired one after it needs no other delivery."""
    settlement = decide_settlement(old(LIMITLESS, WELCOME), {0: terminal(1)}, stored={}, now=NOW)
    assert (settlement.verdict, settlement.reason) == (
        Verdict.DEAD_LETTER, "attempts exhausted for orders/first; older than max_event_age (1h): 3h12m")
    assert stored_outcome(old(WELCOME), WELCOME, None, NOW) == expired_outcome()
    assert stored_outcome(old(WELCOME), WELCOME, markers.running(NOW + SECOND, 1), NOW) == TargetOutcome(Status.OPEN)
