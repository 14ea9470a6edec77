"""The command line: help everywhere, version, usage errors, honest exits, light imports."""

import subprocess
import sys

import pytest

from relay import __version__
from relay.cli import COMMANDS
from tests.support.relay_process import ROOT, run_relay

# Every test runs Relay as a process (python -m relay): no fixture says so, hence the mark.
pytestmark = pytest.mark.integration

# The secret and git commands' own tests (tests/test_secrets_cli.py, tests/test_gitsync_cli.py) run
# them against a private /var/lib/relay, including this file's check that they import nothing heavy.
# The state views have their own tests (tests/test_views.py); here only their imports are checked.
STATE_VIEWS = [("stats",), ("function", "ls"), ("function", "inspect", "user-events-python")]


def test_version():
    result = run_relay("--version")
    assert (result.returncode, result.stdout) == (0, f"relay {__version__}\n")


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_top_level_help(flag):
    result = run_relay(flag)
    assert result.returncode == 0
    for command in COMMANDS:
        assert f"\n  {command} " in result.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command):
    result = run_relay(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(COMMANDS[command].splitlines()[0])
    assert f"relay {command}" in result.stdout


@pytest.mark.parametrize("args", [("git", "set", "--help"), ("secret", "ls", "-h"), ("function", "inspect", "--help")])
def test_help_after_a_subcommand(args):
    result = run_relay(*args)
    assert result.returncode == 0 and f"relay {args[0]}" in result.stdout


@pytest.mark.parametrize(("args", "first_line"), [
    ((), "Relay runs functions"),
    (("bogus",), "relay: unknown command 'bogus'; see 'relay --help'"),
    (("git", "set"), "relay: invalid arguments: git set"),
    (("secret", "set", "a", "b"), "relay: invalid arguments: secret set a b"),
    (("start", "--bogus"), "relay start: unknown option '--bogus'; see 'relay start --help'"),
    (("function", "rm", "x"), "relay: invalid arguments: function rm x"),
    (("stats", "--jsn"), "relay stats: unknown option '--jsn' (did you mean --json?); see 'relay stats --help'"),
    (("stats", "-x"), "relay stats: unknown option '-x'; see 'relay stats --help'"),
    (("--versoin",), "relay: unknown option '--versoin' (did you mean --version?); see 'relay --help'"),
    (("dlq", "ls", "--since", "-5m", "--limit=2", "--bogus"), "relay dlq: unknown option '--bogus'; "),
    (("match", "--e"), "relay match: unknown option '--e' (did you mean --event or --explain?)"),
    (("dlq", "ls", "--limit"), "relay dlq: --limit needs a value"),
    (("replay", "--since=1h", "--bogus"), "relay replay: unknown option '--bogus'; "),
    (("replay", "--function=orders"), "relay: invalid arguments: replay --function=orders"),
    (("stats", "--json=yes"), "relay stats: --json takes no value"),
    (("runs", "ls", "--stauts=failed"), "relay runs: unknown option '--stauts' (did you mean --status?)"),
    (("runs", "show"), "relay: invalid arguments: runs show"),
    (("runs", "follow", "--limit=3"), "relay: invalid arguments: runs follow --limit=3"),
    (("runs", "ls", "--since"), "relay runs: --since needs a value"),
])
def test_usage_errors_exit_2(args, first_line):
    result = run_relay(*args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith(first_line)
    assert "Usage:" in result.stderr and result.stdout == ""


HEAVY = ("gevent", "docker", "redis", "requests", "urllib3", "yaml")


@pytest.mark.parametrize("args", [("--version",), ("--help",), *STATE_VIEWS])
def test_admin_commands_import_nothing_heavy(args):
    probe = (
        "import sys\n"
        "from relay.entry import main\n"
        f"code = main({list(args)!r})\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in result.stderr, result.stderr


def test_a_reader_that_goes_away_is_not_a_traceback():
    """``relay git --help | head -0``: the pipe's reader is gone before Relay writes."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        probe = subprocess.run([sys.executable, "-m", "relay", "git", "--help"], cwd=ROOT, stdout=write_end,
                               stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert probe.returncode == 141
    assert probe.stderr == ""
