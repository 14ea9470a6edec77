"""The console's token belongs to Relay: no template may name it, no invocation gets it."""

from types import SimpleNamespace

import pytest

from relay.errors import SecretError, TemplateError
from relay.functions import load_function
from relay.secrets.store import FileSecretStore, environment
from tests.support.reconciler import write

TEMPLATE = """runtime: python3.14
events:
  - handler: app.handler
    pattern: {kind: [a]}
secrets:
  TOKEN: console-token
"""
REFUSAL = ("secret 'console-token' is the console's login token (relay secret set console-token) "
           "and is never handed to a function")


def test_a_template_that_names_the_console_token_fails_to_load_and_says_why(tmp_path):
    directory = write(tmp_path, "peeking", template=TEMPLATE)
    with pytest.raises(TemplateError) as refused:
        load_function(directory)
    assert str(refused.value) == f"{directory / 'template.yaml'}: 1 problem\n  line 6: secrets.TOKEN: {REFUSAL}"


def test_no_invocation_gets_the_console_token(tmp_path):
    store = FileSecretStore(tmp_path / "secrets")
    store.set("console-token", b"must-not-leak")
    function = SimpleNamespace(template=SimpleNamespace(env={}, secrets={"TOKEN": "console-token"}))
    with pytest.raises(SecretError) as refused:
        environment(function, store)
    assert str(refused.value) == f"cannot set TOKEN: {REFUSAL}"
