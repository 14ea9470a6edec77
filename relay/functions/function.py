"""A function: one directory under /functions, loaded into a checked, compiled unit.

A template larger than MAX_TEMPLATE_BYTES is refused unread (only one byte
past the limit is ever read). A template that names the webhook's secret
(``relay git set --webhook-secret``) is refused: that secret belongs to
Relay and is never handed to a function. The template, the handler modules
it names and the dependency manifests are regular files or the function is
refused: a FIFO, socket or device is named and never opened
(relay.functions.regular).

``inspect_function`` finds every problem of a directory at once -- the
template's and its files' -- without raising for them; ``load_function``
raises InvalidTemplate listing the errors, or returns the Function, whose
template carries the warnings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from relay.errors import InvalidTemplate, MissingTemplate, TemplateError, TemplateTooLarge, reason
from relay.functions.document import MAX_TEMPLATE_BYTES, too_large
from relay.functions.fingerprint import TAG_LENGTH, fingerprint_directory
from relay.functions.parser import CheckedTemplate, check_template
from relay.functions.problems import ERROR, Problem, join, show
from relay.functions.regular import not_regular_message, read_regular, special_kind
from relay.functions.runtimes import RUNTIMES
from relay.functions.template import Template
from relay.links import links_outside
from relay.names import function_name_problem
from relay.secrets.store import CONSOLE_REFUSAL, CONSOLE_TOKEN, WEBHOOK_REFUSAL

TEMPLATE_FILE = "template.yaml"


@dataclass(frozen=True, eq=False)
class Function:
    name: str
    directory: Path
    template: Template
    fingerprint: str  # 64 hex characters, SHA-256 of the whole directory

    @property
    def image(self) -> str:
        """The Docker image this version of the function runs in."""
        return f"relay-fn-{self.name}:{self.fingerprint[:TAG_LENGTH]}"


@dataclass(frozen=True, eq=False)
class ActiveFunction:
    """A loaded function and the image of it that is built and serving."""

    function: Function
    image: str

    @property
    def name(self) -> str:
        return self.function.name


@dataclass(frozen=True)
class Inspection:
    """Everything found in one function directory: the checked template and every problem."""

    directory: Path
    checked: CheckedTemplate
    problems: tuple[Problem, ...]   # the template's, then its files'; errors and warnings
    refused_files: frozenset[str]   # relative paths of the handler modules and manifests refused as not regular

    @property
    def errors(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.severity == ERROR]

    @property
    def source(self) -> str:
        return str(self.directory / TEMPLATE_FILE)


def load_function(directory: str | os.PathLike[str], webhook_secret: str | None = None) -> Function:
    """Load ``/functions/<name>``: name, template and fingerprint, or TemplateError.

    *webhook_secret* is the name of the webhook's secret, which the template may not use.
    """
    inspection = inspect_function(directory, webhook_secret)
    template = inspection.checked.template
    if inspection.errors or template is None:   # (a template is None only beside an error)
        raise InvalidTemplate(inspection.source, inspection.errors)
    path = inspection.directory
    return Function(name=path.name, directory=path, template=template, fingerprint=fingerprint_directory(path))


def inspect_function(directory: str | os.PathLike[str], webhook_secret: str | None = None) -> Inspection:
    """Every problem of ``/functions/<name>`` as an Inspection.

    Raises TemplateError for what stops the look at once: an invalid name, a
    link leading outside, a template that is missing (MissingTemplate),
    unreadable, not a regular file, past a limit or not YAML (InvalidTemplate).
    """
    path = Path(directory)
    problem = function_name_problem(path.name, render=show)
    if problem:
        raise TemplateError(f"{path}: {problem}")
    _refuse_links_outside(path)
    template_path = path / TEMPLATE_FILE
    checked = check_template(_read_template(path, template_path), str(template_path))
    problems = list(checked.problems)
    problems += _relay_secrets(checked, webhook_secret)
    handler_problems, refused = _not_regular(path, checked)
    return Inspection(directory=path, checked=checked, problems=tuple(problems + handler_problems),
                      refused_files=refused)


def _read_template(directory: Path, template_path: Path) -> str:
    try:
        data, kind = read_regular(template_path, MAX_TEMPLATE_BYTES + 1)
        if data is None:
            raise InvalidTemplate(str(template_path), [Problem("", not_regular_message(kind or "not a regular file"))])
        problem = too_large(len(data))
        if problem:
            raise TemplateTooLarge(str(template_path), Problem("", problem))
        return data.decode("utf-8")
    except FileNotFoundError:
        raise MissingTemplate(f"{directory}: no {TEMPLATE_FILE}") from None
    except UnicodeDecodeError as error:
        raise TemplateError(f"{template_path}: is not UTF-8 text (byte 0x{error.object[error.start]:02x} at "
                            f"offset {error.start})") from None
    except OSError as error:
        raise TemplateError(f"{template_path}: cannot be read: {reason(error)}") from None


def _relay_secrets(checked: CheckedTemplate, webhook_secret: str | None) -> list[Problem]:
    """The secrets that belong to Relay, never to a function: the webhook's, and the console's token."""
    refused = {CONSOLE_TOKEN: CONSOLE_REFUSAL}
    if webhook_secret is not None:
        refused[webhook_secret] = WEBHOOK_REFUSAL
    return [Problem(path, refused[reference].format(name=reference), line=checked.line(path))
            for variable, reference in checked.secrets.items() if reference in refused
            for path in [join("secrets", variable)]]


def _not_regular(directory: Path, checked: CheckedTemplate) -> tuple[list[Problem], frozenset[str]]:
    """Errors for handler modules and dependency manifests that are not regular files, and their
    relative paths. Which files those are is the runtime registry's knowledge (plain data)."""
    problems: list[Problem] = []
    refused: set[str] = set()
    if checked.runtime is not None:
        runtime = RUNTIMES[checked.runtime]
        for handler in checked.handlers:
            for candidate in runtime.module_paths(handler.module):
                kind = special_kind(directory / candidate)
                if kind is not None:
                    refused.add(candidate)
                    problems.append(Problem(handler.path, f"{handler.handler}: {directory / candidate} "
                                                          f"{not_regular_message(kind)}",
                                            line=checked.line(handler.path)))
    runtimes = [RUNTIMES[checked.runtime]] if checked.runtime is not None else list(RUNTIMES.values())
    manifests = sorted({name for runtime in runtimes for installer in runtime.installers
                        for name in installer.manifests})
    for name in manifests:
        kind = special_kind(directory / name)
        if kind is not None:
            refused.add(name)
            problems.append(Problem("", not_regular_message(kind), file=str(directory / name)))
    return problems, frozenset(refused)


def _refuse_links_outside(directory: Path) -> None:
    """A link that leads outside the function fails the load before any file is read through it."""
    try:
        outside = links_outside(directory)
    except OSError as error:
        raise TemplateError(f"{directory}: cannot be read: {error.strerror or error}") from None
    if outside:
        what = f"symbolic link {outside[0]} leads" if len(outside) == 1 else \
            f"symbolic links {', '.join(outside)} lead"
        raise TemplateError(f"{directory}: {what} outside the function directory; links must stay inside it")
