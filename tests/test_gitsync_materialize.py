"""Copying a checkout's functions into /functions: exact, atomic per function, no link followed out."""

import os
import stat
from pathlib import Path

import pytest

from relay.gitsync.materialize import STAGING_PREFIX, find_functions, replace_functions


def tree(root, files):
    for relative, content in files.items():
        path = Path(root) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple):  # ("link", target)
            os.symlink(content[1], path)
        else:
            path.write_text(content)
    return Path(root)


def listing(root):
    """{relative path: text, ('link', target) or 'dir'} of everything under *root*."""
    found = {}
    for current, directories, files in os.walk(root):
        for name in directories + files:
            path = Path(current) / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[relative] = ("link", os.readlink(path))
            elif path.is_dir():
                found[relative] = "dir"
            else:
                found[relative] = path.read_text()
    return found


@pytest.fixture
def warnings():
    return []


def sync(source_root, functions, warnings):
    return replace_functions(functions, find_functions(source_root, warnings.append), warnings.append)


def test_functions_are_the_subdirectories_with_a_template(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {
        "hello/template.yaml": "t", "hello/app.py": "a", "hello/lib/util.py": "u",
        "docs/readme.md": "not a function", ".github/workflows/ci.yaml": "no template",
        "README.md": "file at the root",
    })
    assert find_functions(source, warnings.append) == {"hello": source / "hello"}
    assert warnings == []


def test_invalid_names_and_linked_templates_are_skipped_with_a_warning(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {
        "Bad_Name/template.yaml": "t", "good/template.yaml": "t",
        "linked/template.yaml": ("link", "../good/template.yaml"), "alias": ("link", "good"),
    })
    assert list(find_functions(source, warnings.append)) == ["good"]
    assert warnings == [
        "directory skipped: 'Bad_Name' is not a valid function name: use lowercase letters, digits, '.', '_' "
        "and '-', starting with a letter or digit",
        "'alias' is a symbolic link, which sync never follows; skipped",
        "linked/template.yaml is not a regular file; function 'linked' skipped",
    ]


