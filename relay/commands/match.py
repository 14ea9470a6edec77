"""``relay match [<dir>]``: which handlers an event would run, offline.

The event (one JSON object, from --event=<file> or standard input) is read
and matched exactly as the consumer does (relay.stream.plans); functions
are loaded as ``relay start`` loads them, and one that does not load is
skipped with a line on stderr naming its first problem (``relay validate``
lists them all). Neither Redis
nor Docker is needed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.errors import TemplateError
    from relay.functions import ActiveFunction

MATCHED, NONE_MATCHED, FAILED = 0, 3, 1


def run(args: Arguments, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run ``relay match`` from docopt's *args*; 0 when a handler matches, 3 when none does, 1 on an error."""
    from relay.functions.explain import first_mismatch
    from relay.functions.rules import Rules
    from relay.stream.keys import EVENT_FIELD
    from relay.stream.plans import plan_entry

    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    root = Path(args["<dir>"] or "/functions")
    source = args["--event"] or "-"
    try:
        raw = stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as error:
        print(f"relay match: cannot read the event from {source}: {error.strerror or error}", file=sys.stderr)
        return FAILED
    if not root.is_dir():
        print(f"relay match: {root} is not a directory", file=sys.stderr)
        return FAILED
    functions = load_functions(root, "relay match", sys.stderr)
    plan = plan_entry("0-0", {EVENT_FIELD: raw}, Rules(functions))
    if plan.problem:
        print(f"relay match: {plan.problem}; Relay would dead-letter this entry", file=sys.stderr)
        return FAILED
    for target in plan.targets:
        stdout.write(f"{target.active.name}  {target.rule.handler}\n")
    if args["--explain"]:
        matched = {id(target.rule) for target in plan.targets}
        for active in functions:
            for index, rule in enumerate(active.function.template.rules):
                if id(rule) not in matched:
                    why = first_mismatch(rule.pattern.source, plan.event)
                    stdout.write(f"no match: {active.name}  {rule.handler} (events[{index}]): {why}\n")
    if not plan.targets:
        print(f"relay match: no handler in {root} matches this event", file=sys.stderr)
        return NONE_MATCHED
    return MATCHED


def load_functions(root: Path, command: str, stderr: TextIO) -> list[ActiveFunction]:
    """The functions of *root* as ``relay start`` loads them (no image); one that does not load is
    skipped with a line on *stderr* naming its first problem, *command* first."""
    from relay.errors import TemplateError
    from relay.functions import ActiveFunction, load_function
    from relay.live.loading import function_names

    functions: list[ActiveFunction] = []
    for name in function_names(root):
        try:
            functions.append(ActiveFunction(load_function(root / name), image=""))
        except TemplateError as error:
            print(f"{command}: skipped {name}: {first_problem(error)} (see 'relay validate {root}')", file=stderr)
    return functions


def first_problem(error: TemplateError) -> str:
    """The first problem of *error* (a TemplateError) on one line, with how many more there are."""
    from relay.errors import InvalidTemplate

    if not isinstance(error, InvalidTemplate) or not error.problems:
        return str(error).splitlines()[0]
    problems = error.problems
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{error.source}: {problems[0]}{more}"
