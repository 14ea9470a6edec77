"""Checking a functions directory offline, as ``relay start`` would load it and more.

``validate(root)`` looks at every directory under *root* the way the
reconciler does (its name, its template, links leading out of it, the files
it names being regular files), and then at what only a run would find: the
handler modules exist as files where the bootstrap looks for them, and a
dependency manifest has the files its installer needs. Every problem of
every function comes at once: a template's own errors do not hide its
missing modules. Warnings change nothing: a secret the local store lacks (a
functions repository's CI has no store), a pattern key that looks like an
operator Relay does not have, a FIFO or socket that no image will hold.
Nothing is built or run, and neither Redis nor Docker is needed.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from relay.errors import BuildError, InvalidTemplate, MissingTemplate, TemplateError
from relay.functions.function import TEMPLATE_FILE, inspect_function
from relay.functions.parser import CheckedTemplate
from relay.functions.problems import ERROR, WARNING, Problem, show
from relay.functions.regular import special_files
from relay.functions.runtimes import RUNTIMES
from relay.live.loading import function_names
from relay.names import function_name_problem

__all__ = ["ERROR", "WARNING", "Finding", "validate", "validate_function"]


@dataclass(frozen=True)
class Finding:
    """One problem: where (function, file, line, field path) and what."""

    function: str
    file: str
    field: str
    message: str
    severity: str = ERROR
    line: int | None = None

    def as_dict(self) -> dict[str, str | int | None]:
        """The JSON form; ``field`` and ``path`` are the same field path (``field`` kept for older scripts)."""
        return {"function": self.function, "file": self.file, "line": self.line, "path": self.field,
                "field": self.field, "severity": self.severity, "message": self.message}

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        where = f"{where}: {self.field}" if self.field else where
        return f"{where}: {self.message}" if self.severity == ERROR else f"{where}: warning: {self.message}"


def validate(root: str | os.PathLike[str], secret_names: Collection[str] | None = None,
             webhook_secret: str | None = None) -> tuple[int, list[Finding]]:
    """(how many function directories *root* holds, every finding), in name order.

    *secret_names* are the local store's secrets (None: not checked).
    """
    top = Path(root)
    if not top.is_dir():
        return 0, [Finding("", str(top), "", "is not a directory" if top.exists() else "does not exist")]
    names = function_names(top)
    findings: list[Finding] = []
    for name in names:
        findings += validate_function(top / name, secret_names, webhook_secret)
    return len(names), findings


def validate_function(directory: Path, secret_names: Collection[str] | None = None,
                      webhook_secret: str | None = None) -> list[Finding]:
    name = directory.name
    problem = function_name_problem(name, render=show)
    if problem:
        return [Finding(name, str(directory), "", f"{problem}; Relay skips this directory")]
    template_path = str(directory / TEMPLATE_FILE)
    try:
        inspection = inspect_function(directory, webhook_secret)
    except MissingTemplate:
        return [Finding(name, template_path, "", f"does not exist; Relay ignores {directory} until it does",
                        WARNING)]
    except InvalidTemplate as error:
        return [_finding(name, error.source, problem) for problem in error.problems]
    except TemplateError as error:
        return [Finding(name, template_path, "", str(error))]
    checked = inspection.checked
    findings = [_finding(name, template_path, problem) for problem in inspection.problems]
    if checked.runtime is not None:
        findings += _handler_files(directory, checked, template_path, inspection.refused_files)
        findings += _manifests(directory, checked.runtime, inspection.refused_files)
    findings += _left_out(directory, inspection.refused_files)
    findings += _secrets(name, checked, template_path, secret_names)
    return sorted(findings, key=lambda finding: (finding.file != template_path, finding.file, finding.line or 0))


def _finding(function: str, source: str, problem: Problem) -> Finding:
    return Finding(function, problem.file or source, problem.path, problem.message, problem.severity,
                   None if problem.file else problem.line)


def _handler_files(directory: Path, checked: CheckedTemplate, template_path: str,
                   refused: frozenset[str]) -> list[Finding]:
    """A handler whose module is no regular file where the bootstrap looks (unless already refused as one)."""

    if checked.runtime is None:
        return []
    runtime = RUNTIMES[checked.runtime]
    found = []
    for handler in checked.handlers:
        candidates = runtime.module_paths(handler.module)
        if refused.intersection(candidates) or any((directory / candidate).is_file() for candidate in candidates):
            continue
        found.append(Finding(directory.name, template_path, handler.path,
                             f"{handler.handler}: no module {handler.module}: none of {', '.join(candidates)} "
                             f"exists in {directory}", line=checked.line(handler.path)))
    return found


def _manifests(directory: Path, runtime_name: str, refused: frozenset[str]) -> list[Finding]:
    """The installer's missing companions (a package-lock.json without its package.json)."""
    from relay.runtime.recipes import dependency_recipe

    runtime = RUNTIMES[runtime_name]
    if refused.intersection(name for installer in runtime.installers for name in installer.manifests):
        return []  # already refused as not regular files
    try:
        dependency_recipe(directory, runtime, "any")
    except BuildError as error:
        return [Finding(directory.name, str(directory), "", str(error))]
    return []


def _left_out(directory: Path, refused: frozenset[str]) -> list[Finding]:
    """FIFOs, sockets and devices Relay does not refuse: they never reach the image."""
    try:
        found = special_files(directory)
    except OSError:
        return []
    return [Finding(directory.name, str(directory / relative), "",
                    f"is {kind}, not a regular file; Relay leaves it out of the image", WARNING)
            for relative, kind in found if relative not in refused]


def _secrets(name: str, checked: CheckedTemplate, template_path: str,
             secret_names: Collection[str] | None) -> list[Finding]:
    if secret_names is None:
        return []
    return [Finding(name, template_path, f"secrets.{variable}",
                    f"secret {show(reference)} is not in the local store; set it with "
                    f"'relay secret set {reference}' on every host that runs Relay", WARNING,
                    checked.line(f"secrets.{variable}"))
            for variable, reference in sorted(checked.secrets.items())
            if reference not in secret_names]
