"""``relay replay``: send a time range of the stream through a function again.

It reads REDIS_URI and REDIS_STREAM (and MAX_EVENT_BYTES) from the
environment, or from the service's environment file (relay.envfile), and
the functions from --dir as ``relay match`` does; it needs neither Docker
nor gevent. What it reads, chooses and adds is relay.runs.replay's; this
module talks to the operator: it says what it will add and how far back
the stream reaches, asks on a terminal, paces the additions, shows
progress on a terminal (stderr), and when it stops early (Ctrl-C, exit
130; a Redis error, exit 1) prints the command that continues where it
stopped. Any other problem is one line on stderr and exit status 1, with
nothing added.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from relay.quoting import printable

if TYPE_CHECKING:
    import redis

    from relay.commands import Arguments
    from relay.functions import ActiveFunction
    from relay.runs.replay import Selection, Tally, Window

PROGRESS_EVERY = 0.25   # seconds between two progress lines on a terminal


class _Stopped(Exception):
    """The replay stopped before its end; ``cause`` is why (KeyboardInterrupt or a Redis error)."""

    def __init__(self, cause: BaseException, span: Window, added: int, last: str | None) -> None:
        super().__init__(str(cause))
        self.cause, self.span, self.added, self.last = cause, span, added, last


def run(args: Arguments, environ: Mapping[str, str] | None = None, stdin: TextIO | None = None,
        stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run ``relay replay`` from docopt's *args*; return the exit code."""
    import redis

    from relay.errors import RelayError

    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    try:
        if environ is None:
            from relay.envfile import command_environment

            environ = command_environment(args["--env-file"], os.environ)
        return _replay(args, environ, stdin, stdout, stderr)
    except _Stopped as stopped:
        _stopped(args, stopped, stderr)
        return 130 if isinstance(stopped.cause, KeyboardInterrupt) else 1
    except RelayError as error:
        print(f"relay replay: {error}", file=stderr)
        return 1
    except redis.RedisError as error:
        print(f"relay replay: Redis failed: {error}; nothing was added", file=stderr)
        return 1
    except KeyboardInterrupt:
        print("\nrelay replay: interrupted; nothing was added", file=stderr)
        return 130


