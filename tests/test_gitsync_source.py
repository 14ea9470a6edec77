"""The git source: SSH URLs only, refs and paths validated, stored 0600, corrupt files reported."""

import json
import stat

import pytest

from relay.errors import SourceError
from relay.gitsync.layout import Layout
from relay.gitsync.source import (
    Source,
    SshUrl,
    load_source,
    make_source,
    normalize_path,
    parse_ssh_url,
    ref_problem,
    remote_refs,
    save_source,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("git@github.com:acme/repo.git", SshUrl("git", "github.com", None, "acme/repo.git")),
    ("git@GitHub.com:Acme/Repo.git", SshUrl("git", "github.com", None, "Acme/Repo.git")),
    ("ssh://git@github.com/acme/repo.git", SshUrl("git", "github.com", None, "/acme/repo.git")),
    ("ssh://git@git.example.com:2222/acme/repo.git", SshUrl("git", "git.example.com", 2222, "/acme/repo.git")),
    ("ssh://git@[::1]:2222/srv/repo.git", SshUrl("git", "::1", 2222, "/srv/repo.git")),
    ("git@[::1]:srv/repo.git", SshUrl("git", "::1", None, "srv/repo.git")),
    ("ssh://example.com/repo.git", SshUrl(None, "example.com", None, "/repo.git")),
])
def test_ssh_urls_in_both_spellings(text, expected):
    assert parse_ssh_url(text) == expected


@pytest.mark.parametrize(("text", "known_hosts_name"), [
    ("git@github.com:acme/repo.git", "github.com"),
    ("ssh://git@github.com:22/acme/repo.git", "github.com"),
    ("ssh://git@Git.Example.com:2222/acme/repo.git", "[git.example.com]:2222"),
    ("ssh://git@[::1]:2222/r.git", "[::1]:2222"),
])
def test_non_default_ports_are_pinned_as_bracketed_host_and_port(text, known_hosts_name):
    assert parse_ssh_url(text).known_hosts_name == known_hosts_name


def test_https_is_rejected_with_the_ssh_spelling_to_use_instead():
    with pytest.raises(SourceError) as error:
        parse_ssh_url("https://github.com/acme/repo")
    assert str(error.value) == ("'https://github.com/acme/repo' is an HTTPS URL; Relay syncs over SSH only: "
                                "use git@github.com:acme/repo.git")


@pytest.mark.parametrize(("text", "fragment"), [
    ("http://example.com/acme/repo.git", "is an HTTP URL; Relay syncs over SSH only"),
    ("git://example.com/acme/repo.git", "uses the git:// protocol"),
    ("file:///srv/repo.git", "uses the file:// protocol"),
    ("/srv/repo.git", "looks like a local path"),
    ("./repo:x", "looks like a local path"),
    ("", "the repository is empty"),
    ("git@github.com:", "names no repository path"),
    ("ssh://git@github.com/", "names no repository path"),
    ("git@-oProxyCommand=x:acme/repo.git", "invalid host"),
    ("-oProxyCommand=x@github.com:acme/repo.git", "invalid user name"),
    ("git@github.com:-upload-pack=x", "starting with '-'"),
    ("ssh://git@github.com:99999/acme/repo.git", "invalid port"),
    ("ssh://git:pw@github.com/acme/repo.git", "contains a password"),
    ("git@github.com:acme/my repo.git", "spaces or control characters"),
])
def test_what_is_not_an_ssh_url_gets_a_specific_error(text, fragment):
    with pytest.raises(SourceError) as error:
        parse_ssh_url(text)
    assert fragment in str(error.value)


@pytest.mark.parametrize("ref", ["main", "release/2026.1", "v1.2.3", "0123abc", "a" * 40, "refs/tags/v1"])
def test_valid_refs(ref):
    assert ref_problem(ref) is None


@pytest.mark.parametrize("ref", ["", "-x", "a..b", "a b", "a~1", "a^", "a:b", "a/", "a.lock", "@", "x@{1}",
                                 ".hidden", "a//b", "a\\b", "a*"])
def test_invalid_refs(ref):
    assert ref_problem(ref) is not None


def test_remote_refs_of_a_name_are_its_branch_and_its_tag():
    assert remote_refs("main") == ["refs/heads/main", "refs/tags/main"]
    assert remote_refs("refs/tags/v1") == ["refs/tags/v1"]


@pytest.mark.parametrize(("path", "normalized"), [
    (None, ""), ("", ""), (".", ""), ("functions", "functions"), ("./apps//relay/", "apps/relay"),
    ("my functions", "my functions"),
])
def test_paths_are_normalized(path, normalized):
    assert normalize_path(path) == normalized


@pytest.mark.parametrize(("path", "fragment"), [
    ("../x", "'..' is not allowed"), ("a/../../b", "'..' is not allowed"), ("/etc", "must be relative"),
    ("a\nb", "control characters"),
])
def test_paths_that_leave_the_repository_are_rejected(path, fragment):
    with pytest.raises(SourceError) as error:
        normalize_path(path)
    assert fragment in str(error.value)


def test_make_source_validates_every_argument():
    with pytest.raises(SourceError, match="--ref: 'a..b' is not a valid"):
        make_source("git@github.com:acme/repo.git", ref="a..b")
    with pytest.raises(SourceError, match="--webhook-secret: 'Bad' is not a valid secret name"):
        make_source("git@github.com:acme/repo.git", webhook_secret="Bad")
    assert make_source("git@github.com:acme/repo.git") == Source("git@github.com:acme/repo.git", "main", "", None)


def test_saved_with_mode_0600_and_loaded_back(tmp_path):
    layout = Layout(state_dir=tmp_path)
    assert load_source(layout) is None
    source = make_source("git@github.com:acme/repo.git", ref="v1", path="apps/fn", webhook_secret="hook")
    save_source(layout, source)
    assert stat.S_IMODE(layout.source.stat().st_mode) == 0o600
    assert stat.S_IMODE(layout.git_dir.stat().st_mode) == 0o700
    assert load_source(layout) == source
    assert json.loads(layout.source.read_text()) == {
        "repository": "git@github.com:acme/repo.git", "ref": "v1", "path": "apps/fn", "webhook_secret": "hook"}


@pytest.mark.parametrize("content", [
    "{not json", "[]", '{"ref": "main"}', '{"repository": "https://github.com/a/b"}',
    '{"repository": "git@h:a/b.git", "ref": 3}', '{"repository": "git@h:a/b.git", "extra": 1}',
    '{"repository": "git@h:a/b.git", "path": "../up"}',
])
def test_a_corrupt_source_file_is_reported_as_such(tmp_path, content):
    layout = Layout(state_dir=tmp_path)
    layout.git_dir.mkdir()
    layout.source.write_text(content)
    with pytest.raises(SourceError) as error:
        load_source(layout)
    assert str(error.value).startswith(f"{layout.source} is corrupt (")
    assert "run 'relay git set' to replace it or delete the file" in str(error.value)
