"""Function, secret and environment variable names."""

import pytest

from relay.functions import env_name_problem, function_name_problem, secret_name_problem


@pytest.mark.parametrize("name", ["user-events", "welcome_email", "jobs.v2", "a", "0", "a" * 63, "x-", "x_", "9lives"])
def test_valid_function_names(name):
    assert function_name_problem(name) is None


@pytest.mark.parametrize(("name", "reason"), [
    ("User Events", "use lowercase"), ("hello/world", "use lowercase"), (".hidden", "use lowercase"),
    ("-dash", "use lowercase"), ("_under", "use lowercase"), ("", "use lowercase"), ("a" * 64, "longer than 63"),
    ("jobs.", "ends with a dot"), ("Upper", "use lowercase"), ("tab\tname", "use lowercase"),
    ("caf\u00e9", "use lowercase"), ("x\n", "use lowercase"),
])
def test_invalid_function_names(name, reason):
    assert reason in function_name_problem(name)


@pytest.mark.parametrize("name", ["database-url", "api-key", "github_webhook", "a.b", "x", "_x", "-x", "a" * 63])
def test_valid_secret_names(name):
    assert secret_name_problem(name) is None


@pytest.mark.parametrize("name", [".x", "x.", "Upper", "a/b", "", "a b", "a" * 64, 5, None])
def test_invalid_secret_names(name):
    assert secret_name_problem(name) is not None


@pytest.mark.parametrize("name", ["API_URL", "_x", "a1", "Path"])
def test_valid_env_names(name):
    assert env_name_problem(name) is None


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "", "\u00c9T\u00c9", 3])
def test_invalid_env_names(name):
    assert env_name_problem(name) is not None