def _replay(args: Arguments, environ: Mapping[str, str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from relay.commands import connect_stream
    from relay.errors import RunsError
    from relay.runs.replay import DEFAULT_RATE, Failures, Selection, Tally, chosen, first_entry, parse_rate, window

    if args["--handler"] is not None and args["--function"] is None:
        raise RunsError("--handler needs --function: the function whose handler it is")
    rate = parse_rate(args["--rate"]) if args["--rate"] else DEFAULT_RATE
    span = window(args["--since"], args["--until"] or "now")
    functions = _functions(args, stderr)
    client, stream = connect_stream(environ)
    failures = (Failures.scan(client, stream, span, args["--handler"], args["--function"])
                if args["--failed-only"] else None)
    selection = Selection(functions, args["--function"], args["--handler"], failures, _max_event_bytes(environ))
    first = first_entry(client, stream)
    _describe(stream, span, first, stdout)
    if args["--dry-run"]:
        tally = Tally()
        for entry_id, _event, targets in chosen(client, stream, span, selection, tally):
            for target in targets:
                stdout.write(f"would add {_shown(entry_id)} for {_shown(target)}\n")
        stdout.write(_summary(tally, failures is not None) + f"\ndry run: nothing was added to {_shown(stream)}\n")
        return 0
    tally = Tally()
    for _counted in chosen(client, stream, span, selection, tally):
        pass
    stdout.write(_summary(tally, failures is not None) + "\n")
    if not tally.total:
        stdout.write("nothing to add\n")
        return 0
    if not args["--yes"] and not _confirmed(tally.total, stream, rate, stdin, stdout):
        return 1
    return _add(client, stream, span, selection, rate, tally.total, stdout, stderr)


def _add(client: redis.Redis, stream: str, span: Window, selection: Selection, rate: float, total: int,
         stdout: TextIO, stderr: TextIO) -> int:
    import redis

    from relay.runs.replay import Adder, Tally, chosen

    adder = Adder(client, stream, rate)
    added, last, first_new, last_new, shown_at = 0, None, None, None, 0.0
    progress = stderr.isatty()
    held = _HeldInterrupt()
    try:
        for entry_id, event, targets in chosen(client, stream, span, selection, Tally()):
            adder.wait(len(targets))
            with held:
                new_ids = adder.write(entry_id, event, targets)
            added, last = added + len(new_ids), entry_id
            held.deliver()
            first_new, last_new = first_new or new_ids[0], new_ids[-1]
            if progress and time.monotonic() - shown_at >= PROGRESS_EVERY:
                stderr.write(f"\radded {added} of {total} entries (source entry {_shown(entry_id)})")
                stderr.flush()
                shown_at = time.monotonic()
    except (KeyboardInterrupt, redis.RedisError) as error:
        if progress:
            stderr.write("\n")
        raise _Stopped(error, span, added, last) from None
    finally:
        held.close()
    if progress:
        stderr.write("\r\x1b[K")
    span_text = f", {first_new} to {last_new}" if first_new else ""
    stdout.write(f"added {_entries(added)} to {_shown(stream)}{span_text}\n")
    return 0


class _HeldInterrupt:
    """Ctrl-C held while an entry's copies are written, then raised: an entry is never stopped between
    sending its MULTI/EXEC and learning its ids, so the printed continuation never adds it twice."""

    def __init__(self) -> None:
        self.holding = self.pending = False
        self.previous = None
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN):   # an ignored Ctrl-C stays ignored
            self.previous = signal.signal(signal.SIGINT, self._signalled)

    def _signalled(self, _signum: int, _frame: object) -> None:
        if not self.holding:
            raise KeyboardInterrupt
        self.pending = True

    def __enter__(self) -> None:
        self.holding = True

    def __exit__(self, *_exc: object) -> None:
        self.holding = False

    def deliver(self) -> None:
        """Raise the Ctrl-C that came while holding, if one did."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def close(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def _describe(stream: str, span: Window, first: str | None, stdout: TextIO) -> None:
    """The window, and how far back the stream reaches (retention trims its oldest entries)."""
    from relay.runs.replay import entry_key

    after = f" (after entry {_shown(span.after)})" if span.after else ""
    stdout.write(f"replaying {_shown(stream)} from {_instant(span.since_ms)}{after} to {_instant(span.until_ms)}\n")
    if first is None:
        stdout.write(f"the stream {_shown(stream)} holds no entries\n")
        return
    first_ms = (entry_key(first) or (0, 0))[0]
    stdout.write(f"the stream reaches back to {_instant(first_ms)} (entry {_shown(first)})\n")
    if span.since_ms < first_ms:
        stdout.write(f"--since is older than that: the entries before {_instant(first_ms)} were trimmed "
                     "(REDIS_STREAM_RETENTION, MAXLEN) and cannot be replayed\n")


def _summary(tally: Tally, failed_only: bool) -> str:
    """What was read and will be added, then each kind of entry skipped and why: one line each."""
    adds = ", ".join(f"{count} for {_shown(target)}" for target, count in sorted(tally.copies.items()))
    lines = [f"read {_entries(tally.read)}; {_entries(tally.total)} to add" + (f": {adds}" if adds else "")]
    if failed_only:
        lines.append(f"left {_entries(tally.not_failed)} whose runs did not fail (--failed-only)")
    if tally.schedules:
        lines.append(f"skipped {_count(tally.schedules, 'schedule occurrence')}: an occurrence runs only as "
                     "Relay's scheduler publishes it")
    if tally.replays:
        lines.append(f"skipped {_count(tally.replays, 'copy', 'copies')} an earlier replay added: a copy is "
                     "never copied again")
    if tally.unreadable:
        lines.append(f"skipped {_count(tally.unreadable, 'unreadable entry', 'unreadable entries')}: Relay "
                     "dead-letters them (relay dlq ls)")
    return "\n".join(lines)


def _confirmed(total: int, stream: str, rate: float, stdin: TextIO, stdout: TextIO) -> bool:
    from relay.errors import RunsError

    if not stdin.isatty():
        raise RunsError(f"would add {_entries(total)} to {_shown(stream)}; add --yes to do it without a terminal")
    seconds = total / rate
    stdout.write(f"Add {_entries(total)} to {_shown(stream)} at {rate:g}/s (about {_duration(seconds)})? [y/N] ")
    stdout.flush()
    if stdin.readline().strip().lower() in ("y", "yes"):
        return True
    stdout.write("nothing was added\n")
    return False


def _stopped(args: Arguments, stopped: _Stopped, stderr: TextIO) -> None:
    """Where the replay stopped, and the exact command that continues after it."""
    why = "interrupted" if isinstance(stopped.cause, KeyboardInterrupt) else f"Redis failed: {stopped.cause}"
    if stopped.last is None:
        print(f"\nrelay replay: {why}; nothing was added: run the same command again", file=stderr)
        return
    print(f"\nrelay replay: {why} after adding {_entries(stopped.added)}; every entry up to "
          f"{stopped.last} was replayed. To continue:", file=stderr)
    print(f"  {_continue(args, stopped.last, stopped.span)}", file=stderr)


def _continue(args: Arguments, last: str, span: Window) -> str:
    """The command that replays the rest: the same, from after *last*, to the same absolute end."""
    words = ["relay", "replay", f"--since={last}", f"--until={_instant(span.until_ms)}"]
    for option in ("--function", "--handler", "--rate", "--env-file"):
        if args.get(option):
            words.append(f"{option}={args[option]}")
    if args.get("--dir") not in (None, "/functions"):
        words.append(f"--dir={args['--dir']}")
    words += [flag for flag in ("--failed-only", "--yes") if args.get(flag)]
    return _shown(shlex.join(words))


def _functions(args: Arguments, stderr: TextIO) -> list[ActiveFunction]:
    """The functions of --dir as ``relay start`` loads them: the one --function names (an error when it
    is not there or does not load), else all of them, one that does not load skipped with a line."""
    from relay.commands.match import first_problem, load_functions
    from relay.errors import RunsError, TemplateError
    from relay.functions import ActiveFunction, load_function
    from relay.live.loading import function_names

    root = Path(args["--dir"] or "/functions")
    if not root.is_dir():
        raise RunsError(f"{root} is not a directory")
    name = args["--function"]
    if name is None:
        return load_functions(root, "relay replay", stderr)
    if name not in function_names(root):
        raise RunsError(f"there is no function {_quote(name)} in {root}")
    try:
        return [ActiveFunction(load_function(root / name), image="")]
    except TemplateError as error:
        raise RunsError(f"function {_quote(name)} does not load: {first_problem(error)} "
                        f"(see 'relay validate {root}')") from None


def _max_event_bytes(environ: Mapping[str, str]) -> int:
    from relay.config import DEFAULT_MAX_EVENT_BYTES, _positive_int

    return int(_positive_int(environ, "MAX_EVENT_BYTES", DEFAULT_MAX_EVENT_BYTES))


def _instant(unix_ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(unix_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _duration(seconds: float) -> str:
    whole = max(1, round(seconds))
    for unit, size in (("h", 3600), ("m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}{whole % size:02d}{'m' if unit == 'h' else 's'}"
    return f"{whole}s"


def _entries(count: int) -> str:
    return _count(count, "entry", "entries")


def _count(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def _shown(text: str) -> str:
    return printable(text)


def _quote(text: str) -> str:
    from relay.quoting import quote

    return quote(text)
