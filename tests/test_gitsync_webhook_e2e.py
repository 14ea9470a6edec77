"""The webhook in a running ``relay start``: a push syncs /functions; a taken port stops the start.

Relay runs in a private mount namespace where temporary directories are
/functions and /var/lib/relay, against a real sshd serving a real repository.
"""

import hashlib
import hmac
import json
import socket
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from relay.gitsync.layout import Layout
from relay.gitsync.source import make_source, save_source
from relay.secrets.store import FileSecretStore
from tests.support.gitserver import relay_git
from tests.support.redis_server import free_port
from tests.support.tricklers import Tricklers
from tests.support.workers import Worker, engine_env, namespaced_relay_command, wait_until

SECRET = "e2e-webhook-secret"
TEMPLATE = "runtime: python3.14\nevents:\n  - handler: app.handle\n    pattern: {kind: [%s]}\n"


def function(name):
    return {f"{name}/template.yaml": TEMPLATE % name, f"{name}/app.py": "def handle(event):\n    pass\n"}


def deliver(port, payload, secret=SECRET):
    body = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/github", data=body, method="POST", headers={
        "Content-Type": "application/json", "X-GitHub-Event": "push", "X-Hub-Signature-256": signature})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def test_pushes_delivered_to_a_running_relay_sync_functions(redis_server, redis_client, docker_engine, git_server,
                                                           tmp_path):
    functions, state = tmp_path / "functions", tmp_path / "state"
    functions.mkdir(), state.mkdir()
    repo = git_server.repository()
    repo.commit(function("first"))
    url = git_server.url(repo)
    for args in (("keygen",), ("set", url, "--webhook-secret", "github-webhook")):
        assert relay_git(functions, state, *args).returncode == 0
    git_server.authorize((state / "ssh/id_ed25519.pub").read_text())
    FileSecretStore(state / "secrets").set("github-webhook", SECRET.encode())
    assert relay_git(functions, state, "sync").returncode == 0

    port = free_port()
    relay = Worker(namespaced_relay_command(functions, state, "relay-webhook-e2e"),
                   engine_env(redis_server, GIT_WEBHOOK_ADDR=f"127.0.0.1:{port}"), tmp_path, "relay")
    try:
        relay.wait_for(f'msg="Webhook http server listening" addr=127.0.0.1:{port}')
        commit = repo.commit(function("second"))
        payload = {"ref": "refs/heads/main", "after": commit, "deleted": False,
                   "repository": {"full_name": "acme/functions", "ssh_url": url}}
        assert deliver(port, payload) == 202
        relay.wait_for('msg="Git sync finished"')
        assert sorted(path.name for path in functions.iterdir()) == ["first", "second"]

        repo.commit({**function("third"), "first": None})
        with ThreadPoolExecutor(10) as pool:
            assert list(pool.map(lambda _: deliver(port, payload), range(10))) == [202] * 10
        wait_until(lambda: sorted(path.name for path in functions.iterdir()) == ["second", "third"], what="the burst")
        time.sleep(3)  # a follow-up sync, if any, has long started and ended
        wait_until(lambda: relay.stderr.count('msg="Git sync finished"') == relay.stderr.count(
            'msg="Git sync started"'), what="the syncs to finish")
        assert 2 <= relay.stderr.count('msg="Git sync started"') <= 3  # the first push, then at most two
        assert SECRET not in relay.stderr and "Traceback" not in relay.stderr
        assert relay.stop() == 0
    finally:
        relay.kill()


def test_relay_start_exits_1_when_the_webhook_port_is_taken(redis_server, redis_client, docker_engine, tmp_path):
    functions, state = tmp_path / "functions", tmp_path / "state"
    functions.mkdir(), state.mkdir()
    save_source(Layout(state_dir=state), make_source("git@github.com:acme/functions.git"))
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        relay = Worker(namespaced_relay_command(functions, state, "relay-webhook-taken"),
                       engine_env(redis_server, GIT_WEBHOOK_ADDR=f"127.0.0.1:{port}"), tmp_path, "relay")
        try:
            assert relay.process.wait(120) == 1
        finally:
            relay.kill()
    assert 'msg="Relay cannot start"' in relay.stderr and "Traceback" not in relay.stderr
    assert (f"the webhook server cannot listen on 127.0.0.1:{port} (GIT_WEBHOOK_ADDR): Address already in use"
            in relay.stderr)


