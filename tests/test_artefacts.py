"""The shipped artefacts, run the way an operator runs them.

- The Dockerfile builds, and its image runs Relay against the host's Docker
  engine through the mounted socket: the healthcheck turns healthy, a
  published event is handled and acknowledged, and ``docker stop`` drains.
- deploy/relay.service passes ``systemd-analyze verify``.
- relay.pyz copied alone into an empty directory runs ``health`` and the
  administrative commands on each host interpreter, extracting into a fresh
  cache under $HOME. tests/test_zipapp.py already covers ``--version``, the
  cache order and the extraction itself, and tests/test_pyz_start.py covers
  ``start``; this adds the commands an operator types next.

After ``./scripts/setup --redis``: ``.venv/bin/python -m pytest tests/test_artefacts.py``.
"""

import json
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest

from tests.support.relay_process import ROOT, base_env
from tests.support.workers import pending, publish, with_private_paths
from tests.support.zipapps import CACHE_VARIABLES, build_id, extraction_dirs, find_python

VERSION = re.search(r'__version__ = "(.+)"', (ROOT / "relay" / "__init__.py").read_text())[1]
SOCKET = "/var/run/docker.sock"
STANDIN = "relay-local/base:bookworm"
STREAM, GROUP = "artefact-events", "relay"

HANDLER = '''\
def handler(event):
    print("handled", event["token"])
'''

TEMPLATE = '''\
runtime: python3.14
events:
  - handler: handler.handler
    pattern:
      kind: [artefact-check]
'''


# -- the container image ----------------------------------------------------------


