"""The ``relay`` command line: usage texts and dispatch.

Each command imports what it needs only when it runs, so administrative
commands stay fast and never load gevent, docker or redis.
"""

import difflib
import importlib
import re
import sys
from collections.abc import Iterable, Sequence

from docopt import DocoptExit, docopt

from relay import __version__

USAGE = """\
Relay runs functions in Docker containers for events read from a Redis Stream.

Usage:
  relay <command> [<args>...]
  relay (-h | --help)
  relay --version

Commands:
  start       Run Relay in the foreground until SIGTERM or SIGINT.
  health      Check that Redis and the Docker engine answer.
  stats       Show the latest operational statistics.
  function    List the loaded functions or inspect one.
  secret      List, set or remove secrets in the local store.
  git         Sync /functions from a git repository over SSH.
  dlq         Inspect dead-lettered entries, send them back or delete them.
  runs        List, show and follow the runs every worker recorded.
  replay      Send a time range of the stream through a function again.
  console     Serve the web console alone (no Docker).
  validate    Check a functions directory offline, every problem at once.
  match       Show which handlers an event would run, offline.
  invoke      Run a function's handler once on an event, as Relay would.

Options:
  -h --help   Show this help.
  --version   Show Relay's version.

Run 'relay <command> --help' for the help of one command.
"""

# The commands that read Relay's variables (health, dlq, runs, invoke) also read the service's environment file.
ENV_FILE_HELP = """
The variables come from the environment and, for those it lacks, from the
file --env-file names, else from /etc/relay/relay.env when it exists: the
file the systemd unit hands 'relay start' (EnvironmentFile=), read as
systemd reads it (NAME=value lines; # and ; comments; '...' and "..."
quotes). So 'sudo relay ...' on a host installed from deploy/relay.service
uses the service's settings. --env-file=/dev/null reads no file.
"""

