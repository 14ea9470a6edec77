"""A function: one directory under /functions, loaded into a checked, compiled unit."""

from dataclasses import dataclass
from pathlib import Path

from relay.errors import TemplateError
from relay.functions.fingerprint import TAG_LENGTH, fingerprint_directory
from relay.links import links_outside
from relay.names import function_name_problem
from relay.functions.template import Template, parse_template

TEMPLATE_FILE = "template.yaml"


class MissingTemplate(TemplateError):
    """The directory has no template.yaml (yet): not a function, or not ready."""


@dataclass(frozen=True, eq=False)
class Function:
    name: str
    directory: Path
    template: Template
    fingerprint: str  # 64 hex characters, SHA-256 of the whole directory

    @property
    def image(self):
        """The Docker image this version of the function runs in."""
        return f"relay-fn-{self.name}:{self.fingerprint[:TAG_LENGTH]}"


def load_function(directory):
    """Load ``/functions/<name>``: name, template and fingerprint, or TemplateError."""
    directory = Path(directory)
    problem = function_name_problem(directory.name)
    if problem:
        raise TemplateError(f"{directory}: {problem}")
    _refuse_links_outside(directory)
    template_path = directory / TEMPLATE_FILE
    try:
        text = template_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingTemplate(f"{directory}: no {TEMPLATE_FILE}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise TemplateError(f"{template_path}: cannot be read: {error}") from None
    template = parse_template(text, str(template_path))
    return Function(name=directory.name, directory=directory, template=template,
                    fingerprint=fingerprint_directory(directory))


def _refuse_links_outside(directory):
    """A link that leads outside the function fails the load before any file is read through it."""
    try:
        outside = links_outside(directory)
    except OSError as error:
        raise TemplateError(f"{directory}: cannot be read: {error.strerror or error}") from None
    if outside:
        what = f"symbolic link {outside[0]} leads" if len(outside) == 1 else \
            f"symbolic links {', '.join(outside)} lead"
        raise TemplateError(f"{directory}: {what} outside the function directory; links must stay inside it")
