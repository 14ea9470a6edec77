"""relay.files: private directories, atomic writes, directory syncs."""

import os
import stat

import pytest

from relay import files
from relay.files import private_directory, sync_directory, write_atomically


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_private_directory_is_made_with_its_parents_and_mode_0700(tmp_path):
    path = private_directory(tmp_path / "state" / "git")
    assert path == tmp_path / "state" / "git" and path.is_dir()
    assert mode(path) == 0o700


def test_a_private_directory_is_never_wider_than_0700_even_for_a_moment(tmp_path, monkeypatch):
    made = []
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, **kwargs):
        made.append((str(path), mode))
        return real_mkdir(path, mode, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    private_directory(tmp_path / "ssh")
    assert [mode for path, mode in made if path == str(tmp_path / "ssh")] == [0o700]


def test_an_existing_directory_is_narrowed_to_0700(tmp_path):
    wide = tmp_path / "wide"
    wide.mkdir(mode=0o755)
    os.chmod(wide, 0o755)
    private_directory(wide)
    assert mode(wide) == 0o700


def test_a_file_in_the_directorys_place_is_an_error_and_stays_as_it_is(tmp_path):
    blocker = tmp_path / "git"
    blocker.write_text("not a directory")
    os.chmod(blocker, 0o644)
    with pytest.raises(FileExistsError):
        private_directory(blocker)
    assert mode(blocker) == 0o644 and blocker.read_text() == "not a directory"


def test_an_atomic_write_replaces_the_file_with_its_mode_and_leaves_nothing_else(tmp_path):
    target = tmp_path / "source.json"
    target.write_bytes(b"old")
    write_atomically(target, b"new", mode=0o644)
    assert target.read_bytes() == b"new" and mode(target) == 0o644
    write_atomically(target, b"newer")
    assert target.read_bytes() == b"newer" and mode(target) == 0o600
    assert os.listdir(tmp_path) == ["source.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary_one(tmp_path, monkeypatch):
    target = tmp_path / "key"
    target.write_bytes(b"old")

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        write_atomically(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["key"]


def test_an_interrupted_write_removes_the_temporary_file_too(tmp_path, monkeypatch):
    def interrupted(source, destination):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(tmp_path / "known_hosts", b"pins")
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_the_temporary_file_is_hidden_next_to_the_target(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def replace(source, destination):
        seen.append(os.path.basename(source))
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", replace)
    write_atomically(tmp_path / "token", b"value")
    [name] = seen
    assert name.startswith(".token.") and name.endswith(".tmp")


def test_a_write_syncs_the_directory_after_the_rename(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(files, "sync_directory", synced.append)
    write_atomically(tmp_path / "last-sync.json", b"{}")
    assert synced == [tmp_path]


def test_syncing_a_directory_that_cannot_be_opened_is_quiet(tmp_path):
    sync_directory(tmp_path)
    sync_directory(tmp_path / "missing")


def owner(path):
    status = os.lstat(path)
    return status.st_uid, status.st_gid


def test_what_root_writes_in_a_directory_of_another_owner_is_given_to_that_owner(tmp_path):
    """The tests run as root, as an operator's sudo does (tests/test_state_owner.py runs the commands)."""
    assert os.geteuid() == 0
    state = tmp_path / "state"
    state.mkdir()
    assert files.owner_of(state) is None  # root's own directory: nothing to give
    os.chown(state, 4242, 4343)
    assert files.owner_of(state) == (4242, 4343) and files.owner_of(tmp_path / "missing") is None
    directory = private_directory(state / "ssh", owner=(4242, 4343))
    write_atomically(directory / "known_hosts", b"pins", owner=(4242, 4343))
    with files.open_lock_file(state / "sync.lock", owner=(4242, 4343)):
        pass
    assert {owner(path) for path in (directory, directory / "known_hosts", state / "sync.lock")} == {(4242, 4343)}
    tree = state / "checkout"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "file").write_text("x")
    os.symlink("/etc/passwd", tree / "a" / "link")
    files.give_tree(tree, (4242, 4343))
    assert {owner(path) for path in (tree, tree / "a", tree / "a" / "b", tree / "a" / "b" / "file",
                                     tree / "a" / "link")} == {(4242, 4343)}
    assert owner("/etc/passwd") == (0, 0)  # the link itself was given, never what it points at