COMMANDS = {
    "start": """\
Run Relay in the foreground: consume the stream, run matching functions.

Usage:
  relay start
  relay start (-h | --help)

Configuration comes from the environment (REDIS_URI, REDIS_STREAM,
REDIS_GROUP are required; see the README for the rest). Relay stops taking
work on SIGTERM or SIGINT, lets running invocations finish, and exits 0.
""",
    "health": """\
Check Relay's dependencies: PING Redis and ping the Docker engine.

Usage:
  relay health [--env-file=<file>]
  relay health (-h | --help)

Options:
  --env-file=<file>  The file of the variables the environment lacks, as below.

Reads REDIS_URI (and REDIS_SENTINEL_PASSWORD) and the Docker client
variables (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH). Under
Sentinel, asks the Sentinels for the primary, then PINGs it. Exits 0 when
both answer, else 1 with the first failing check on stderr.
""" + ENV_FILE_HELP,
    "stats": """\
Show the latest operational statistics from the local state database.

Usage:
  relay stats [--json]
  relay stats (-h | --help)

Options:
  --json   The same figures as one JSON object (docs/operations.md).
""",
    "function": """\
List the functions Relay has loaded, or show one in detail.

Usage:
  relay function ls [--json]
  relay function inspect <name> [--json] [--env-file=<file>]
  relay function (-h | --help)

Options:
  --json             JSON instead of the table: a list for ls, an object for
                     inspect (docs/operations.md).
  --env-file=<file>  The file of the variables the environment lacks, as below.

Both read the state database Relay keeps on this host, so they work while
Relay or Redis is down. 'inspect' also shows the function's last 10 runs from
the run ledger (relay runs) when REDIS_URI and REDIS_STREAM are set, and says
in one line why not when they are not, or Redis does not answer.
""" + ENV_FILE_HELP,
    "secret": """\
Manage secrets in the local store (/var/lib/relay/secrets).

Usage:
  relay secret ls
  relay secret set <name>
  relay secret rm <name>
  relay secret (-h | --help)

'secret set' reads the value from the terminal without echo, or from all of
standard input when it is not a terminal.
""",
    "git": """\
Sync /functions from a git repository over SSH.

Usage:
  relay git keygen [--force]
  relay git set <repository> [--ref=<ref>] [--path=<path>] [--webhook-secret=<name>]
  relay git sync
  relay git status [--json]
  relay git remove
  relay git (-h | --help)

Options:
  --force                  Replace an existing deploy key.
  --ref=<ref>              Branch, tag or commit to check out [default: main].
  --path=<path>            Directory of the repository that holds the functions.
  --webhook-secret=<name>  Secret that signs GitHub webhook deliveries.
  --json                   'status' as one JSON object (docs/operations.md).
""",
    "dlq": """\
Inspect the dead-letter stream, send entries back to the stream, or delete them.

Usage:
  relay dlq ls [--limit=<n>] [--function=<name>] [--since=<duration>] [--json] [--env-file=<file>]
  relay dlq show <dlq-id> [--json] [--env-file=<file>]
  relay dlq redrive (<dlq-id>... | --all) [--function=<name>] [--dry-run] [--env-file=<file>]
  relay dlq purge (<dlq-id>... | --all | --before=<duration>) [--yes] [--env-file=<file>]
  relay dlq (-h | --help)

Options:
  --limit=<n>          Keep the newest n entries.
  --function=<name>    Only entries whose reason names this function.
  --since=<duration>   Only entries dead-lettered within this long (e.g. 30m, 24h).
  --before=<duration>  The entries dead-lettered longer ago than this.
  --json               Every field as JSON: one object per line for ls.
  --dry-run            Print what would be sent back; change nothing.
  --yes                Delete without asking (required without a terminal).
  --env-file=<file>    The file of the variables the environment lacks, as below.

Reads REDIS_URI and REDIS_STREAM: the dead-letter stream is
relay:<REDIS_STREAM>:dlq. 'redrive' adds each entry's event to the stream
as a new entry (with redriven_from=<dlq-id>) and deletes it from the
dead-letter stream in one atomic step; it starts with fresh attempts.
""" + ENV_FILE_HELP,
    "replay": """\
Send a time range of the stream through a function again, as new entries.

Usage:
  relay replay --since=<time> [--until=<time>] [--function=<name> [--handler=<handler>]] [--failed-only]
               [--dry-run] [--rate=<rate>] [--yes] [--dir=<dir>] [--env-file=<file>]
  relay replay (-h | --help)

Options:
  --since=<time>       The start: RFC 3339 (2026-12-06T10:00:00Z), a duration
                       ago (90m, 24h), or an entry id to start after (what an
                       interrupted replay prints to continue).
  --until=<time>       The end, inclusive; at most now [default: now].
  --function=<name>    Replay for this function only; without it, for every
                       function whose rules match, one new entry each.
  --handler=<handler>  Only this handler of the function.
  --failed-only        Only the entries whose runs in the run ledger failed or
                       were dead-lettered, for that function (and handler).
  --dry-run            Print what would be added; add nothing.
  --rate=<rate>        Entries added per second, as 100/s or 600/m [default: 100/s].
  --yes                Add without asking (required without a terminal).
  --dir=<dir>          The functions directory [default: /functions].
  --env-file=<file>    The file of the variables the environment lacks, as below.

Reads REDIS_URI and REDIS_STREAM. Each entry of the range whose event the
function's rules match now (as 'relay match' decides) is added to the stream
again with replay_of=<its id> and replay_for=<function[/handler]>: Relay runs
it only for that function, with new idempotency keys and fresh attempts.
Schedule occurrences and the copies of earlier replays are skipped. It says
first how many entries it will add and how far back the stream reaches.
Interrupted, it prints the command that continues where it stopped.
""" + ENV_FILE_HELP,
    "runs": """\
List, show and follow the run ledger: every attempt on every worker, and how each entry was settled.

Usage:
  relay runs ls [--function=<name>] [--handler=<handler>] [--status=<outcome>] [--since=<time>]
                [--until=<time>] [--event-id=<id>] [--entry=<id>] [--limit=<n>] [--json] [--env-file=<file>]
  relay runs show <id> [--json] [--env-file=<file>]
  relay runs follow [--function=<name>] [--handler=<handler>] [--status=<outcome>] [--since=<time>]
                    [--event-id=<id>] [--entry=<id>] [--json] [--env-file=<file>]
  relay runs (-h | --help)

Options:
  --function=<name>     Only the runs of this function.
  --handler=<handler>   Only the runs of this handler, such as app.handler.
  --status=<outcome>    Only the runs that ended so: succeeded, failed, timed-out,
                        killed, not-started, expired; or dead-lettered (the entry
                        was, after it). Several joined by commas: failed,killed.
  --since=<time>        Only the runs recorded at or after this time: RFC 3339
                        (2026-12-06T10:00:00Z) or a duration ago (90m, 24h).
                        For follow, the runs since then come first.
  --until=<time>        Only the runs recorded at or before this time, as --since.
  --event-id=<id>       Only the runs of events with this event_id.
  --entry=<id>          Only the runs of this stream entry.
  --limit=<n>           The newest n runs that match [default: 20].
  --json                Every field of each record as JSON: one object a line for
                        ls and follow, one object for show.
  --env-file=<file>     The file of the variables the environment lacks, as below.

Reads REDIS_URI and REDIS_STREAM: the ledger is relay:<REDIS_STREAM>:runs, one
record an attempt, kept for RUNS_MAX_AGE and at most RUNS_MAX_ENTRIES records.
'ls' lists the newest first. 'show' takes a run id or an entry id and prints
every attempt of that entry, oldest first, with the last 4 KiB of its stdout
and stderr, and how the entry was settled. 'follow' prints the runs as they are
recorded, until Ctrl-C. A run is recorded when it ends.
""" + ENV_FILE_HELP,
    "console": """\
Serve the web console: the fleet, its functions, their runs and dead letters.

Usage:
  relay console [--addr=<addr>] [--dir=<dir>] [--env-file=<file>]
  relay console (-h | --help)

Options:
  --addr=<addr>      The address to listen on [default: 127.0.0.1:8080].
  --dir=<dir>        The functions directory the replay form matches events
                     against [default: /functions].
  --env-file=<file>  The file of the variables the environment lacks, as below.

Reads REDIS_URI, REDIS_STREAM and REDIS_GROUP; needs no Docker. Serves until
Ctrl-C or SIGTERM. Reading needs no login on a loopback address; any other
address, and every action (redrive, purge, replay), needs the console token,
the secret console-token in the local store ('relay secret set
console-token'). A non-loopback address without a token is refused.
'relay start' serves the same console on CONSOLE_ADDR. See docs/console.md.
""" + ENV_FILE_HELP,
    "validate": """\
Check a functions directory as 'relay start' would load it, without Redis or Docker.

Usage:
  relay validate [<dir>] [--json]
  relay validate (-h | --help)

Options:
  --json   One JSON document: the directory, the number of functions, whether
           all are valid, and every finding with its function, file, line,
           field path and severity.

<dir> defaults to /functions. Every function directory is loaded as Relay
loads it (name, template, links), and its handler modules and dependency
manifests are checked, all of them even when the template has errors.
Files Relay reads must be regular files: a FIFO, socket or device is an
error, never opened. A secret the local store lacks, and a pattern key
that looks like an operator Relay does not have (EventBridge's "numeric",
a misspelt "prefix"), are warnings. Prints every problem as
file:line: field: message, then a summary. Exits 0 when there is no
error, 1 otherwise.
""",
    "match": """\
Show which handlers an event would run, in order, without Redis or Docker.

Usage:
  relay match [<dir>] [--event=<file>] [--explain]
  relay match (-h | --help)

Options:
  --event=<file>  The event, one JSON object; - (the default) reads it from
                  standard input.
  --explain       Also show every rule that does not match, with the first
                  field that fails and why.

<dir> defaults to /functions. The event is read and matched as the consumer
does. Exits 0 when at least one handler matches, 3 when none does, 1 when
the event or the directory cannot be read.
""",
    "invoke": """\
Build a function's image and run its handler once on an event, as 'relay start' would.

Usage:
  relay invoke <function> [<handler>] [--dir=<dir>] [--event=<file>] [--env-file=<file>]
  relay invoke (-h | --help)

Options:
  --dir=<dir>        The functions directory [default: /functions].
  --event=<file>     The event, one JSON object; - (the default) reads it from
                     standard input.
  --env-file=<file>  The file of the variables the environment lacks, as below.

Needs the Docker engine (DOCKER_HOST and the other Docker variables), not
Redis. The image is built with the same recipe and tag as 'relay start'
builds; the handler runs in the same hardened container (warm when the
template says so) with the template's env, the secrets from the local store
and the rule's timeout. Its output streams to stdout. With no <handler>, the
handlers whose patterns match the event run in order, stopping at the first
failure. Exits with the failing handler's status (124 when it timed out),
0 when all succeed, 3 when no handler matches, 1 when nothing could run.
""" + ENV_FILE_HELP,
}

