"""A function: one directory under /functions, loaded into a checked, compiled unit.

A template larger than MAX_TEMPLATE_BYTES is refused unread (only one byte
past the limit is ever read). A template that names the webhook's secret
(``relay git set --webhook-secret``) is refused: that secret belongs to
Relay and is never handed to a function.
"""

from dataclasses import dataclass
from pathlib import Path

from relay.errors import InvalidTemplate, MissingTemplate, TemplateError, TemplateTooLarge
from relay.functions.document import MAX_TEMPLATE_BYTES, too_large
from relay.functions.fingerprint import TAG_LENGTH, fingerprint_directory
from relay.functions.problems import join
from relay.functions.template import Template, parse_template
from relay.links import links_outside
from relay.names import function_name_problem
from relay.secrets.store import WEBHOOK_REFUSAL

TEMPLATE_FILE = "template.yaml"


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


def load_function(directory, webhook_secret=None):
    """Load ``/functions/<name>``: name, template and fingerprint, or TemplateError.

    *webhook_secret* is the name of the webhook's secret, which the template may not use.
    """
    directory = Path(directory)
    problem = function_name_problem(directory.name)
    if problem:
        raise TemplateError(f"{directory}: {problem}")
    _refuse_links_outside(directory)
    template_path = directory / TEMPLATE_FILE
    try:
        with open(template_path, "rb") as file:
            data = file.read(MAX_TEMPLATE_BYTES + 1)
        problem = too_large(len(data))
        if problem:
            raise TemplateTooLarge(str(template_path), problem)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise MissingTemplate(f"{directory}: no {TEMPLATE_FILE}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise TemplateError(f"{template_path}: cannot be read: {error}") from None
    template = parse_template(text, str(template_path))
    _refuse_webhook_secret(template, webhook_secret, str(template_path))
    return Function(name=directory.name, directory=directory, template=template,
                    fingerprint=fingerprint_directory(directory))


def _refuse_webhook_secret(template, webhook_secret, source):
    problems = [(join("secrets", variable), WEBHOOK_REFUSAL.format(name=reference))
                for variable, reference in template.secrets.items() if reference == webhook_secret]
    if problems:
        raise InvalidTemplate(source, problems)


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
