"""``relay invoke <function> [<handler>]``: run a handler once on one event, as production would.

The function is loaded from <dir> as ``relay start`` loads it; its image is
built by the same ImageBuilder (same recipe, same tag: a Relay on this host
reuses it), and each handler runs through the same executors: the hardened
container, warm when the template says ``warm:``, the template's env with
secrets from the local store, the rule's timeout. The handler's output
streams to stdout with the prefix Relay's own output gives it; one line per
handler on stderr says how it ended. The exit status is the handler's: the
first failing one's when several run (they run in order and stop at the
first failure, as the dispatcher does), 124 when it timed out, 1 when it
could not run at all. Redis is not used.

The handler context is that of a first attempt on an entry that is not in
any stream: RELAY_MESSAGE_ID is ``invoke-<16 hex digits>``, new for each
run; RELAY_IDEMPOTENCY_KEY is ``invoke-<32 hex digits>``, new for each
handler run, so nothing a stream delivery did ever looks like it;
RELAY_ATTEMPT is 1, and RELAY_DEADLINE is the rule's timeout from the start.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TextIO

if TYPE_CHECKING:   # what the annotations name; the modules themselves load only when the command runs
    from docker import DockerClient

    from relay.functions import Function
    from relay.functions.template import Rule
    from relay.stream.plans import Plan

Args = Mapping[str, Any]   # docopt's parsed command line: strings, flags and None by option name


class Input(Protocol):
    """Where the event is read from with ``-``: sys.stdin, or a test's stand-in with a ``buffer``."""

    @property
    def buffer(self) -> BinaryIO: ...


FAILED, NONE_MATCHED, TIMED_OUT, INTERRUPTED = 1, 3, 124, 130


@dataclass(frozen=True)
class _Target:
    handler: str
    timeout: int   # nanoseconds


def run(args: Args, stdin: Input | None = None, stdout: TextIO | None = None,
        environ: Mapping[str, str] | None = None) -> int:
    """Run ``relay invoke`` from docopt's *args*; the exit status of the handler that decides it."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    try:
        if environ is None:
            environ = _environ(args["--env-file"])
        return _invoke(args, stdin, stdout, environ)
    except _Refused as refused:
        print(f"relay invoke: {refused}", file=sys.stderr)
        return refused.status
    except KeyboardInterrupt:
        print("relay invoke: interrupted; the container was removed", file=sys.stderr)
        return INTERRUPTED


def _environ(env_file: str | None) -> Mapping[str, str]:
    """This process's environment, completed by the service's environment file (relay.envfile)."""
    from relay.envfile import command_environment
    from relay.errors import ConfigError

    try:
        return command_environment(env_file, os.environ)
    except ConfigError as error:
        raise _Refused(str(error)) from None


class _Refused(Exception):
    def __init__(self, message: str, status: int = FAILED) -> None:
        super().__init__(message)
        self.status = status


def _invoke(args: Args, stdin: Input, stdout: TextIO, environ: Mapping[str, str]) -> int:
    from relay.errors import RelayError

    function = _load(Path(args["--dir"] or "/functions"), args["<function>"])
    plan = _read_event(args["--event"] or "-", stdin, function)
    targets = _targets(function, plan, args["<handler>"])
    env = _environment(function)
    try:
        from relay.clients import connect_docker
        from relay.config import load_docker_env, load_log_level
        from relay.logs import configure_logging

        configure_logging(load_log_level(environ))
        docker = connect_docker(load_docker_env(environ))
    except RelayError as error:
        raise _Refused(str(error)) from None
    try:
        return _run_handlers(docker, function, plan, targets, env, stdout)
    finally:
        docker.close()


def _load(root: Path, name: str) -> Function:
    from relay.errors import TemplateError
    from relay.functions import load_function

    directory = root / name
    if not directory.is_dir():
        raise _Refused(f'no function "{name}" in {root}')
    try:
        return load_function(directory)
    except TemplateError as error:
        first = str(error).splitlines()[0]
        raise _Refused(f"{first} (see 'relay validate {root}')") from None


def _read_event(source: str, stdin: Input, function: Function) -> Plan:
    """The event read and checked as the consumer reads it: a Plan holding only *function*'s targets."""
    from relay.functions import ActiveFunction
    from relay.functions.rules import Rules
    from relay.stream.keys import EVENT_FIELD
    from relay.stream.plans import plan_entry

    try:
        raw = stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as error:
        raise _Refused(f"cannot read the event from {source}: {error.strerror or error}") from None
    plan = plan_entry("0-0", {EVENT_FIELD: raw}, Rules([ActiveFunction(function, image="")]))
    if plan.problem:
        raise _Refused(f"{plan.problem}; Relay would dead-letter this entry")
    return plan