# The module that implements each administrative command; its run(args) is
# called with the parsed arguments. Imported only when that command runs.
ADMIN_COMMANDS = {
    "health": "relay.commands.health",
    "stats": "relay.commands.stats",
    "function": "relay.commands.function",
    "secret": "relay.commands.secret",
    "git": "relay.commands.git",
    "dlq": "relay.commands.dlq",
    "replay": "relay.commands.replay",
    "runs": "relay.commands.runs",
    "console": "relay.commands.console",
    "validate": "relay.commands.validate",
    "match": "relay.commands.match",
    "invoke": "relay.commands.invoke",
}


def run(argv: list[str], imported_before_patch: Iterable[str] = ()) -> int:
    """Run the command in *argv* (without the program name); return the exit code."""
    if not argv:
        print(USAGE, file=sys.stderr, end="")
        return 2
    usage, name, words = USAGE, "relay", argv
    try:
        top = docopt(USAGE, argv=argv, version=f"relay {__version__}", options_first=True)
        command = top["<command>"]
        if command not in COMMANDS:
            raise DocoptExit(f"relay: unknown command {command!r}; see 'relay --help'")
        usage, name, words = COMMANDS[command], f"relay {command}", top["<args>"]
        args = docopt(COMMANDS[command], argv=[command, *top["<args>"]])
    except DocoptExit as usage_error:
        print(_usage_error(argv, usage_error, usage, name, words), file=sys.stderr)
        return 2
    except SystemExit:  # --help and --version print and exit 0 (docopt calls sys.exit() with no code)
        return 0

    if command == "start":
        from relay.supervisor import start

        return start(tuple(imported_before_patch))
    return importlib.import_module(ADMIN_COMMANDS[command]).run(args)


