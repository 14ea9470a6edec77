"""For tests of the reconciler without Docker: a stand-in image builder and
function directories written to disk."""

from relay.errors import BuildError

TEMPLATE = """
runtime: python3.14
events:
  - handler: app.handler
    pattern: {kind: [a]}
  - handler: app.other
    pattern: {kind: [b]}
    timeout: 20s
"""


class Builder:
    """ImageBuilder.prepare: the function's tag, or BuildError for the names in ``failing``."""

    def __init__(self):
        self.built = []
        self.failing = set()
        self.gate = None  # an Event every build waits for, when set

    def prepare(self, function):
        if self.gate is not None:
            self.gate.wait()
        self.built.append(function.name)
        if function.name in self.failing:
            raise BuildError(f'building image {function.image} for function "{function.name}" failed: boom\n'
                             f"last build output:\n  ERROR: boom")
        return function.image


def write(root, name, template=TEMPLATE, source="def handler(event):\n    print('v1')\n", **files):
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    if template is not None:
        (directory / "template.yaml").write_text(template)
    (directory / "app.py").write_text(source)
    for relative, text in files.items():
        path = directory / relative.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return directory
