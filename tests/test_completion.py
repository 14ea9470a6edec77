"""deploy/relay.bash-completion, run by a real bash the way readline calls it, against relay/cli.py's usage texts."""

import re
import shlex
import subprocess

import pytest

from relay.cli import COMMANDS
from tests.support.relay_process import ROOT
from tests.support.workers import write_function

COMPLETION = ROOT / "deploy" / "relay.bash-completion"
DEFAULT_BREAKS = " \t\n\"'><=;|&(:"
SUBCOMMANDS = {"function", "secret", "git", "dlq", "runs"}


def complete(line, breaks=DEFAULT_BREAKS):
    """What the completion offers for *line* (the cursor at its end), with bash's word splitting:
    spaces, and with '=' in COMP_WORDBREAKS an ``--flag=value`` is three words."""
    words = line.split(" ")
    if "=" in breaks:
        split = []
        for word in words:
            if word.startswith("--") and "=" in word:
                name, value = word.split("=", 1)
                split += [name, "=", *([value] if value else [])]
            else:
                split.append(word)
        words = split
    script = (f"source {shlex.quote(str(COMPLETION))}\n"
              f"COMP_WORDBREAKS={shlex.quote(breaks)}\n"
              f"COMP_WORDS=({' '.join(shlex.quote(word) for word in words)})\n"
              f"COMP_CWORD={len(words) - 1}\n"
              "_relay\n"
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True,
                            timeout=30, cwd=ROOT)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return [word for word in result.stdout.splitlines() if word]


def usage_lines():
    """(command, subcommand or None, flags as completed: ``--x`` or ``--x=``) for every usage line of relay/cli.py."""
    for command, text in COMMANDS.items():
        for line in text.splitlines():
            if not line.startswith(f"  relay {command}") or "(-h | --help)" in line:
                continue
            rest = line.split()[2:]
            sub = rest[0] if command in SUBCOMMANDS else None
            flags = {name + equals for name, equals in re.findall(r"(--[a-z-]+)(=?)", line)}
            yield command, sub, flags


def test_every_command_is_offered():
    assert set(complete("relay ")) == {*COMMANDS, "--help", "--version"}
    assert complete("relay.pyz in") == ["invoke"]


@pytest.mark.parametrize(("command", "sub", "flags"), list(usage_lines()),
                         ids=lambda value: value if isinstance(value, str) else None)
def test_every_flag_of_every_usage_line_is_offered(command, sub, flags):
    line = f"relay {command} {sub + ' ' if sub else ''}--"
    assert flags <= set(complete(line)), line
    if sub is not None:
        assert sub in complete(f"relay {command} ")
    assert "--help" in complete(f"relay {command} -")


def test_invoke_completes_function_names_then_their_handlers(tmp_path):
    write_function(tmp_path, "orders", "runtime: python3.14\nevents:\n  - handler: a.created\n    pattern: {}\n"
                   "  - handler: \"a.updated\"  # quoted\n    pattern: {}\nschedules:\n  - handler: a.nightly\n"
                   "    cron: '0 0 * * *'\n", {})
    write_function(tmp_path, "users", "runtime: node24\nevents: []\n", {})
    (tmp_path / "no-template").mkdir()
    assert complete(f"relay invoke --dir={tmp_path} ") == ["--dir=", "--event=", "--env-file=", "--help", "orders",
                                                           "users"]
    assert complete(f"relay invoke --dir={tmp_path} o") == ["orders"]
    assert complete(f"relay invoke --dir={tmp_path} orders a.") == ["a.created", "a.updated", "a.nightly"]
    assert complete(f"relay invoke --dir={tmp_path} orders a.created ") == ["--dir=", "--event=", "--env-file=",
                                                                            "--help"]


def test_a_flag_value_is_completed_after_its_equals_sign(tmp_path):
    (tmp_path / "events").mkdir()
    (tmp_path / "event.json").write_text("{}")
    # bash splits at '=' by default: readline replaces only the value.
    assert complete(f"relay invoke --dir={tmp_path}/ev") == [f"{tmp_path}/events"]
    assert sorted(complete(f"relay match --event={tmp_path}/ev")) == [f"{tmp_path}/event.json", f"{tmp_path}/events"]
    assert "-" in complete("relay match --event=")
    # Without '=' in COMP_WORDBREAKS the whole word is replaced.
    assert complete(f"relay invoke --dir={tmp_path}/ev", breaks=" \t\n") == [f"--dir={tmp_path}/events"]
    assert complete("relay dlq purge --be") == ["--before="]
    (tmp_path / "relay.env").write_text("")
    assert complete(f"relay health --env-file={tmp_path}/rel") == [f"{tmp_path}/relay.env"]


def test_runs_completes_its_outcomes_and_the_flags_of_its_long_usage_lines():
    assert complete("relay runs ls --status=t") == ["timed-out"]
    assert complete("relay runs follow --status=dead") == ["dead-lettered"]
    assert {"--until=", "--limit=", "--entry=", "--env-file="} <= set(complete("relay runs ls --"))
    assert "--until=" not in complete("relay runs follow --")


def test_validate_and_match_complete_a_directory(tmp_path):
    (tmp_path / "functions").mkdir()
    (tmp_path / "file").write_text("")
    assert complete(f"relay validate {tmp_path}/") == [f"{tmp_path}/functions"]
    assert complete(f"relay match {tmp_path}/f") == [f"{tmp_path}/functions"]