def _targets(function: Function, plan: Plan, handler: str | None) -> list[_Target]:
    """The handlers to run: the one named (whether or not the event matches it), else the matching ones."""
    template = function.template
    if handler is None:
        targets = [_Target(target.rule.handler, target.rule.timeout) for target in plan.targets]
        if not targets:
            raise _Refused(f'no handler of "{function.name}" matches this event '
                           f"(see 'relay match --explain')", NONE_MATCHED)
        return targets
    for rule in template.rules:
        if rule.handler == handler:
            _note_mismatch(rule, plan)
            return [_Target(rule.handler, rule.timeout)]
    for schedule in template.schedules:
        if schedule.handler == handler:
            return [_Target(schedule.handler, schedule.timeout)]
    known = sorted({rule.handler for rule in template.rules} | {entry.handler for entry in template.schedules})
    raise _Refused(f'function "{function.name}" has no handler "{handler}"; its handlers: {", ".join(known)}')


def _note_mismatch(rule: Rule, plan: Plan) -> None:
    from relay.functions.explain import first_mismatch

    why = first_mismatch(rule.pattern.source, plan.event)
    if why is not None:
        print(f"relay invoke: note: the event does not match {rule.handler}'s pattern ({why}); "
              "running it anyway", file=sys.stderr)


def _environment(function: Function) -> Mapping[str, str]:
    from relay.errors import SecretError
    from relay.gitsync.webhook_secret import secret_store
    from relay.secrets.store import environment

    try:
        return environment(function, secret_store())
    except SecretError as error:
        raise _Refused(f'function "{function.name}": {error}') from None


def _run_handlers(docker: DockerClient, function: Function, plan: Plan, targets: list[_Target],
                  env: Mapping[str, str], stdout: TextIO) -> int:
    from relay.errors import BuildError
    from relay.runtime.executor import build_executor
    from relay.runtime.images import ImageBuilder
    from relay.runtime.invocation import Invocation

    try:
        image = ImageBuilder(docker).prepare(function)
    except BuildError as error:
        raise _Refused(str(error).splitlines()[0]) from None
    template = function.template
    # Labelled with a worker name no Relay has, so no starting Relay sweeps these containers as its own.
    executor = build_executor(docker, f"relay-invoke@{socket.gethostname()}", stdout, warm_capacity=1)
    message_id = f"invoke-{secrets.token_hex(8)}"
    payload = plan.payload
    assert payload is not None, "an event that is not text has a problem, refused by _read_event"
    try:
        for target in targets:
            outcome = executor.run(Invocation(
                function=function.name, handler=target.handler, image=image, payload=payload.encode(),
                timeout=target.timeout, env=env, message_id=message_id, event_id=plan.event_id,
                event_name=plan.event_name, network=template.network, runtime=template.runtime,
                warm=template.warm, attempt=1, idempotency_key=f"invoke-{secrets.token_hex(16)}"))
            took = f"{outcome.duration:.2f}s"
            if outcome.ok:
                print(f"relay invoke: {target.handler} succeeded in {took}", file=sys.stderr)
                continue
            print(f"relay invoke: {outcome.error} ({took})", file=sys.stderr)
            if outcome.timed_out:
                return TIMED_OUT
            return outcome.exit_code if outcome.exit_code else FAILED
        return 0
    finally:
        executor.warm.close()
