"""Checking a functions directory offline, as ``relay start`` would load it and more.

``validate(root)`` looks at every directory under *root* the way the
reconciler does (its name, its template, links leading out of it), and then
at what only a run would find: the handler modules exist as files where the
bootstrap looks for them, and a dependency manifest has the files its
installer needs. Secrets the local store lacks are warnings, not errors: a
functions repository's CI has no store. Nothing is built or run, and
neither Redis nor Docker is needed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from relay.errors import BuildError, InvalidTemplate, MissingTemplate, TemplateError
from relay.functions import load_function
from relay.functions.function import TEMPLATE_FILE
from relay.live.loading import function_names
from relay.names import function_name_problem

ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Finding:
    """One problem: where (function, file, field path) and what."""

    function: str
    file: str
    field: str
    message: str
    severity: str = ERROR

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}" if self.severity == ERROR else f"{where}: warning: {self.message}"


def validate(root, secret_names=None, webhook_secret=None) -> tuple[int, list[Finding]]:
    """(how many function directories *root* holds, every finding), in name order.

    *secret_names* are the local store's secrets (None: not checked).
    """
    root = Path(root)
    if not root.is_dir():
        return 0, [Finding("", str(root), "", "is not a directory" if root.exists() else "does not exist")]
    names = function_names(root)
    findings: list[Finding] = []
    for name in names:
        findings += validate_function(root / name, secret_names, webhook_secret)
    return len(names), findings


def validate_function(directory: Path, secret_names=None, webhook_secret=None) -> list[Finding]:
    name = directory.name
    problem = function_name_problem(name)
    if problem:
        return [Finding(name, str(directory), "", f"{problem}; Relay skips this directory")]
    template_path = str(directory / TEMPLATE_FILE)
    try:
        function = load_function(directory, webhook_secret)
    except MissingTemplate:
        return [Finding(name, template_path, "", f"does not exist; Relay ignores {directory} until it does",
                        WARNING)]
    except InvalidTemplate as error:
        return [Finding(name, error.source, path, message) for path, message in error.problems]
    except TemplateError as error:
        return [Finding(name, template_path, "", str(error))]
    return [*_handler_files(function, template_path), *_manifests(function),
            *_secrets(function, template_path, secret_names)]


def _handler_files(function, template_path):
    from relay.runtime.registry import runtime_for

    runtime = runtime_for(function.template.runtime)
    entries = [(f"events[{index}].handler", rule) for index, rule in enumerate(function.template.rules)]
    entries += [(f"schedules[{index}].handler", item) for index, item in enumerate(function.template.schedules)]
    found = []
    for field, entry in entries:
        candidates = runtime.module_paths(entry.module)
        if not any((function.directory / candidate).is_file() for candidate in candidates):
            found.append(Finding(function.name, template_path, field,
                                 f"{entry.handler}: no module {entry.module}: none of "
                                 f"{', '.join(candidates)} exists in {function.directory}"))
    return found


def _manifests(function):
    from relay.runtime.recipes import dependency_recipe
    from relay.runtime.registry import runtime_for

    try:
        dependency_recipe(function.directory, runtime_for(function.template.runtime), "any")
    except BuildError as error:
        return [Finding(function.name, str(function.directory), "", str(error))]
    return []


def _secrets(function, template_path, secret_names):
    if secret_names is None:
        return []
    return [Finding(function.name, template_path, f"secrets.{variable}",
                    f"secret {reference!r} is not in the local store; set it with 'relay secret set {reference}' "
                    f"on every host that runs Relay", WARNING)
            for variable, reference in sorted(function.template.secrets.items())
            if reference not in secret_names]
