"""``relay dlq ls | show | redrive | purge``: the dead-letter stream, for an operator.

They read REDIS_URI and REDIS_STREAM (the dead-letter stream is
``relay:<REDIS_STREAM>:dlq``) from the environment, or from the service's
environment file (relay.envfile), and need neither Docker nor gevent. Any
problem -- Redis unreachable, an id that is not there -- is one line on
stderr and exit status 1, with nothing changed.

Every field of an entry is whatever a producer or a handler wrote, so the
human output shows each one through ``_shown``: a character a terminal could
act on (C0 and C1 controls, ESC, DEL, bidirectional overrides, line
separators, lone surrogates: whatever ``str.isprintable`` refuses) is written
as an escape such as \\x1b or \\u009b. ``--json`` output is JSON's own.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

import redis

from relay.errors import RelayError
from relay.quoting import printable as _shown
from relay.quoting import shorten

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.errors import DeadLetterError
    from relay.stream.deadletters import DeadLetter, DeadLetters

REDRIVE_CHUNK = 100  # entries sent back per script: each chunk is one atomic step


def run(args: Arguments, environ: Mapping[str, str] | None = None, stdin: TextIO | None = None,
        stdout: TextIO | None = None) -> int:
    """Run one ``relay dlq`` command from docopt's *args*; return the exit code."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    command = next(word for word in ("ls", "show", "redrive", "purge") if args[word])
    try:
        if environ is None:
            from relay.envfile import command_environment

            environ = command_environment(args["--env-file"], os.environ)
        letters = _connect(environ)
        if command == "ls":
            return _ls(letters, args, stdout)
        if command == "show":
            return _show(letters, args, stdout)
        if command == "redrive":
            return _redrive(letters, args, stdout)
        return _purge(letters, args, stdin, stdout)
    except RelayError as error:
        print(f"relay dlq {command}: {error}", file=sys.stderr)
        return 1
    except redis.RedisError as error:
        print(f"relay dlq {command}: Redis failed: {error}; nothing more was changed", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nrelay dlq {command}: interrupted", file=sys.stderr)
        return 130


def _connect(environ: Mapping[str, str]) -> DeadLetters:
    from relay.commands import connect_stream
    from relay.stream.deadletters import DeadLetters

    return DeadLetters(*connect_stream(environ))


# --- ls, show ---------------------------------------------------------------------------


def _ls(letters: DeadLetters, args: Arguments, stdout: TextIO) -> int:
    from relay.stream.deadletters import since

    limit = _positive(args["--limit"], "--limit") if args["--limit"] is not None else None
    since_ms = since(_duration(args["--since"], "--since")) if args["--since"] else None
    found = letters.newest(limit=limit, function=args["--function"], since_ms=since_ms)
    if args["--json"]:
        for letter in found:
            stdout.write(json.dumps(_record(letter), ensure_ascii=False) + "\n")
        return 0
    now_ms = time.time() * 1000
    rows = [(_shown(letter.dlq_id), _shown(letter.original_id) or "-", _age(now_ms - letter.dead_lettered_ms),
             _attempts(letter), _shown(",".join(letter.targets)) or "-",
             _shown(_one_line(letter.reason))) for letter in found]
    header = ("DLQ ID", "ORIGINAL ID", "AGE", "ATTEMPTS", "FUNCTION", "REASON")
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(5)]
    room = shutil.get_terminal_size().columns if stdout.isatty() else None
    for row in [header, *rows]:
        line = "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=False)) + "  " + row[5]
        if room is not None and len(line) > room:
            line = line[:max(room - 3, 0)] + "..."
        stdout.write(line.rstrip() + "\n")
    return 0


def _show(letters: DeadLetters, args: Arguments, stdout: TextIO) -> int:
    [letter] = letters.get([args["<dlq-id>"][0]])
    if args["--json"]:
        stdout.write(json.dumps(_record(letter), ensure_ascii=False, indent=2) + "\n")
        return 0
    age = _age(time.time() * 1000 - letter.dead_lettered_ms)
    lines = [("DLQ ID", _shown(letter.dlq_id)), ("Original stream", _shown(letter.original_stream)),
             ("Original ID", _shown(letter.original_id)), ("Group", _shown(letter.group)),
             ("Consumer", _shown(letter.consumer)), ("Dead-lettered", f"{_shown(letter.timestamp)} ({age} ago)"),
             ("Attempts", _attempts(letter)),
             ("Functions", _shown(", ".join(letter.targets)) or "-"), ("Reason", _shown(_one_line(letter.reason)))]
    if letter.schedule is not None:
        lines.append(("Schedule", _shown(letter.schedule)))
    if letter.run_status is not None:
        code = f", exit code {letter.exit_code}" if letter.exit_code is not None else ""
        lines.append(("Last attempt", f"{_shown(letter.run_status)}{code}"))
        lines.append(("Run", f"{_shown(letter.run_id)} (relay runs show {_shown(letter.run_id)})"
                      if letter.run_id else "- (its record could not be written to the run ledger)"))
    if letter.truncated:
        size = "was too big to keep whole" if letter.event_bytes is None else f"had {letter.event_bytes} bytes"
        lines.append(("Truncated", f"yes: the event {size}; the first {len(letter.event)} are kept"))
    for name, value in lines:
        stdout.write(f"{name + ':':<17}{value}\n")
    stdout.write("Event:\n" + _pretty(letter.event) + "\n")
    if letter.stderr:
        stdout.write("Stderr (its end):\n" + "\n".join(
            "  " + _shown(line) for line in letter.stderr.splitlines()) + "\n")
    return 0


