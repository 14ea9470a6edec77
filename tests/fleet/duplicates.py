"""Where each duplicate came from: the fault it met, from the handlers' marks and the faults' windows.

A duplicate is a successful execution of a handler for an entry beyond the
first. Each is paired with the success before it (by the handlers' own
clocks), and the pair is put down to the fault whose window holds the
*first* execution of the pair: the run that was done but not recorded or
acknowledged, so that the entry ran again. A fault's window reaches from
LEAD seconds before its start (a handler prints its mark a moment before its
worker settles the entry, so the fault may have met that settle) to TAIL
seconds after its end (the reclaimer hands an entry left pending to another
worker after 60 s idle). Where windows overlap, the latest fault to start
is taken; a worker SIGKILL only holds the executions of the worker it
killed. Anything else is "no fault".
"""

from collections import Counter, defaultdict
from dataclasses import dataclass

LEAD = 5.0      # seconds before a fault's start its window opens
TAIL = 70.0     # seconds after a fault's end its window closes: the reclaimer's 60 s idle time and some
NO_FAULT = "no fault"


@dataclass(frozen=True)
class Execution:
    """One handler run for an entry, as its mark line told it; *worker* is the host name that ran it."""

    entry: str
    function: str
    outcome: str
    at: float | None        # the handler's Unix time (None: a mark without one)
    worker: str = ""


@dataclass(frozen=True)
class Duplicate:
    first: Execution        # the success before it: the run that went unrecorded
    again: Execution
    fault: str              # the label of the fault it is put down to, or NO_FAULT

    def describe(self, origin=0.0):
        """One line: the entry, both executions (seconds after *origin*, worker) and the fault."""
        def when(execution):
            at = "?" if execution.at is None else f"{execution.at - origin:.1f}s"
            return f"{at} on {execution.worker or '?'}"

        return (f"{self.first.entry} {self.first.function}: ran at {when(self.first)}, "
                f"again at {when(self.again)}: {self.fault}")


def fault_of(execution, windows):
    """The label of the fault whose window holds *execution*, the latest to start; NO_FAULT if none."""
    if execution.at is None:
        return NO_FAULT
    holding = [window for window in windows
               if window.start - LEAD <= execution.at <= window.end + TAIL
               and window.host in (None, execution.worker)]
    return max(holding, key=lambda window: window.start).label if holding else NO_FAULT


def account(executions, duplicated, windows):
    """A Duplicate for every success beyond the first of the (entry, function) pairs in *duplicated*."""
    successes = defaultdict(list)
    for execution in executions:
        if execution.outcome == "ok" and (execution.entry, execution.function) in duplicated:
            successes[execution.entry, execution.function].append(execution)
    duplicates = []
    for key in duplicated:
        runs = sorted(successes[key], key=lambda execution: (execution.at is None, execution.at or 0.0))
        duplicates += [Duplicate(first, again, fault_of(first, windows))
                       for first, again in zip(runs, runs[1:], strict=False)]
    return duplicates


def by_fault(duplicates, windows):
    """"Redis SIGKILL + restart (AOF) at 104s: 7, SIGKILL a worker fleet-b at 27s: 3, no fault: 0",
    the faults in the order they happened, those with no duplicate left out."""
    counts = Counter(duplicate.fault for duplicate in duplicates)
    labels = [window.label for window in sorted(windows, key=lambda window: window.start)]
    parts = [f"{label}: {counts[label]}" for label in dict.fromkeys(labels) if counts[label]]
    return ", ".join([*parts, f"{NO_FAULT}: {counts[NO_FAULT]}"])
