"""Symbolic links in a function directory are judged on their real paths.

``a -> .``, ``b -> a/..``, ``c -> b/..`` each normalise to a path inside the
function as text, yet c is the directory above /functions; a manifest linked
through c reads any host file. Such a function fails to load with an error
naming the links and nothing of what they point at, whether the loader, the
dependency recipe or a running Relay meets it. Links that stay inside work.
"""

import os
import secrets
import signal

import pytest

from relay.errors import BuildError, TemplateError
from relay.functions import load_function
from relay.functions.runtimes import RUNTIMES
from relay.links import leads_outside, links_outside
from relay.runtime.recipes import dependency_recipe
from tests.support.commands import view_command
from tests.support.workers import Worker, engine_env, namespaced_relay_command, publish, wait_until, write_function

TEMPLATE = "runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {kind: [%s]}\n"
SOURCE = "def handler(event):\n    print('linked handler ran n=' + str(event['n']), flush=True)\n"


def chained(root, name, secret_path, kind="chained"):
    """A function whose requirements.txt reaches *secret_path* (absolute) through a -> ., b -> a/.., c -> b/.."""
    directory = write_function(root, name, TEMPLATE % kind, {"app.py": SOURCE})
    os.symlink(".", directory / "a")
    os.symlink("a/..", directory / "b")
    os.symlink("b/..", directory / "c")
    above = os.path.realpath(directory.parent.parent)  # where c really leads
    os.symlink(f"c/{os.path.relpath(secret_path, above)}", directory / "requirements.txt")
    return directory


@pytest.fixture
def canary(tmp_path):
    value = secrets.token_hex(20)
    path = tmp_path / "host" / "secrets" / "db-password"
    path.parent.mkdir(parents=True)
    path.write_text(value + "\n")
    return value, path


def test_the_chain_looks_inside_as_text_but_leads_out(tmp_path, canary):
    value, path = canary
    directory = chained(tmp_path / "functions", "fn", path)
    assert (directory / "requirements.txt").read_text().strip() == value  # the attack works on disk
    for link in ("a", "b", "c", "requirements.txt"):  # nothing a check on the text would catch
        assert not os.path.isabs(os.readlink(directory / link))
        assert not os.path.normpath(os.path.join(".", os.readlink(directory / link))).startswith("..")
    assert not leads_outside(directory, directory / "a")
    assert links_outside(directory) == ["b", "c", "requirements.txt"]


def test_a_local_function_with_the_chain_fails_to_load_naming_the_links(tmp_path, canary):
    value, path = canary
    directory = chained(tmp_path / "functions", "fn", path)
    with pytest.raises(TemplateError) as raised:
        load_function(directory)
    assert str(raised.value) == (f"{directory}: symbolic links b, c, requirements.txt lead outside the function "
                                 f"directory; links must stay inside it")


def test_an_absolute_link_manifest_or_template_is_never_read(tmp_path, canary):
    value, path = canary
    directory = write_function(tmp_path / "functions", "fn", TEMPLATE % "x", {"app.py": SOURCE})
    os.symlink(path, directory / "requirements.txt")
    with pytest.raises(TemplateError, match=r"symbolic link requirements.txt leads outside") as raised:
        load_function(directory)
    assert value not in str(raised.value)
    os.unlink(directory / "template.yaml")
    os.symlink(path, directory / "template.yaml")  # a secret as a template would be quoted as "not a mapping"
    with pytest.raises(TemplateError, match=r"symbolic links requirements.txt, template.yaml lead") as raised:
        load_function(directory)
    assert value not in str(raised.value)


def test_a_manifest_that_becomes_a_link_out_after_the_load_is_not_read(tmp_path, canary):
    value, path = canary
    directory = write_function(tmp_path / "functions", "fn", TEMPLATE % "x", {"app.py": SOURCE,
                                                                              "requirements.txt": "\n"})
    load_function(directory)
    os.unlink(directory / "requirements.txt")
    os.symlink(path, directory / "requirements.txt")
    with pytest.raises(BuildError) as raised:
        dependency_recipe(directory, RUNTIMES["python3.14"], "amd64")
    assert str(raised.value) == (f"{directory}: requirements.txt is a symbolic link that leads outside the "
                                 f"function directory")