_OPTION = re.compile(r"(?<![\w<-])(--?[A-Za-z][A-Za-z0-9-]*)(=<|\s+<)?")
_DOCOPT_COMPLAINTS = ((" requires argument", " needs a value"), (" must not have an argument", " takes no value"))


def _usage_error(argv: Sequence[str], error: DocoptExit, usage: str, name: str, words: Sequence[str]) -> str:
    """One line naming what was wrong (the first unknown option, when there is one), then the usage lines."""
    first = str(error.code).splitlines()[0]
    unknown = _unknown_option(usage, words)
    if unknown:
        option, near = unknown
        hint = f" (did you mean {near}?)" if near else ""
        first = f"{name}: unknown option {option!r}{hint}; see '{name} --help'"
    elif first.endswith(tuple(complaint for complaint, _ in _DOCOPT_COMPLAINTS)):
        for complaint, said in _DOCOPT_COMPLAINTS:
            first = first.replace(complaint, said)
        first = f"{name}: {first}"
    elif not first.startswith("relay:"):
        first = f"relay: invalid arguments: {' '.join(argv) or '(none)'}"
    return f"{first}\n{DocoptExit.usage}"


def _unknown_option(usage: str, words: Sequence[str]) -> tuple[str, str | None] | None:
    """The first of *words* that is no option of *usage*, and the option(s) it may mean (or None).

    An option is known as docopt knows it: by its whole name, or for a long
    one by a prefix that only it starts with. The value of an option that
    takes one may follow it as the next word, and "--" ends the options.
    """
    known: dict[str, bool] = {}   # option -> whether it takes a value
    for option, value in _OPTION.findall(usage):
        known[option] = known.get(option, False) or bool(value)
    longs = [option for option in known if option.startswith("--")]
    takes_value = False
    for word in words:
        if takes_value or word == "--":
            if word == "--" and not takes_value:
                return None
            takes_value = False
            continue
        if word.startswith("--"):
            option, equals, _ = word.partition("=")
            matches = [option] if option in known else [known_long for known_long in longs
                                                        if known_long.startswith(option)]
            if len(matches) > 1:
                return option, " or ".join(sorted(matches))
            if not matches:
                near = difflib.get_close_matches(option[2:], [known_long[2:] for known_long in longs], n=1)
                return option, f"--{near[0]}" if near else None
            takes_value = known[matches[0]] and not equals
        elif word.startswith("-") and word != "-":
            for letter in word[1:]:
                if f"-{letter}" not in known:
                    return f"-{letter}", None
    return None