def test_a_signed_delivery_is_answered_while_300_sockets_idle_and_8_bodies_stall(redis_server, redis_client,
                                                                                docker_engine, tmp_path):
    functions, state = tmp_path / "functions", tmp_path / "state"
    functions.mkdir(), state.mkdir()
    save_source(Layout(state_dir=state), make_source("git@github.com:acme/functions.git",
                                                     webhook_secret="github-webhook"))
    FileSecretStore(state / "secrets").set("github-webhook", SECRET.encode())
    port = free_port()
    command = ["prlimit", "--nofile=256:256", "--", *namespaced_relay_command(functions, state, "relay-webhook-idle")]
    relay = Worker(command, engine_env(redis_server, GIT_WEBHOOK_ADDR=f"127.0.0.1:{port}"), tmp_path, "relay")
    sockets = []
    try:
        relay.wait_for(f'msg="Webhook http server listening" addr=127.0.0.1:{port}')
        relay.wait_for('msg="Relay started"')
        for _ in range(8):  # half-sent: the head and part of a body that never ends
            stalled = socket.create_connection(("127.0.0.1", port), timeout=10)
            stalled.sendall(b"POST /github HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"ref\": ")
            sockets.append(stalled)
        sockets += [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(300)]
        time.sleep(0.5)
        payload = {"ref": "refs/heads/other", "after": "0" * 40, "deleted": False,
                   "repository": {"full_name": "acme/functions", "ssh_url": "git@github.com:acme/functions.git"}}
        began = time.monotonic()
        assert deliver(port, payload) == 200   # signed, checked, and ignored: another ref
        assert time.monotonic() - began < 2    # the bound
        relay.wait_for('msg="Webhook push ignored"')
        relay.wait_for('msg="Webhook http server at its connection limit; closing the oldest connections waiting '
                       'on a slow client"')
    finally:
        for sock in sockets:
            sock.close()
        relay.stop()
        relay.kill()
    assert relay.process.returncode == 0
    assert "Too many open files" not in relay.stderr and "Traceback" not in relay.stderr


WEBHOOK_TRICKLERS = [
    # The issue's: a full head, then a body at a byte a second.
    b"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nContent-Length: 1000000\r\n\r\n",
    b"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nTransfer-Encoding: chunked\r\n\r\nfffff\r\n",
    b"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nContent-Length: 1000000\r\n\r\n",
    b"POST /github HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\n",   # 413 at once
    b"POST /github HTTP/1.1\r\nHost: x\r\nX-Padding: ",                                 # a head that never ends
    b"",                                                                                # nothing at all
]
METRICS_TRICKLERS = [
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",  # answered at once, body unread
    b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: ",
    b"",
]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def test_a_scrape_and_a_signed_delivery_are_answered_while_200_clients_trickle_into_each_server(
        redis_server, redis_client, docker_engine, tmp_path):
    functions, state = tmp_path / "functions", tmp_path / "state"
    functions.mkdir(), state.mkdir()
    save_source(Layout(state_dir=state), make_source("git@github.com:acme/functions.git",
                                                     webhook_secret="github-webhook"))
    FileSecretStore(state / "secrets").set("github-webhook", SECRET.encode())
    webhook, metrics = free_port(), free_port()
    command = ["prlimit", "--nofile=256:256", "--", *namespaced_relay_command(functions, state, "relay-trickle")]
    relay = Worker(command, engine_env(redis_server, GIT_WEBHOOK_ADDR=f"127.0.0.1:{webhook}",
                                       METRICS_ADDR=f"127.0.0.1:{metrics}"), tmp_path, "relay")
    payload = {"ref": "refs/heads/other", "after": "0" * 40, "deleted": False,
               "repository": {"full_name": "acme/functions", "ssh_url": "git@github.com:acme/functions.git"}}
    seconds = []
    try:
        relay.wait_for('msg="Relay started"', timeout=300)
        relay.wait_for('msg="Metrics http server listening"')
        with Tricklers(webhook, WEBHOOK_TRICKLERS, 200) as at_webhook, \
                Tricklers(metrics, METRICS_TRICKLERS, 200) as at_metrics:
            for _ in range(6):   # from the first second of the trickle to well past the 2 s grace
                time.sleep(1)
                began = time.monotonic()
                assert "events_received_total" in scrape(metrics)
                scraped = time.monotonic()
                assert deliver(webhook, payload) == 200   # signed, checked, and ignored: another ref
                seconds.append((scraped - began, time.monotonic() - scraped))
            assert at_webhook.ended_by_server and at_metrics.ended_by_server
        print("scrape, delivery seconds:", [(round(scraped, 3), round(delivered, 3)) for scraped, delivered in seconds])
        assert max(max(pair) for pair in seconds) < 2, seconds   # the bound
        relay.wait_for('msg="Webhook push ignored"', count=len(seconds))
        for name in ("Webhook", "Metrics"):
            relay.wait_for(f'msg="{name} http server at its connection limit; closing the oldest connections '
                           'waiting on a slow client"')
    finally:
        relay.stop()
        relay.kill()
    assert relay.process.returncode == 0
    assert "Too many open files" not in relay.stderr and "Traceback" not in relay.stderr
