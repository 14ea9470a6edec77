"""``relay validate [<dir>]``: check a functions directory offline, every problem at once.

What a functions repository runs in its own CI before Relay syncs it. It
needs neither Redis nor Docker (relay.live.validation says what is checked).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, TextIO

from relay.errors import SecretError

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.live.validation import Finding
    from relay.secrets.store import FileSecretStore


def run(args: Arguments, stdout: TextIO | None = None, store: FileSecretStore | None = None) -> int:
    """Run ``relay validate`` from docopt's *args*; 0 when there is no error, else 1."""
    from relay.gitsync.webhook_secret import secret_store
    from relay.live.validation import ERROR, WARNING, Finding, validate

    stdout = sys.stdout if stdout is None else stdout
    root = args["<dir>"] or "/functions"
    store = secret_store() if store is None else store
    notes: list[Finding] = []
    secret_names: set[str] | None
    webhook_secret: str | None
    try:
        secret_names, webhook_secret = set(store.names()), store.webhook_secret()
    except SecretError as error:
        secret_names = webhook_secret = None
        notes.append(Finding("", str(store.directory), "", f"secrets not checked: {error}", WARNING))
    count, findings = validate(root, secret_names, webhook_secret)
    findings = notes + findings
    errors = sum(finding.severity == ERROR for finding in findings)
    if args["--json"]:
        stdout.write(json.dumps({"directory": root, "functions": count, "valid": not errors,
                                 "findings": [finding.as_dict() for finding in findings]}, indent=2) + "\n")
        return 1 if errors else 0
    for finding in findings:
        stdout.write(f"{finding}\n")
    failing = len({finding.function for finding in findings if finding.severity == ERROR and finding.function})
    warnings = len(findings) - errors
    summary = f"{count} function{'s' if count != 1 else ''} in {root}: {count - failing} valid"
    if failing:
        summary += f", {failing} with problems"
    details = [f"{errors} error{'s' if errors != 1 else ''}"] if errors else []
    details += [f"{warnings} warning{'s' if warnings != 1 else ''}"] if warnings else []
    stdout.write(summary + (f" ({', '.join(details)})" if details else "") + "\n")
    return 1 if errors else 0
