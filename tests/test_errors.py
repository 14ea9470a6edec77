"""One exception root: every public exception Relay defines lives in relay.errors, under RelayError."""

import ast
import inspect
from pathlib import Path

import pytest
import requests
from docker.errors import APIError

from relay import errors
from relay.errors import RelayError, reason

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



# --- reason(error) --------------------------------------------------------------------


def test_an_os_error_says_its_strerror_unless_told_not_to():
    error = PermissionError(13, "Permission denied", "/var/lib/relay/secrets")
    assert reason(error) == "Permission denied"
    assert reason(error, strerror=False) == "[Errno 13] Permission denied: '/var/lib/relay/secrets'"
    assert reason(OSError("not a regular file")) == "not a regular file"


def test_an_error_without_words_says_its_type():
    assert reason(OSError()) == "OSError"
    assert reason(TimeoutError("  \n")) == "TimeoutError"
    assert reason(ValueError("  padded \n")) == "padded"


def test_a_docker_error_says_the_engines_explanation():
    response = requests.Response()
    response.status_code, response.reason, response.url = 409, "Conflict", "http+docker://localhost/containers/x/start"
    error = APIError("409 Client Error", response=response, explanation="container x is already running\n")
    assert reason(error, strerror=False) == "container x is already running"
    bare = APIError("500 Server Error", response=response)
    assert reason(bare) == str(bare)


def test_innermost_explains_the_first_cause_of_a_chain():
    try:
        try:
            try:
                raise ConnectionRefusedError(111, "Connection refused")
            except OSError as refused:
                raise ValueError("Max retries exceeded") from refused
        except ValueError:
            raise RuntimeError("Error while fetching server API version")  # noqa: B904 - implicitly chained, as docker-py does
    except RuntimeError as wrapped:
        error = wrapped
    assert reason(error) == "Error while fetching server API version"
    assert reason(error, innermost=True) == "Connection refused"


def test_a_limit_cuts_long_words_with_an_ellipsis():
    assert reason(RuntimeError("x" * 300), limit=300) == "x" * 300
    assert reason(RuntimeError("x" * 301), limit=300) == "x" * 297 + "..."
    assert reason(OSError(5, "Input/output error"), limit=300) == "Input/output error"