def test_functions_dir_ends_up_exactly_like_the_source(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {"a/template.yaml": "a1", "a/bin/run.sh": "#!/bin/sh\n",
                                          "b/template.yaml": "b1"})
    os.chmod(source / "a/bin/run.sh", 0o775)
    functions = tree(tmp_path / "functions", {"operator/template.yaml": "placed by hand", "stray.txt": "x",
                                              "b/template.yaml": "old", "b/old.py": "gone"})
    os.symlink("/etc", functions / "etc-link")
    changes = sync(source, functions, warnings)
    assert (changes.added, changes.updated, changes.removed) == (["a"], ["b"], ["etc-link", "operator", "stray.txt"])
    assert listing(functions) == {"a": "dir", "a/template.yaml": "a1", "a/bin": "dir", "a/bin/run.sh": "#!/bin/sh\n",
                                  "b": "dir", "b/template.yaml": "b1"}
    assert stat.S_IMODE((functions / "a/bin/run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((functions / "a/template.yaml").stat().st_mode) == 0o644
    assert stat.S_IMODE((functions / "a").stat().st_mode) == 0o755
    assert Path("/etc").is_dir()  # the link was removed, not what it points at


def test_unchanged_functions_are_left_alone(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {"a/template.yaml": "a", "a/x/y.py": "y", "a/link": ("link", "x/y.py")})
    functions = tmp_path / "functions"
    sync(source, functions, warnings)
    inode = (functions / "a").stat().st_ino
    changes = sync(source, functions, warnings)
    assert (changes.added, changes.updated, changes.unchanged, changes.removed) == ([], [], ["a"], [])
    assert (functions / "a").stat().st_ino == inode
    (source / "a/x/y.py").write_text("changed")
    assert sync(source, functions, warnings).updated == ["a"]
    assert (functions / "a/x/y.py").read_text() == "changed"
    os.chmod(source / "a/x/y.py", 0o755)
    assert sync(source, functions, warnings).updated == ["a"]


def test_links_inside_the_function_are_copied_as_links(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {
        "fn/template.yaml": "t", "fn/app.py": "a", "fn/inside": ("link", "app.py"),
        "fn/sub/back": ("link", "../app.py"), "fn/here": ("link", "."), "fn/roundabout": ("link", "../fn/app.py"),
    })
    functions = tmp_path / "functions"
    assert sync(source, functions, warnings).added == ["fn"] and warnings == []
    assert listing(functions / "fn") == {"template.yaml": "t", "app.py": "a", "inside": ("link", "app.py"),
                                         "here": ("link", "."), "roundabout": ("link", "../fn/app.py"),
                                         "sub": "dir", "sub/back": ("link", "../app.py")}


def test_a_function_with_a_link_out_is_rejected_whole_and_its_old_copy_kept(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {
        "fn/template.yaml": "t", "fn/app.py": "a",
        "fn/passwd": ("link", "/etc/passwd"), "fn/up": ("link", "../other/secret"),
        "fn/sub/deep": ("link", "../../../outside"), "fn/etc": ("link", "/etc"),
        "fn/inside": ("link", "app.py"), "other/template.yaml": "o",
    })
    functions = tree(tmp_path / "functions", {"fn/template.yaml": "the version before", "gone/template.yaml": "g"})
    changes = sync(source, functions, warnings)
    assert (changes.added, changes.removed, changes.rejected) == (["other"], ["gone"], ["fn"])
    assert listing(functions / "fn") == {"template.yaml": "the version before"}
    assert warnings == ["fn/etc, fn/passwd, fn/sub/deep, fn/up: symbolic links lead outside the function; "
                        "function 'fn' not synced"]


def test_a_chain_of_links_that_climbs_out_is_caught_on_real_paths(tmp_path, warnings):
    """``a -> .``, ``b -> a/..``, ``c -> b/..`` each normalise to a path inside; c really is two levels up."""
    host = tree(tmp_path / "host", {"var/lib/relay/secrets/db-password": "hunter2-db-password"})
    source = tree(tmp_path / "checkout" / "repo", {
        "fn/template.yaml": "t", "fn/a": ("link", "."), "fn/b": ("link", "a/.."), "fn/c": ("link", "b/.."),
        "fn/requirements.txt": ("link", "c/../host/var/lib/relay/secrets/db-password"),
    })
    assert (source / "fn/requirements.txt").read_text() == "hunter2-db-password"  # the chain works on disk
    functions = tmp_path / "functions"
    changes = sync(source, functions, warnings)
    assert changes.rejected == ["fn"] and not (functions / "fn").exists()
    assert warnings == ["fn/b, fn/c, fn/requirements.txt: symbolic links lead outside the function; "
                        "function 'fn' not synced"]
    assert host.is_dir()


def test_zero_functions_empty_the_directory(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {"README.md": "nothing here"})
    functions = tree(tmp_path / "functions", {"old/template.yaml": "t"})
    changes = sync(source, functions, warnings)
    assert changes.removed == ["old"] and os.listdir(functions) == []


def test_a_missing_functions_dir_is_created(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {"a/template.yaml": "t"})
    sync(source, tmp_path / "new" / "functions", warnings)
    assert (tmp_path / "new/functions/a/template.yaml").read_text() == "t"


def test_a_file_or_link_where_a_function_goes_is_replaced(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {"a/template.yaml": "t", "b/template.yaml": "t"})
    functions = tree(tmp_path / "functions", {"a": "a file"})
    os.symlink(tmp_path / "checkout", functions / "b")
    changes = sync(source, functions, warnings)
    assert changes.updated == ["a", "b"]
    assert not (functions / "b").is_symlink() and (functions / "b/template.yaml").read_text() == "t"
    assert (tmp_path / "checkout/b/template.yaml").read_text() == "t"


def test_leftovers_of_an_interrupted_sync_are_removed_quietly(tmp_path, warnings):
    source = tree(tmp_path / "checkout", {"a/template.yaml": "t"})
    functions = tree(tmp_path / "functions", {f"{STAGING_PREFIX}a-x1y2/template.yaml": "half"})
    changes = sync(source, functions, warnings)
    assert os.listdir(functions) == ["a"] and changes.removed == []


def test_renameat2_exchange_swaps_two_directories(tmp_path):
    from relay.gitsync.materialize import _exchange

    first, second = tree(tmp_path / "first", {"f": "1"}), tree(tmp_path / "second", {"s": "2"})
    assert _exchange(first, second)
    assert os.listdir(first) == ["s"] and os.listdir(second) == ["f"]


def test_without_renameat2_a_function_is_replaced_by_two_renames(tmp_path, warnings, monkeypatch):
    from relay.gitsync import materialize

    monkeypatch.setattr(materialize, "_exchange", lambda first, second: False)
    source = tree(tmp_path / "checkout", {"a/template.yaml": "new"})
    functions = tree(tmp_path / "functions", {"a/template.yaml": "old", "a/old.py": "x"})
    assert sync(source, functions, warnings).updated == ["a"]
    assert listing(functions) == {"a": "dir", "a/template.yaml": "new"}