# --- redrive, purge ---------------------------------------------------------------------


def _redrive(letters: DeadLetters, args: Arguments, stdout: TextIO) -> int:
    if args["--all"]:
        chosen = letters.newest(function=args["--function"])
        cut = [letter for letter in chosen if letter.truncated]
        ids = [letter.dlq_id for letter in chosen if not letter.truncated]
        if cut:
            stdout.write(f"skipping {_entries(len(cut))} whose event was too big to keep whole: "
                         f"{', '.join(letter.dlq_id for letter in cut)}\n")
    else:
        chosen = letters.get(args["<dlq-id>"])
        if args["--function"]:
            chosen = [letter for letter in chosen if args["--function"] in letter.functions]
        ids = [letter.dlq_id for letter in chosen]
    if args["--dry-run"]:
        for dlq_id in ids:
            stdout.write(f"would redrive {dlq_id} to {letters.stream}\n")
        stdout.write(f"would redrive {_entries(len(ids))}\n")
        return 0
    done = 0
    for start in range(0, len(ids), REDRIVE_CHUNK):
        for dlq_id, new_id in letters.redrive(ids[start:start + REDRIVE_CHUNK]):
            stdout.write(f"{dlq_id} -> {letters.stream} {new_id}\n")
            done += 1
    stdout.write(f"redriven {_entries(done)}\n")
    return 0


def _purge(letters: DeadLetters, args: Arguments, stdin: TextIO, stdout: TextIO) -> int:
    from relay.stream.deadletters import since

    if args["--all"]:
        ids = [letter.dlq_id for letter in letters.newest()]
    elif args["--before"]:
        cutoff = since(_duration(args["--before"], "--before"))
        ids = [letter.dlq_id for letter in letters.newest() if letter.dead_lettered_ms < cutoff]
    else:
        ids = [letter.dlq_id for letter in letters.get(args["<dlq-id>"])]
    if ids and not args["--yes"]:
        if not stdin.isatty():
            raise _refusal(f"would delete {_entries(len(ids))} from {letters.key}; add --yes to do it "
                           f"without a terminal")
        stdout.write(f"Delete {_entries(len(ids))} from {letters.key}? [y/N] ")
        stdout.flush()
        if stdin.readline().strip().lower() not in ("y", "yes"):
            stdout.write("nothing was deleted\n")
            return 1
    stdout.write(f"purged {_entries(letters.purge(ids))}\n")
    return 0


# --- helpers ----------------------------------------------------------------------------


def _record(letter: DeadLetter) -> dict[str, object]:
    """Every field of *letter* as JSON values; an event that is not UTF-8 goes as base64."""
    record: dict[str, object] = {
        "dlq_id": letter.dlq_id, "original_id": letter.original_id, "original_stream": letter.original_stream,
        "group": letter.group, "consumer": letter.consumer, "reason": letter.reason, "attempts": letter.attempts,
        "timestamp": letter.timestamp, "targets": list(letter.targets), "truncated": letter.truncated,
        "event_bytes": letter.event_bytes, "schedule": letter.schedule, "run_id": letter.run_id,
        "run_status": letter.run_status, "exit_code": letter.exit_code, "stderr": letter.stderr or None}
    try:
        record["event"] = letter.event.decode("utf-8")
    except UnicodeDecodeError:
        record["event_base64"] = base64.b64encode(letter.event).decode("ascii")
    return record


def _pretty(event: bytes) -> str:
    """The event for a person: indented when it is JSON, its lines kept, nothing a terminal acts on."""
    try:
        text = event.decode("utf-8")
    except UnicodeDecodeError:
        return f"(not UTF-8; {len(event)} bytes) {event[:200]!r}"
    try:
        text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        pass
    return "\n".join(_shown(line) for line in text.split("\n"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _attempts(letter: DeadLetter) -> str:
    """The attempts as a number, or the field's own text (escaped, cut) when it is not ASCII digits."""
    if letter.attempts is not None:
        return str(letter.attempts)
    return shorten(_shown(letter.attempts_text), 40) or "-"


def _age(milliseconds: float) -> str:
    seconds = max(0, int(milliseconds // 1000))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _entries(count: int) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'}"


def _positive(text: str, option: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 18) or int(text) < 1:
        raise _refusal(f"{option}={text!r} is not a positive whole number")
    return int(text)


def _duration(text: str, option: str) -> int:
    from relay.durations import parse_duration
    from relay.errors import DurationError

    try:
        value = parse_duration(text)
    except DurationError as error:
        raise _refusal(f"{option}: {error}") from None
    if value <= 0:
        raise _refusal(f"{option}={text!r} must be a positive duration, like 30m or 24h")
    return value


def _refusal(text: str) -> DeadLetterError:
    from relay.errors import DeadLetterError

    return DeadLetterError(text)
