"""The webhook's secret belongs to Relay: no template may name it, no invocation gets it,
``relay secret ls`` marks it; an existing store directory is narrowed to 0700."""

import os
import stat

import pytest

from relay.errors import SecretError, TemplateError
from relay.functions import load_function
from relay.gitsync.layout import Layout
from relay.gitsync.source import make_source, save_source
from relay.gitsync.webhook_secret import secret_store, webhook_secret_name
from relay.live.catalog import Catalog
from relay.live.reconciler import Reconciler
from relay.secrets.store import FileSecretStore, environment
from tests.support.commands import relay_secret
from tests.support.reconciler import Builder, write

TEMPLATE = """runtime: python3.14
events:
  - handler: app.handler
    pattern: {kind: [a]}
secrets:
  HOOK: github-webhook
  API_TOKEN: api-token
"""
REFUSAL = ("secret 'github-webhook' is the git webhook's HMAC secret (relay git set --webhook-secret) "
           "and is never handed to a function")


def configure_webhook(state, name="github-webhook"):
    save_source(Layout(state_dir=state), make_source("git@github.com:acme/repo.git", webhook_secret=name))


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "state"
    directory.mkdir()
    return directory


def test_a_template_that_names_the_webhook_secret_fails_to_load_and_says_why(tmp_path):
    directory = write(tmp_path, "hooked", template=TEMPLATE)
    with pytest.raises(TemplateError) as refused:
        load_function(directory, webhook_secret="github-webhook")
    assert str(refused.value) == f"{directory / 'template.yaml'}: 1 problem\n  line 6: secrets.HOOK: {REFUSAL}"
    assert load_function(directory, webhook_secret="another").template.secrets["HOOK"] == "github-webhook"


def test_the_reconciler_reads_the_webhook_secret_from_the_git_source_at_every_load(tmp_path, state):
    root = tmp_path / "functions"
    write(root, "hooked", template=TEMPLATE)
    configure_webhook(state)
    reconciler = Reconciler(root, Builder(), Catalog(), webhook_secret=lambda: webhook_secret_name(state))
    reconciler.load_all()
    assert reconciler.catalog.snapshot() == ()
    configure_webhook(state, "another-secret")
    write(root, "hooked", template=TEMPLATE + "env: {CHANGED: 'yes'}\n")
    reconciler.reconcile("hooked")
    assert [active.name for active in reconciler.catalog.snapshot()] == ["hooked"]


def test_no_invocation_gets_the_webhook_secret_even_when_it_was_named_after_the_load(tmp_path, state):
    store = secret_store(state / "secrets")
    store.set("github-webhook", b"hmac-key-must-not-leak")
    store.set("api-token", b"token")
    function = load_function(write(tmp_path, "hooked", template=TEMPLATE))
    assert environment(function, store) == {"HOOK": "hmac-key-must-not-leak", "API_TOKEN": "token"}
    configure_webhook(state)
    with pytest.raises(SecretError) as refused:
        environment(function, store)
    assert str(refused.value) == f"cannot set HOOK: {REFUSAL}"
    other = load_function(write(tmp_path, "other", template=TEMPLATE.replace("  HOOK: github-webhook\n", "")))
    assert environment(other, store) == {"API_TOKEN": "token"}


def test_a_broken_git_source_names_no_webhook_secret(state):
    (state / "git").mkdir()
    (state / "git" / "source.json").write_text("{not json")
    assert secret_store(state / "secrets").webhook_secret() is None
    assert webhook_secret_name(state) is None


@pytest.mark.integration  # runs Relay as a process
def test_secret_ls_marks_the_webhook_secret(state):
    store = FileSecretStore(state / "secrets")
    for name in ("api-token", "github-webhook"):
        store.set(name, b"value")
    configure_webhook(state)
    result = relay_secret(state, "ls")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "NAME\napi-token\ngithub-webhook  (webhook secret: never handed to a function)\n"


@pytest.mark.integration  # runs Relay as a process
def test_an_existing_secrets_directory_is_narrowed_to_0700_by_the_secret_commands(state):
    FileSecretStore(state / "secrets").set("api-token", b"value")
    os.chmod(state / "secrets", 0o755)
    result = relay_secret(state, "ls")
    assert (result.returncode, result.stdout) == (0, "NAME\napi-token\n")
    assert stat.S_IMODE((state / "secrets").stat().st_mode) == 0o700


def test_opening_the_store_narrows_the_directory_and_leaves_a_missing_one_missing(state):
    (state / "secrets").mkdir(mode=0o777)
    os.chmod(state / "secrets", 0o777)
    FileSecretStore(state / "secrets")
    assert stat.S_IMODE((state / "secrets").stat().st_mode) == 0o700
    FileSecretStore(state / "nowhere")
    assert not (state / "nowhere").exists()
