"""One exception root: every public exception Relay defines lives in relay.errors, under RelayError."""

import ast
import inspect
from pathlib import Path

import pytest

from relay import errors
from relay.errors import RelayError

RELAY = Path(errors.__file__).resolve().parent
BOOTSTRAPS = RELAY / "runtime" / "bootstraps"  # run inside containers, on their own


def public_exceptions():
    return [value for name, value in vars(errors).items()
            if inspect.isclass(value) and issubclass(value, BaseException) and not name.startswith("_")]


@pytest.mark.parametrize("exception", public_exceptions(), ids=lambda exception: exception.__name__)
def test_each_exception_is_a_relay_error_with_a_one_line_docstring(exception):
    assert issubclass(exception, RelayError)
    assert exception.__doc__ and "\n" not in exception.__doc__.strip()


def test_no_module_outside_relay_errors_defines_a_public_exception():
    exceptions = set(public_exceptions())
    found = []
    for path in sorted(RELAY.rglob("*.py")):
        if path == RELAY / "errors.py" or BOOTSTRAPS in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {getattr(base, "id", getattr(base, "attr", None)) for base in node.bases}
                if bases & ({"Exception", "BaseException", "OSError", "ValueError"}
                            | {exception.__name__ for exception in exceptions}):
                    found.append(f"{path.relative_to(RELAY)}: {node.name}")
    assert found == []

