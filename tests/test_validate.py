"""``relay validate``: a functions directory checked offline, every problem at once (no Redis, no Docker)."""

import io
import json
import os
import re

from relay.commands.validate import run
from relay.functions import parse_template
from relay.secrets.store import FileSecretStore
from tests.support.relay_process import base_env, run_relay
from tests.support.workers import write_function

PYTHON = "runtime: python3.14\nevents:\n  - handler: events.created.handler\n    pattern: {kind: [a]}\n"
NODE = "runtime: node24\nevents:\n  - handler: lib.jobs.handler\n    pattern: {kind: [b]}\n"


def validate(root, tmp_path, *extra, secrets=()):
    store_dir = tmp_path / "secrets"
    store_dir.mkdir(exist_ok=True)
    for name in secrets:
        (store_dir / name).write_text("value")
    stdout = io.StringIO()
    args = {"<dir>": str(root), "--json": "--json" in extra}
    code = run(args, stdout=stdout, store=FileSecretStore(store_dir))
    return code, stdout.getvalue()


def test_valid_functions_pass(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "users", PYTHON, {"events/created.py": "def handler(event):\n    pass\n"})
    write_function(root, "jobs", NODE, {"lib/jobs.mjs": "export function handler(event) {}\n"})
    assert validate(root, tmp_path) == (0, f"2 functions in {root}: 2 valid\n")


def test_every_problem_of_every_function_is_listed_at_once(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "bad-template", "runtime: python2\nconcurrency: 0\nevents: []\n", {})
    write_function(root, "no-module", PYTHON + "  - handler: other.handler\n    pattern: {kind: [c]}\n",
                   {"events/created/__init__.py": "def handler(event):\n    pass\n"})
    write_function(root, "Bad_Name", PYTHON, {})
    write_function(root, "lockless", NODE, {"lib/jobs.js": "", "package-lock.json": "{}"})
    (root / "lockless" / "package.json").unlink(missing_ok=True)
    code, output = validate(root, tmp_path)
    lines = output.splitlines()
    assert code == 1
    template = root / "bad-template" / "template.yaml"
    assert [line for line in lines if line.startswith(str(template))] == [
        f"{template}: a template needs at least one entry in events or schedules",
        f'{template}:1: runtime: "python2" is not supported; use one of python3.14, node24',
        f"{template}:2: concurrency: 0 must be a whole number of 1 or more"]
    assert (f"{root / 'no-module' / 'template.yaml'}:5: events[1].handler: other.handler: no module other: none of "
            f"other.py, other/__init__.py exists in {root / 'no-module'}") in lines
    assert not any("events[0].handler" in line for line in lines if "no-module" in line)
    assert any(line.startswith(f"{root / 'Bad_Name'}: ") for line in lines)
    assert any(line.startswith(f"{root / 'lockless'}: package-lock.json needs package.json") for line in lines)
    assert lines[-1].startswith(f"4 functions in {root}: 0 valid, 4 with problems (")


def test_a_template_with_errors_still_has_its_handler_modules_checked(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "users", """runtime: python3.14
concurrency: 0
events:
  - handler: events.created.handler
    pattern: {kind: a}
  - handler: events.gone.handler
    pattern: {kind: [b]}
    timeout: forever
schedules:
  - handler: jobs.nightly.run
    cron: "0 3 * * *"
""", {"events/created.py": "def handler(event):\n    pass\n"})
    code, output = validate(root, tmp_path)
    path = root / "users" / "template.yaml"
    assert code == 1
    assert output.splitlines()[:-1] == [
        f"{path}:2: concurrency: 0 must be a whole number of 1 or more",
        f'{path}:5: events[0].pattern.kind: "a" is a single value; equality takes a list, e.g. [a]',
        f"{path}:6: events[1].handler: events.gone.handler: no module events.gone: none of events/gone.py, "
        f"events/gone/__init__.py exists in {root / 'users'}",
        f'{path}:8: events[1].timeout: "forever" is not a duration (invalid duration "forever"); use e.g. 20s or '
        f"1m30s",
        f"{path}:10: schedules[0].handler: jobs.nightly.run: no module jobs.nightly: none of jobs/nightly.py, "
        f"jobs/nightly/__init__.py exists in {root / 'users'}"]


def test_cron_problems_say_which_field_and_why(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "jobs", """runtime: python3.14
schedules:
  - handler: app.run
    cron: "61 3 * * *"
  - handler: app.run
    cron: "0 3 * * MON-XYZ"
  - handler: app.run
    cron: "*/0 * * * * *"
""", {"app.py": "def run(event):\n    pass\n"})
    code, output = validate(root, tmp_path)
    path = root / "jobs" / "template.yaml"
    assert code == 1
    assert output.splitlines()[:-1] == [
        f'{path}:4: schedules[0].cron: "61 3 * * *" is not a valid cron expression: the minute field "61" is not '
        f"acceptable, out of range",
        f'{path}:6: schedules[1].cron: "0 3 * * MON-XYZ" is not a valid cron expression: the day-of-week field '
        f'"MON-XYZ" is not acceptable',
        f'{path}:8: schedules[2].cron: "*/0 * * * * *" is not a valid cron expression: the second field "*/0" step '
        f'"0" is not acceptable']


