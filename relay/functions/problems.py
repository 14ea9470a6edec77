"""Collecting every problem of a template, each with the path of the field."""

from relay.errors import TemplateError


class Problems:
    """The problems found so far, as (field path, message) pairs."""

    def __init__(self):
        self.items = []

    def add(self, path, message):
        self.items.append((path, message))

    def raise_if_any(self, source):
        if self.items:
            raise InvalidTemplate(source, self.items)

    def __len__(self):
        return len(self.items)


class InvalidTemplate(TemplateError):
    """A template or pattern with one or more problems, all listed."""

    def __init__(self, source, problems):
        self.source = source
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = [f"{source}: {count} problem{'s' if count != 1 else ''}"]
        lines += [f"  {path}: {message}" if path else f"  {message}" for path, message in self.problems]
        super().__init__("\n".join(lines))


def join(path, key):
    """Extend a field path: join("events[1].pattern", "created_at") → "events[1].pattern.created_at"."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def show(value):
    """A short, unambiguous rendering of a YAML value for a message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