def docker(*args, timeout=120, check=True):
    """The docker CLI on the default socket (the one the container mounts)."""
    binary = shutil.which("docker")
    if binary is None:
        pytest.fail("the docker CLI is not installed: run scripts/setup (it installs docker.io)", pytrace=False)
    result = subprocess.run([binary, *args], env=base_env(), capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail(f"docker {' '.join(args)} exited {result.returncode}:\n{result.stdout[-4000:]}"
                    f"{result.stderr[-4000:]}", pytrace=False)
    return result


def base_build_args():
    """The stand-in scripts/setup builds where no registry answers, else the
    Dockerfile's default base, which docker build pulls."""
    if docker("image", "inspect", STANDIN, check=False).returncode == 0:
        return ["--build-arg", f"BASE={STANDIN}"]
    return []


@pytest.fixture(scope="module")
def relay_image(pyz, docker_engine, tmp_path_factory):
    """The Dockerfile built from a context holding only it and relay.pyz.

    Like python:3.13-slim, the stand-in base has no git or ssh, so the
    Dockerfile installs them with apt. scripts/setup starts the engine without
    a bridge network, so the build uses the host's, which reaches the mirror.
    """
    context = tmp_path_factory.mktemp("context")
    shutil.copy2(ROOT / "Dockerfile", context / "Dockerfile")
    shutil.copy2(pyz, context / "relay.pyz")
    tag = f"relay-artefact-test:{uuid.uuid4().hex[:12]}"
    docker("build", "--network", "host", "--force-rm", *base_build_args(), "-t", tag, str(context), timeout=900)
    try:
        yield tag
    finally:
        docker("rmi", tag, check=False)


@pytest.mark.timeout(900)   # the first test also waits for the pyz and the image build
def test_image_has_git_ssh_and_starts_warm(relay_image):
    """A read-only root filesystem shows nothing is extracted at run time."""
    result = docker("run", "--rm", "--network", "none", "--read-only", relay_image,
                    "sh", "-c", "id -un; for c in git ssh relay.pyz; do command -v $c; done; relay.pyz --version")
    assert result.stdout.split() == ["relay", "/usr/bin/git", "/usr/bin/ssh", "/usr/local/bin/relay.pyz",
                                     "relay", VERSION], result.stderr


@pytest.mark.timeout(900)
def test_container_on_the_host_engine_handles_an_event(relay_image, redis_server, redis_client, tmp_path):
    token = uuid.uuid4().hex[:8]
    name = f"relay-artefact-{token}"      # container, hostname (consumer) and function
    function = tmp_path / "functions" / name
    function.mkdir(parents=True)
    (function / "template.yaml").write_text(TEMPLATE)
    (function / "handler.py").write_text(HANDLER)
    try:
        # The Dockerfile checks every 30s; the same check every 2s keeps the test short.
        docker("run", "-d", "--name", name, "--hostname", name, "--network", "host",
               "-v", f"{SOCKET}:{SOCKET}", "--group-add", str(os.stat(SOCKET).st_gid),
               "-v", f"{tmp_path / 'functions'}:/functions:ro",
               "-e", f"REDIS_URI={redis_server.address}", "-e", f"REDIS_STREAM={STREAM}",
               "-e", f"REDIS_GROUP={GROUP}", "--health-interval", "2s", relay_image)
        wait_for_health(name)

        message_id = publish(redis_client, {"event_id": f"evt-{token}", "kind": "artefact-check", "token": token},
                             stream=STREAM)
        line = (f'relay: function "{name}" handler "handler.handler" message "{message_id}" '
                f'event "evt-{token}": handled {token}')
        wait_for_logs(name, line)
        wait_for(lambda: delivered(redis_client) == message_id and pending(redis_client, STREAM, GROUP) == 0,
                 name, f"entry {message_id} to be acknowledged")

        listing = docker("exec", name, "relay.pyz", "function", "ls").stdout
        assert re.search(rf"^{re.escape(name)}\s+python3\.14\s", listing, re.MULTILINE), listing

        docker("stop", "--time", "60", name, timeout=90)
        assert docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0", logs(name)
        assert 'msg="Relay stopped"' in logs(name)
    finally:
        remove_container_and_images(name)


def logs(container):
    result = docker("logs", container, check=False)
    return result.stdout + result.stderr


def delivered(client):
    [group] = [group for group in client.xinfo_groups(STREAM) if group["name"].decode() == GROUP]
    return group["last-delivered-id"].decode()


def wait_for(condition, container, what, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        state = json.loads(docker("inspect", "--format", "{{json .State}}", container).stdout)
        if not state["Running"]:
            failure = f"the container exited with status {state['ExitCode']} while waiting for {what}"
            break
        time.sleep(0.5)
    else:
        failure = f"timed out waiting for {what}; the container is {state['Status']}"
    pytest.fail(f"{failure}\n"
                f"last health checks: {json.dumps((state.get('Health') or {}).get('Log', [])[-2:])}\n"
                f"docker logs:\n{logs(container)[-6000:]}", pytrace=False)


def wait_for_health(container):
    def healthy():
        return docker("inspect", "--format", "{{.State.Health.Status}}", container).stdout.strip() == "healthy"
    wait_for(healthy, container, "the healthcheck to report healthy")


def wait_for_logs(container, line):
    wait_for(lambda: line in logs(container).splitlines(), container, f"{line!r} in docker logs")


def remove_container_and_images(name):
    """The container with its anonymous /var/lib/relay volume, any execution
    container Relay left under this hostname, and the function's images."""
    docker("rm", "--force", "--volumes", name, check=False)
    leftovers = docker("ps", "-aq", "--filter", f"label=relay.hostname={name}", check=False).stdout.split()
    if leftovers:
        docker("rm", "--force", *leftovers, check=False)
    images = docker("image", "ls", "-q", f"relay-fn-{name}", check=False).stdout.split()
    if images:
        docker("rmi", "--force", *sorted(set(images)), check=False)


# -- the systemd unit -------------------------------------------------------------


def test_systemd_unit_passes_verify(tmp_path):
    """``systemd-analyze verify`` loads the unit offline, with the host's unit
    paths for its dependencies (docker.service comes with docker.io) and checks
    that ExecStart's binary exists. Warnings go to stderr with exit status 0,
    so any output fails the test. Debian 12's systemd 252 prints nothing for a
    clean unit on a machine where systemd is not running, so no line is ignored.
    The copy sits alone in a directory because verify adds the unit's directory
    to the unit search path."""
    analyze = shutil.which("systemd-analyze") or shutil.which("systemd-analyze", path="/usr/bin:/bin")
    if analyze is None:
        pytest.fail("systemd-analyze is not installed: apt-get install systemd (scripts/setup does)", pytrace=False)
    unit = tmp_path / "relay.service"
    shutil.copy(ROOT / "deploy" / "relay.service", unit)
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    output = (result.stdout + result.stderr).strip()
    assert (result.returncode, output) == (0, ""), f"systemd-analyze verify deploy/relay.service:\n{output}"



def test_systemd_unit_is_sandboxed(tmp_path):
    """``systemd-analyze security`` rated the unit 8.4 EXPOSED before #20 hardened it; it is 1.5 now.
    The bound keeps a later edit from quietly giving the sandbox back."""
    analyze = shutil.which("systemd-analyze") or shutil.which("systemd-analyze", path="/usr/bin:/bin")
    if analyze is None:
        pytest.fail("systemd-analyze is not installed: apt-get install systemd (scripts/setup does)", pytrace=False)
    unit = tmp_path / "relay.service"
    shutil.copy(ROOT / "deploy" / "relay.service", unit)
    result = subprocess.run([analyze, "security", "--offline=true", "--no-pager", str(unit)], capture_output=True,
                            text=True, timeout=60)
    found = re.search(r"Overall exposure level for relay\.service: ([0-9.]+)", result.stdout + result.stderr)
    assert found, result.stdout + result.stderr
    assert float(found[1]) <= 2.0, result.stdout


# -- relay.pyz alone in a fresh directory -------------------------------------------


def host_python(which):
    if which != "/usr/bin/python3":
        return find_python(which)
    if not os.access(which, os.X_OK):
        pytest.fail("Debian's /usr/bin/python3 is missing: apt-get install python3", pytrace=False)
    return which


@pytest.mark.parametrize("which", ["/usr/bin/python3", "3.12", "3.13"])
def test_pyz_alone_runs_health_and_admin_commands(pyz, redis_server, redis_client, docker_engine, tmp_path, which):
    """Debian 12's /usr/bin/python3 is CPython 3.11.2, which pyenv's newest 3.11
    never shows: redis, for one, imports async_timeout below 3.11.3."""
    python = host_python(which)
    fresh, home, functions, state = (tmp_path / part for part in ("fresh", "home", "functions", "state"))
    fresh.mkdir()
    home.mkdir()
    shutil.copy2(pyz, fresh / "relay.pyz")
    env = {key: value for key, value in base_env().items() if key not in CACHE_VARIABLES}
    env["HOME"] = str(home)

    def run(*args, private=False, input=None, stderr="", **extra_env):
        """stdout of a command that exits 0 and writes *stderr* (a pattern when it is an re.Pattern)."""
        command = [python, "relay.pyz", *args]
        if private:   # /functions and /var/lib/relay are fixed paths
            command = with_private_paths(command, functions, state)
        result = subprocess.run(command, cwd=fresh, env={**env, **extra_env}, input=input, capture_output=True,
                                text=True, timeout=300)
        said = stderr.fullmatch(result.stderr) is not None if isinstance(stderr, re.Pattern) \
            else result.stderr == stderr
        assert result.returncode == 0 and said, (args, result.stdout, result.stderr)
        return result.stdout

    assert run("--version") == f"relay {VERSION}\n"
    assert run("health", REDIS_URI=redis_server.address).splitlines() == [
        f"redis: ok (redis://{redis_server.address}/0)", f"docker: ok (unix://{SOCKET})"]
    run("secret", "set", "artefact-token", private=True, input="s3cret\n")
    assert run("secret", "ls", private=True) == "NAME\nartefact-token\n"
    no_state = ("relay function ls: there is no state database at /var/lib/relay/db.sqlite3: Relay has not run on "
                "this host, or it runs in a container (run the command there)\n")
    assert run("function", "ls", private=True, stderr=no_state).split() == [
        "NAME", "RUNTIME", "STATUS", "HANDLERS", "UPDATED"]

    # The #20 toolbox: offline checks, the dead-letter stream, one invocation on the engine.
    examples = str(ROOT / "examples" / "functions")
    insert = json.dumps({"event_name": "INSERT", "table_name": "users", "new_image": {"id": "u1"}})
    assert run("validate", examples, private=True) == f"2 functions in {examples}: 2 valid\n"
    assert run("match", examples, input=insert) == ("user-events-python  events.created.handler\n"
                                                    "welcome-email-node  handler.handler\n")
    stream = f"pyz-{uuid.uuid4().hex[:8]}"
    redis_client.xadd(f"relay:{stream}:dlq", {"original_stream": stream, "original_id": "1-0", "group": "relay",
                                              "consumer": "worker-a", "event": insert, "reason": "doomed",
                                              "attempts": "1", "timestamp": "2026-12-06T10:00:00Z"})
    listed = run("dlq", "ls", "--json", REDIS_URI=redis_server.address, REDIS_STREAM=stream)
    assert json.loads(listed)["reason"] == "doomed"
    redriven = run("dlq", "redrive", "--all", REDIS_URI=redis_server.address, REDIS_STREAM=stream)
    assert re.fullmatch(rf"\d+-0 -> {stream} \d+-0\nredriven 1 entry\n", redriven), redriven
    assert redis_client.xlen(stream) == 1 and redis_client.xlen(f"relay:{stream}:dlq") == 0
    invoked = run("invoke", "user-events-python", f"--dir={examples}", input=insert, private=True,
                  # the image is built first when no earlier test left it: its log lines come before
                  stderr=re.compile(r'(?:time=\S+ level=INFO msg="[^"]*".*\n)*'
                                    r"relay invoke: events.created.handler succeeded in [0-9.]+s\n"))
    assert re.fullmatch(r'relay: function "user-events-python" handler "events.created.handler" '
                        r'message "invoke-[0-9a-f]{16}": User created: u1\n', invoked), invoked

    assert os.listdir(fresh) == ["relay.pyz"]
    [extraction] = extraction_dirs(home / ".cache" / "relay")
    assert extraction.name.startswith(f"relay-{build_id(pyz)[:16]}-")


def compose_services():
    import yaml

    return yaml.safe_load((ROOT / "compose.dev.yaml").read_text())["services"]


def test_the_dev_compose_file_pins_its_images_and_waits_for_redis():
    services = compose_services()
    for name in ("redis", "socket-proxy"):
        image = services[name]["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: {image} is not pinned"
    relay = services["relay"]
    assert relay["restart"] == "unless-stopped"
    assert relay["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_the_dev_compose_file_restarts_redis_and_the_socket_proxy():
    """Relay restarts on failure; without a policy of their own, a Redis or a proxy that
    exits (an OOM kill, a host reboot) stays down, and Relay with them."""
    services = compose_services()
    for name in ("redis", "socket-proxy"):
        assert services[name].get("restart") in ("unless-stopped", "always"), f"{name} has no restart policy"


# -- the stop grace every deployment gives Relay ------------------------------------


def stop_graces():
    """Seconds each deployment lets Relay drain after SIGTERM before it is killed."""
    from relay.durations import parse_duration

    graces = {"compose.dev.yaml stop_grace_period":
              parse_duration(str(compose_services()["relay"]["stop_grace_period"])) / 1e9}
    unit = (ROOT / "deploy" / "relay.service").read_text()
    [timeout] = re.findall(r"^TimeoutStopSec=(\S+)$", unit, re.MULTILINE)
    graces["deploy/relay.service TimeoutStopSec"] = parse_duration(timeout) / 1e9
    for name in ("README.md", "Dockerfile"):
        runs = [command for command in re.findall(r"docker run\b(?:[^\n]*\\\n)*[^\n]*", (ROOT / name).read_text())
                if " -v " in command or "relay:latest" in command]
        assert runs, f"{name} shows no docker run of Relay's image"
        for index, command in enumerate(runs):
            found = re.search(r"--stop-timeout[ =](\d+)", command)
            assert found, f"{name}: docker run without --stop-timeout keeps Docker's 10s: {command}"
            graces[f"{name} docker run #{index + 1} --stop-timeout"] = float(found[1])
    return graces


def test_every_deployment_gives_relay_the_same_grace_to_drain():
    """After SIGTERM Relay drains for up to the longest rule timeout plus its margin, then
    removes its warm containers and flushes its state (Supervisor._shutdown). A deployment
    that kills it sooner kills invocations mid-way: Docker's default is 10 s."""
    from relay.functions.template import MAX_TIMEOUT
    from relay.runtime.warm_pool import CLOSE_TIMEOUT
    from relay.supervisor import DRAIN_MARGIN
    from relay.view.writer import FINAL_FLUSH_TIMEOUT

    graces = stop_graces()
    assert len(set(graces.values())) == 1, graces
    needed = MAX_TIMEOUT / 1e9 + DRAIN_MARGIN + CLOSE_TIMEOUT + FINAL_FLUSH_TIMEOUT
    for where, grace in graces.items():
        assert grace > needed, f"{where} is {grace:g}s; Relay's stop can take {needed:g}s"


# -- the environment file ------------------------------------------------------------


ENV_EXAMPLE = ROOT / "deploy" / "relay.env.example"
ASSIGNMENT = re.compile(r"^(# )?([A-Z][A-Z0-9_]*)=(.*)$")


class RecordingEnviron(dict):
    """A mapping that remembers every name looked up in it."""

    def __init__(self, **values):
        super().__init__(**values)
        self.read = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def variables_relay_reads():
    """Every variable ``relay start``'s configuration looks up: a new one in relay/config.py is
    found here without anyone listing it."""
    from relay.config import load_config

    environ = RecordingEnviron(REDIS_URI="127.0.0.1:6379", REDIS_STREAM="events", REDIS_GROUP="relay")
    load_config(environ, hostname="worker-1")
    assert {"REDIS_URI", "MAX_CONCURRENCY", "DOCKER_HOST"} <= environ.read, environ.read
    return environ.read


def example_assignments():
    """(active, NAME, value) for each assignment line of relay.env.example, in order."""
    return [(match[1] is None, match[2], match[3])
            for match in map(ASSIGNMENT.match, ENV_EXAMPLE.read_text().splitlines()) if match]


def test_the_environment_example_lists_every_variable_relay_reads():
    listed = {name for _active, name, _value in example_assignments()}
    assert variables_relay_reads() - listed == set(), "add them to deploy/relay.env.example, each with a comment"
    assert listed - variables_relay_reads() == set(), "deploy/relay.env.example names variables Relay never reads"


def test_the_readme_configuration_table_lists_every_variable_relay_reads():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    documented = {name for cell in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cell)}
    assert variables_relay_reads() - documented == set()


def test_every_variable_in_the_environment_example_has_a_comment():
    lines = ENV_EXAMPLE.read_text().splitlines()
    for index, line in enumerate(lines):
        match = ASSIGNMENT.match(line)
        if match:
            before = [text for text in lines[:index] if not ASSIGNMENT.match(text)]
            assert before and before[-1].startswith("# ") and not before[-1].startswith("# " + match[2]), \
                f"{match[2]} has no comment above it"


def test_the_environment_example_loads_as_written_and_with_each_example_value():
    """The active lines are a valid configuration, and uncommenting the examples one after
    another (a Sentinel REDIS_URI before its password) keeps it valid. Lines are NAME=value
    with nothing Docker's --env-file and systemd's EnvironmentFile= would read differently."""
    from relay.config import load_config

    environ = {}
    for active, name, value in example_assignments():
        assert re.fullmatch(r"[^\s\"'#]+", value), f"{name}={value}: no quotes, spaces or trailing comment"
        if active:
            environ[name] = value
    load_config(environ, hostname="worker-1")
    for active, name, value in example_assignments():
        if not active:
            environ[name] = value
            load_config(environ, hostname="worker-1")


# -- pointers in the shipped files ---------------------------------------------------


def test_the_units_pointers_lead_to_what_they_promise():
    """A comment that sends the reader to a page names a page and section that exist, and
    the sandboxing comment's page gives the systemd-analyze security score."""
    unit = (ROOT / "deploy" / "relay.service").read_text()
    comments = " ".join(line.lstrip("# ") for line in unit.splitlines() if line.startswith("#"))
    pointers = re.findall(r"((?:docs/)?[\w.-]+\.md)(?:, section \"([^\"]+)\")?", comments)
    assert pointers
    for page, section in pointers:
        text = (ROOT / page).read_text()
        if section:
            assert re.search(rf"^#+ {re.escape(section)}$", text, re.MULTILINE), (page, section)
    sandboxing = re.search(r"Sandboxing \(systemd-analyze security: (.*?)\)", comments)
    assert sandboxing, comments
    [(page, section)] = re.findall(r"((?:docs/)?[\w.-]+\.md)(?:, section \"([^\"]+)\")?", sandboxing[1])
    text = (ROOT / page).read_text()
    if section:
        text = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"systemd-analyze security` rates it [0-9.]+", text), f"{page} gives no score"