OPERATOR_LOOKALIKES = """runtime: python3.14
events:
  - handler: app.handler
    pattern:
      detail:
        price: {numeric: [">", 100]}
        source_ip: {cidr: [10.0.0.0/24]}
        state: {anything_but: [DELETED]}
      $and: [kind]
      $type: [order]
"""


def test_keys_that_look_like_operators_relay_lacks_are_warnings_with_their_path_and_line(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "orders", OPERATOR_LOOKALIKES, {"app.py": "def handler(event):\n    pass\n"})
    code, output = validate(root, tmp_path)
    path = root / "orders" / "template.yaml"
    lines = output.splitlines()
    assert code == 0, output                   # warnings only: relay start loads it as before
    assert lines[0] == (f'{path}:6: events[0].pattern.detail.price.numeric: warning: "numeric" is not an operator '
                        f"of Relay's patterns, so it is read as a nested event field of that name, which events "
                        f"rarely have; write {{gt: 100}}")
    assert lines[1].startswith(f'{path}:7: events[0].pattern.detail.source_ip.cidr: warning: "cidr" is not an '
                               f"operator of Relay's patterns") and "prefix" in lines[1]
    assert lines[2].startswith(f"{path}:8: events[0].pattern.detail.state.anything_but: warning: ")
    assert lines[2].endswith("write anything-but, Relay's operator")
    assert lines[3] == (f'{path}:9: events[0].pattern.$and: warning: "$and" is not a keyword of Relay\'s patterns, '
                        f"so it is read as an event field of that name; sibling fields must all hold already: put "
                        f"the conditions side by side")
    assert lines[4].startswith(f'{path}:10: events[0].pattern.$type: warning: "$type" is not a keyword')
    assert lines[-1] == f"1 function in {root}: 1 valid (5 warnings)"
    template = parse_template(OPERATOR_LOOKALIKES, "template.yaml")   # the same template, as relay start loads it
    assert [(warning.path, warning.line) for warning in template.warnings] == [
        ("events[0].pattern.detail.price.numeric", 6), ("events[0].pattern.detail.source_ip.cidr", 7),
        ("events[0].pattern.detail.state.anything_but", 8), ("events[0].pattern.$and", 9),
        ("events[0].pattern.$type", 10)]
    detail = {"price": {"numeric": 100}, "source_ip": {"cidr": "10.0.0.0/24"}, "state": {"anything_but": "DELETED"}}
    assert template.rules[0].pattern.matches({"detail": detail, "$and": "kind", "$type": "order"})


PYTHON_REPRS = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|'\w[^']+'|<class|datetime\\.")


def test_messages_write_values_as_yaml_does_never_as_python(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "wrong", """runtime: [python3.14]
concurrency: true
events:
  - handler: app.handler
    pattern:
      created: {gt: 2026-09-12}
      name: {exists: null}
      kind: {prefix: [~]}
      other: {anything-but: {suffix: [_test]}}
    timeout: null
    retry_jitter: "yes"
    retry_backoff: {a: 1s}
  - null
env: [A]
secrets: {DB: Database}
warm: false
rate_limit: ~
schedules:
  - handler: app.handler
    cron: ~
    timezone: 5
""", {"app.py": "def handler(event):\n    pass\n"})
    code, output = validate(root, tmp_path)
    assert code == 1
    messages = output.splitlines()[:-1]
    assert len(messages) == 16, output
    for line in messages:
        assert not PYTHON_REPRS.search(line), line
    assert "runtime: [\"python3.14\"] is not supported" in output
    assert "concurrency: must be a whole number of 1 or more, not the boolean true" in output
    assert ("events[0].pattern.created.gt: gt takes plain values (strings, numbers, booleans, null), not the "
            "timestamp 2026-09-12") in output
    assert "events[0].pattern.name.exists: must be true or false, not an empty value (null)" in output
    assert "events[0].pattern.kind.prefix: prefix takes strings, not an empty value (null)" in output
    assert 'not the mapping {"suffix": ["_test"]}' in output
    assert "events[1]: must be a mapping, not an empty value (null)" in output
    assert 'secrets.DB: "Database" is not a valid secret name' in output


def test_missing_secrets_and_templates_are_warnings_only(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "users", PYTHON + "secrets:\n  API_TOKEN: api-token\n  DB: db-password\n",
                   {"events/created.py": "def handler(event):\n    pass\n"})
    (root / "not-yet").mkdir()
    code, output = validate(root, tmp_path, secrets=["db-password"])
    assert code == 0
    assert (f'{root / "users" / "template.yaml"}:6: secrets.API_TOKEN: warning: secret "api-token" is not in the '
            f"local store") in output
    assert "secrets.DB" not in output
    assert f'{root / "not-yet" / "template.yaml"}: warning: does not exist' in output
    assert output.splitlines()[-1] == f"2 functions in {root}: 2 valid (2 warnings)"


