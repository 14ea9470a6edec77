"""``relay validate``: a functions directory checked offline, every problem at once (no Redis, no Docker)."""

import io
import json

from relay.commands.validate import run
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
        f'{template}: runtime: "python2" is not supported; use one of python3.14, node24',
        f"{template}: concurrency: 0 must be a whole number of 1 or more",
        f"{template}: a template needs at least one entry in events or schedules"]
    assert (f'{root / "no-module" / "template.yaml"}: events[1].handler: other.handler: no module other: none of '
            f'other.py, other/__init__.py exists in {root / "no-module"}') in lines
    assert not any("events[0].handler" in line for line in lines if "no-module" in line)
    assert any(line.startswith(f'{root / "Bad_Name"}: ') for line in lines)
    assert any(line.startswith(f'{root / "lockless"}: package-lock.json needs package.json') for line in lines)
    assert lines[-1].startswith(f"4 functions in {root}: 0 valid, 4 with problems (")


def test_missing_secrets_and_templates_are_warnings_only(tmp_path):
    root = tmp_path / "functions"
    write_function(root, "users", PYTHON + "secrets:\n  API_TOKEN: api-token\n  DB: db-password\n",
                   {"events/created.py": "def handler(event):\n    pass\n"})
    (root / "not-yet").mkdir()
    code, output = validate(root, tmp_path, secrets=["db-password"])
    assert code == 0
    assert (f'{root / "users" / "template.yaml"}: secrets.API_TOKEN: warning: secret "api-token" is not in the '
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
    assert finding == {"function": "users", "file": str(root / "users" / "template.yaml"),
                       "field": "events[0].handler", "severity": "error",
                       "message": finding["message"]} and "no module events.created" in finding["message"]


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
        f"{path}: events[0].pattern.status.anything-but: takes a list of values, or {{prefix: [...]}} for strings "
        f'starting with none of them; not {{"suffix": ["_test"]}}',
        f"{path}: events[0].pattern.email.wildcard: wildcard takes strings, not 1",
        f"{path}: events[0].pattern.name.equals-ignore-case: equals-ignore-case needs at least one value; an empty "
        f"list can never match",
        f'{path}: events[0].pattern.$or[1]: must be a mapping of event fields to conditions, not "kind"',
        f"{path}: events[0].pattern.$or[2].new_image.$or: must be a non-empty list of patterns (mappings of event "
        f"fields to conditions), not []"]