def test_links_that_stay_inside_keep_working(tmp_path):
    directory = write_function(tmp_path / "functions", "fn", TEMPLATE % "x",
                               {"app.py": SOURCE, "deps/requirements.txt": "# nothing to install\n"})
    os.symlink(".", directory / "here")
    os.symlink("here/deps/requirements.txt", directory / "requirements.txt")
    os.symlink("../fn/app.py", directory / "roundabout.py")  # leaves as text, lands inside
    function = load_function(directory)
    recipe = dependency_recipe(function.directory, RUNTIMES["python3.14"], "amd64")
    assert recipe.manifests == (("requirements.txt", b"# nothing to install\n"),)


# --- a running Relay ----------------------------------------------------------------------


@pytest.fixture
def relay_worker(redis_server, tmp_path):
    started = []

    def start(functions, state, hostname):
        worker = Worker(namespaced_relay_command(functions, state, hostname),
                        engine_env(redis_server, LOG_LEVEL="DEBUG"), tmp_path, "relay")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def remove_images(docker_engine, names):
    for image in docker_engine.api.images(name="relay-fn-*"):
        for tag in image.get("RepoTags") or ():
            if tag.split(":")[0] in {f"relay-fn-{name}" for name in names}:
                docker_engine.api.remove_image(tag)


def test_relay_start_refuses_links_out_and_serves_links_inside(relay_worker, redis_client, docker_engine, tmp_path):
    """The secret sits at /var/lib/relay/secrets/db-password in Relay's own mount namespace; the chain
    reaches it from /functions/<name>. It shows up nowhere: not in the error, the state, nor the log."""
    value = secrets.token_hex(20)
    suffix = secrets.token_hex(3)
    names = {kind: f"links-{kind}-{suffix}" for kind in ("chained", "absolute", "inside")}
    functions, state = tmp_path / "functions", tmp_path / "state"
    (state / "secrets").mkdir(parents=True)
    (state / "secrets" / "db-password").write_text(value + "\n")
    directory = write_function(functions, names["chained"], TEMPLATE % "chained", {"app.py": SOURCE})
    for link, target in (("a", "."), ("b", "a/.."), ("c", "b/.."),
                         ("requirements.txt", "c/var/lib/relay/secrets/db-password")):
        os.symlink(target, directory / link)
    directory = write_function(functions, names["absolute"], TEMPLATE % "absolute", {"app.py": SOURCE})
    os.symlink("/var/lib/relay/secrets/db-password", directory / "requirements.txt")
    directory = write_function(functions, names["inside"], TEMPLATE % "inside",
                               {"app.py": SOURCE, "deps/requirements.txt": "# nothing to install\n"})
    os.symlink(".", directory / "a")
    os.symlink("a/deps/requirements.txt", directory / "requirements.txt")

    relay = relay_worker(functions, state, f"links-{suffix}")
    try:
        relay.wait_for('msg="Relay started"', timeout=300)
        publish(redis_client, {"kind": "inside", "n": 1})
        relay.wait_for("linked handler ran n=1", where="stdout", timeout=120)
        assert relay.stop(signal.SIGTERM) == 0
    finally:
        remove_images(docker_engine, names.values())

    for kind, links in (("chained", "symbolic links b, c, requirements.txt lead"),
                        ("absolute", "symbolic link requirements.txt leads")):
        logged = [line for line in relay.stderr.splitlines()
                  if 'msg="Invalid function; skipped"' in line and f"function={names[kind]} " in line]
        assert len(logged) == 1 and f"{links} outside the function directory" in logged[0], relay.stderr[-3000:]
    assert f'msg="Function ready" function={names["inside"]} ' in relay.stderr

    inspected = {name: view_command(state, "function", "inspect", name) for name in names.values()}
    for kind in ("chained", "absolute"):  # never loaded, so the state has no row for it (and no last_error)
        assert "Relay has not loaded it" in inspected[names[kind]].stderr, inspected[names[kind]]
    assert inspected[names["inside"]].returncode == 0
    places = {"stdout": relay.stdout, "stderr": relay.stderr,
              **{f"inspect {name}": result.stdout + result.stderr for name, result in inspected.items()}}
    for path in state.rglob("*"):
        if path.is_file() and state / "secrets" not in path.parents:
            places[str(path.relative_to(state))] = path.read_bytes().decode(errors="replace")
    assert [where for where, text in places.items() if value in text or value[:16] in text] == []
    wait_until(lambda: not docker_engine.api.containers(filters={"label": f"relay.hostname=links-{suffix}"}),
               timeout=30, what="the handler's container to be gone")