def test_json_for_ci(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "users", PYTHON, {})
    code, output = validate(root, tmp_path, "--json")
    document = json.loads(output)
    assert code == 1 and document["valid"] is False and document["functions"] == 1
    [finding] = document["findings"]
    assert finding == {"function": "users", "file": str(root / "users" / "template.yaml"), "line": 3,
                       "path": "events[0].handler", "field": "events[0].handler", "severity": "error",
                       "message": finding["message"]} and "no module events.created" in finding["message"]


def test_json_carries_warnings_and_lines_like_the_text(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "orders", OPERATOR_LOOKALIKES, {"app.py": "def handler(event):\n    pass\n"})
    code, output = validate(root, tmp_path, "--json")
    document = json.loads(output)
    assert code == 0 and document["valid"] is True
    first = document["findings"][0]
    field = "events[0].pattern.detail.price.numeric"
    assert first == {"function": "orders", "file": str(root / "orders" / "template.yaml"), "line": 6,
                     "path": field, "field": field, "severity": "warning", "message": first["message"]}
    assert first["message"].endswith("write {gt: 100}")


def test_the_command_runs_as_an_operator_would(tmp_path):
    result = run_relay("validate", str(tmp_path / "missing"), env=base_env())
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == f'{tmp_path / "missing"}: does not exist'


def test_bad_pattern_operators_are_listed_with_their_paths(tmp_path):
    root = tmp_path / "functions"
    template = """runtime: python3.14
events:
  - handler: events.created.handler
    pattern:
      table_name: [users]
      status: {anything-but: {suffix: [_test]}}
      email: {wildcard: [1]}
      name: {equals-ignore-case: []}
      $or:
        - {kind: [a]}
        - kind
        - new_image: {$or: []}
"""
    write_function(root, "users", template, {"events/created.py": "def handler(event):\n    pass\n"})
    code, output = validate(root, tmp_path)
    path = root / "users" / "template.yaml"
    assert code == 1
    assert output.splitlines()[:5] == [
        f"{path}:6: events[0].pattern.status.anything-but: takes a list of values, or {{prefix: [...]}} for strings "
        f'starting with none of them; not the mapping {{"suffix": ["_test"]}}',
        f"{path}:7: events[0].pattern.email.wildcard: wildcard takes strings, not the number 1",
        f"{path}:8: events[0].pattern.name.equals-ignore-case: equals-ignore-case needs at least one value; an "
        f"empty list can never match",
        f'{path}:11: events[0].pattern.$or[1]: must be a mapping of event fields to conditions, not the string "kind"',
        f"{path}:12: events[0].pattern.$or[2].new_image.$or: must be a non-empty list of patterns (mappings of event "
        f"fields to conditions), not an empty list"]


HANDLER = "def handler(event):\n    pass\n"


def test_fifos_among_the_files_relay_reads_are_refused_at_once_never_opened(tmp_path):
    """A FIFO as template.yaml (or a link to one), as a handler module or as a manifest: today's
    ``relay validate`` waited forever on the first; now each is one problem naming the file."""
    root = tmp_path / "functions"
    (root / "piped-template").mkdir(parents=True)
    os.mkfifo(root / "piped-template" / "template.yaml")
    linked = write_function(root, "linked-template", PYTHON, {"events/created.py": HANDLER})
    (linked / "template.yaml").unlink()
    os.mkfifo(linked / "pipe")
    (linked / "template.yaml").symlink_to("pipe")
    handler = write_function(root, "piped-handler", PYTHON, {"events/other.py": ""})
    os.mkfifo(handler / "events" / "created.py")
    requirements = write_function(root, "piped-requirements", PYTHON, {"events/created.py": HANDLER})
    os.mkfifo(requirements / "requirements.txt")
    package = write_function(root, "piped-package", NODE, {"lib/jobs.mjs": "export function handler() {}\n"})
    os.mkfifo(package / "package.json")
    stray = write_function(root, "stray-fifo", PYTHON, {"events/created.py": HANDLER})
    os.mkfifo(stray / "events" / "scratch")
    result = run_relay("validate", str(root), env=base_env(), timeout=30)
    fifo = "is a FIFO (named pipe), not a regular file; Relay reads only regular files"
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{linked / 'template.yaml'}: {fifo}",
        f"{handler / 'template.yaml'}:3: events[0].handler: events.created.handler: "
        f"{handler / 'events' / 'created.py'} {fifo}",
        f"{package / 'package.json'}: {fifo}",
        f"{requirements / 'requirements.txt'}: {fifo}",
        f"{root / 'piped-template' / 'template.yaml'}: {fifo}",
        f"{stray / 'events' / 'scratch'}: warning: is a FIFO (named pipe), not a regular file; Relay leaves it out "
        f"of the image",
        f"6 functions in {root}: 1 valid, 5 with problems (5 errors, 1 warning)"]
