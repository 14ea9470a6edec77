"""The GitHub webhook: signatures, what is ignored, the coalescing runner, bind failures.

The server tests run the real bottle app on gevent's WSGI server on a
loopback port, with a job that counts syncs instead of running them.
"""

import hashlib
import hmac
import json
import logging
import socket
import time
import urllib.error
import urllib.request

import gevent
import pytest

from relay.config import ListenAddress
from relay.errors import SourceError, WebhookBindError
from relay.gitsync import webhook as webhook_module
from relay.gitsync.delivery import parse_payload, push_mismatch, signature_valid
from relay.gitsync.layout import Layout
from relay.gitsync.source import make_source, save_source
from relay.gitsync.webhook import webhook_service
from relay.secrets.store import FileSecretStore
from tests.support.redis_server import free_port

REPOSITORY = "git@github.com:acme/functions.git"
SECRET = "webhook-s3cret-value"


def push(ref="refs/heads/main", deleted=False, **repository):
    repository = repository or {"full_name": "acme/functions", "ssh_url": "git@github.com:acme/functions.git",
                                "clone_url": "https://github.com/acme/functions.git"}
    return {"ref": ref, "deleted": deleted, "after": "f" * 40, "repository": repository}


def sign(body, secret=SECRET):
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# --- deliveries, without a server ------------------------------------------------------

def test_signature_check():
    body = b'{"ref": "refs/heads/main"}'
    assert signature_valid(SECRET, body, sign(body))
    assert not signature_valid(SECRET, body, sign(body, "other"))
    assert not signature_valid(SECRET, body + b" ", sign(body))
    assert not signature_valid(SECRET, body, None) and not signature_valid(SECRET, body, "")
    assert not signature_valid(SECRET, body, "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest())
    assert not signature_valid(SECRET, body, "sha256=\xe9")


@pytest.mark.parametrize(("configured", "payload"), [
    (REPOSITORY, push()),
    ("ssh://git@github.com/acme/functions.git", push()),
    ("git@github.com:Acme/Functions", push()),
    ("ssh://git@ssh.github.com:443/acme/functions.git", push(full_name="acme/functions")),
    (REPOSITORY, push(ssh_url="git@github.com:acme/functions.git")),
    (REPOSITORY, push(clone_url="https://github.com/acme/functions.git")),
])
def test_pushes_to_the_configured_repository_match(configured, payload):
    assert push_mismatch(payload, make_source(configured)) is None


@pytest.mark.parametrize(("ref", "payload", "reason"), [
    ("main", push(ref="refs/heads/dev"), "push to refs/heads/dev, not to main"),
    ("main", push(deleted=True), "refs/heads/main was deleted"),
    ("main", push(full_name="acme/other", ssh_url="git@github.com:acme/other.git"),
     "push to another repository (acme/other)"),
    ("main", push(ssh_url="git@gitlab.com:acme/functions.git"), "push to another repository (unnamed)"),
    ("main", {"ref": "refs/heads/main"}, "push to another repository (unnamed)"),
    ("v1", push(ref="refs/heads/main"), "push to refs/heads/main, not to v1"),
    ("0123456789abcdef0123456789abcdef01234567", push(), "push to refs/heads/main, not to 0123456789abcdef"),
])
def test_other_pushes_do_not_match(ref, payload, reason):
    assert push_mismatch(payload, make_source(REPOSITORY, ref=ref)).startswith(reason)


def test_a_tag_push_matches_a_tag_ref():
    assert push_mismatch(push(ref="refs/tags/v1"), make_source(REPOSITORY, ref="v1")) is None
    assert push_mismatch(push(ref="refs/heads/v1"), make_source(REPOSITORY, ref="refs/tags/v1")) is not None


def test_payloads_as_json_or_form():
    payload = push()
    assert parse_payload(json.dumps(payload).encode(), "application/json") == payload
    form = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
    assert parse_payload(form, "application/x-www-form-urlencoded") == payload


# --- the server ------------------------------------------------------------------------------

class Jobs:
    """A stand-in for the sync: counts runs, each taking *duration* seconds."""

    def __init__(self, duration=0.0):
        self.duration = duration
        self.runs = 0
        self.running = 0
        self.most_at_once = 0

    def __call__(self):
        self.runs += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            gevent.sleep(self.duration)
        finally:
            self.running -= 1


@pytest.fixture
def logs():
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("relay.gitsync")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def logged(records):
    return "\n".join(f"{record.getMessage()} {vars(record)}" for record in records)


class Webhook:
    def __init__(self, tmp_path, secret_name="github-webhook", job=None, ref="main", store_secret=True):
        self.layout = Layout(state_dir=tmp_path / "state")
        self.secrets = FileSecretStore(tmp_path / "state" / "secrets")
        save_source(self.layout, make_source(REPOSITORY, ref=ref, webhook_secret=secret_name))
        if secret_name and store_secret:
            self.secrets.set(secret_name, SECRET.encode())
        self.jobs = job or Jobs()
        self.port = free_port()
        self.server = None

    def start(self):
        self.server = webhook_service(ListenAddress(host="127.0.0.1", port=self.port), layout=self.layout,
                                      secrets=self.secrets, job=self.jobs)
        self.loop = gevent.spawn(self.server.loop)
        return self

    def stop(self):
        if self.server is not None:
            self.server.stop()
            self.loop.join(timeout=5)

    def deliver(self, payload=None, event="push", signature="sign", body=None, headers=None):
        """(status, text, seconds) of one POST, made from a real thread."""
        body = json.dumps(push() if payload is None else payload).encode() if body is None else body
        headers = {"Content-Type": "application/json", "X-GitHub-Event": event,
                   "X-GitHub-Delivery": "d-1", **(headers or {})}
        if signature == "sign":
            headers["X-Hub-Signature-256"] = sign(body)
        elif signature is not None:
            headers["X-Hub-Signature-256"] = signature
        return gevent.get_hub().threadpool.apply(post, (f"http://127.0.0.1:{self.port}/github", body, headers))


def post(url, body, headers, method="POST"):
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(), time.monotonic() - started
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), time.monotonic() - started


@pytest.fixture
def webhooks(tmp_path):
    started = []

    def make(**options):
        hook = Webhook(tmp_path / f"hook{len(started)}", **options).start()
        started.append(hook)
        return hook

    yield make
    for hook in started:
        hook.stop()


def settle(jobs, quiet=0.3, timeout=10):
    """Wait until no job runs and none started for *quiet* seconds."""
    deadline = time.monotonic() + timeout
    runs, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        if jobs.runs != runs or jobs.running:
            runs, since = jobs.runs, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        gevent.sleep(0.02)
    pytest.fail("jobs never settled")


def test_a_signed_push_schedules_a_sync_and_is_answered_at_once(webhooks, logs):
    hook = webhooks(job=Jobs(duration=1.0))
    status, text, seconds = hook.deliver()
    assert (status, text) == (202, "sync scheduled\n") and seconds < 0.5
    settle(hook.jobs)
    assert hook.jobs.runs == 1
    assert "Webhook http server listening" in logged(logs) and SECRET not in logged(logs)


@pytest.mark.parametrize("signature", [None, "", "sha256=" + "0" * 64, "garbage", sign(b"another body")])
def test_missing_or_wrong_signatures_are_401(webhooks, logs, signature):
    hook = webhooks()
    assert hook.deliver(signature=signature)[:2] == (401, "invalid signature\n")
    assert hook.deliver(event="ping", signature=signature)[0] == 401
    settle(hook.jobs)
    assert hook.jobs.runs == 0
    assert "missing or invalid signature" in logged(logs) and SECRET not in logged(logs)


def test_the_secret_is_read_from_the_store_at_every_delivery(webhooks, logs):
    hook = webhooks()
    body = json.dumps(push()).encode()
    hook.secrets.set("github-webhook", b"rotated")
    assert hook.deliver(body=body)[0] == 401
    assert hook.deliver(body=body, signature=sign(body, "rotated"))[0] == 202
    hook.secrets.remove("github-webhook")
    assert hook.deliver(body=body, signature=sign(body, "rotated"))[:2] == (500, "webhook secret unavailable\n")
    assert "secret 'github-webhook' is not in the secret store" in logged(logs)
    assert "rotated" not in logged(logs) and SECRET not in logged(logs)


def test_a_secret_missing_at_start_is_warned_about_and_used_once_stored(webhooks, logs):
    hook = webhooks(store_secret=False)
    errors = {record.getMessage(): getattr(record, "error", None) for record in logs}
    assert errors["Webhook secret cannot be used yet; deliveries are refused until it can"] == \
        "secret 'github-webhook' is not in the secret store"
    assert hook.deliver()[0] == 500
    hook.secrets.set("github-webhook", SECRET.encode())
    assert hook.deliver()[0] == 202


def test_without_a_webhook_secret_unsigned_deliveries_are_accepted(webhooks, logs):
    hook = webhooks(secret_name=None)
    assert "Webhook deliveries are not authenticated" in logged(logs)
    assert hook.deliver(signature=None)[0] == 202


@pytest.mark.parametrize(("event", "payload", "answer"), [
    ("ping", {"zen": "Design for failure."}, "ignored: ping event\n"),
    ("issues", push(), "ignored: issues event\n"),
    ("", push(), "ignored: no event\n"),
    ("push", push(ref="refs/heads/other"), "ignored: push to refs/heads/other, not to main\n"),
    ("push", push(deleted=True), "ignored: refs/heads/main was deleted\n"),
    ("push", push(full_name="acme/other", ssh_url="git@github.com:acme/other.git"),
     "ignored: push to another repository (acme/other)\n"),
])
def test_other_deliveries_are_acknowledged_with_200_and_ignored(webhooks, event, payload, answer):
    hook = webhooks()
    assert hook.deliver(payload, event=event)[:2] == (200, answer)
    settle(hook.jobs)
    assert hook.jobs.runs == 0


def test_bad_requests(webhooks, monkeypatch):
    hook = webhooks()
    assert hook.deliver(body=b"{not json")[:2] == (400, "the body is not a JSON payload\n")
    monkeypatch.setattr(webhook_module, "MAX_BODY", 1024)
    assert hook.deliver(body=b"x" * 2048)[:2] == (413, "payload too large\n")
    url = f"http://127.0.0.1:{hook.port}"
    assert gevent.get_hub().threadpool.apply(post, (f"{url}/github", None, {}, "GET"))[0] == 405
    assert gevent.get_hub().threadpool.apply(post, (f"{url}/other", b"{}", {}))[0] == 404
    settle(hook.jobs)
    assert hook.jobs.runs == 0


def test_a_burst_of_ten_pushes_runs_at_most_two_syncs(webhooks):
    hook = webhooks(job=Jobs(duration=1.0))
    answers = gevent.joinall([gevent.spawn(hook.deliver) for _ in range(10)], raise_error=True)
    assert [answer.value[0] for answer in answers] == [202] * 10
    assert max(answer.value[2] for answer in answers) < 0.9  # answered before the first sync ended
    settle(hook.jobs)
    assert 1 <= hook.jobs.runs <= 2 and hook.jobs.most_at_once == 1


def test_pushes_during_a_sync_fold_into_exactly_one_more(webhooks):
    hook = webhooks(job=Jobs(duration=1.0))
    assert hook.deliver()[0] == 202
    deadline = time.monotonic() + 5
    while not hook.jobs.running and time.monotonic() < deadline:
        gevent.sleep(0.01)
    for _ in range(9):
        assert hook.deliver()[0] == 202
    settle(hook.jobs)
    assert hook.jobs.runs == 2 and hook.jobs.most_at_once == 1


def test_a_failing_sync_does_not_stop_later_ones(webhooks, logs):
    def failing():
        raise RuntimeError("boom")

    hook = webhooks(job=failing)
    assert hook.deliver()[0] == 202
    gevent.sleep(0.2)
    assert hook.deliver()[0] == 202
    gevent.sleep(0.2)
    assert [record.getMessage() for record in logs].count("Git sync failed unexpectedly") == 2


# --- enabling -------------------------------------------------------------------------------

def test_a_taken_port_is_fatal(tmp_path):
    hook = Webhook(tmp_path)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", hook.port))
        blocker.listen()
        with pytest.raises(WebhookBindError) as error:
            hook.start()
    assert str(error.value) == (f"the webhook server cannot listen on 127.0.0.1:{hook.port} (GIT_WEBHOOK_ADDR): "
                                f"Address already in use")


def test_disabled_without_an_address_or_a_source(tmp_path, logs):
    layout = Layout(state_dir=tmp_path)
    assert webhook_service(None, layout=layout) is None
    port = free_port()
    assert webhook_service(ListenAddress(host="127.0.0.1", port=port), layout=layout) is None
    messages = [record.getMessage() for record in logs]
    assert messages == ["Webhook server disabled: GIT_WEBHOOK_ADDR is not set",
                        "Webhook server disabled: no git source is configured (relay git set)"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # nothing was bound


def test_a_corrupt_source_is_fatal_when_the_webhook_is_asked_for(tmp_path):
    layout = Layout(state_dir=tmp_path)
    layout.git_dir.mkdir()
    layout.source.write_text("{")
    with pytest.raises(SourceError, match="is corrupt"):
        webhook_service(ListenAddress(host="127.0.0.1", port=free_port()), layout=layout)


def test_a_body_that_stops_short_is_408_and_schedules_nothing(webhooks):
    from gevent import socket

    hook = webhooks()
    with socket.create_connection(("127.0.0.1", hook.port), timeout=10) as client:
        client.sendall(b"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nContent-Length: 100\r\n\r\n{")
        client.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := client.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408") and answer.endswith(b"request body incomplete\n")
    settle(hook.jobs)
    assert hook.jobs.runs == 0


@pytest.mark.parametrize("length", ["²", "1²", "-1", "9" * 400])
def test_an_odd_content_length_is_a_client_error_not_a_crash(webhooks, logs, length):
    from gevent import socket

    hook = webhooks()
    with socket.create_connection(("127.0.0.1", hook.port), timeout=10) as client:
        client.sendall(f"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
                       f"Content-Length: {length}\r\nConnection: close\r\n\r\n{{}}".encode())
        client.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := client.recv(4096):
            answer += chunk
    assert answer[:12] in (b"HTTP/1.1 400", b"HTTP/1.1 413"), answer[:200]
    assert not [record for record in logs if record.levelno >= logging.ERROR or record.exc_info]
    settle(hook.jobs)
    assert hook.jobs.runs == 0


def exchange(port, request, then=b"", interval=None):
    """Send *request*, then *then* a byte every *interval* seconds (or not at all); the answer
    and whether the server closed the connection."""
    from gevent import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(request)
        if interval is not None:
            for byte in then:
                gevent.sleep(interval)
                client.sendall(bytes([byte]))
        answer = b""
        while chunk := client.recv(4096):
            answer += chunk
    return answer


def test_a_content_length_over_25_mib_is_413_at_once_and_the_body_is_never_read(webhooks):
    hook = webhooks()
    head = (b"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
            b"Content-Length: %d\r\n\r\n{" % (25 * 1024 * 1024 + 1))
    with gevent.Timeout(5):   # not held until the 10 s deadline while the rest never comes
        answer = exchange(hook.port, head)
    assert answer.startswith(b"HTTP/1.1 413") and b"\r\nConnection: close\r\n" in answer
    assert answer.endswith(b"payload too large\n")


@pytest.mark.parametrize("head", [
    b"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nContent-Length: 5000\r\n\r\n",
    b"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n",
])
def test_a_body_below_1_kib_per_second_is_408_after_2_seconds(webhooks, head):
    hook = webhooks()
    began = time.monotonic()
    with gevent.Timeout(8):   # cut by the rate, not by the 10 s deadline
        answer = exchange(hook.port, head, then=b'{"ref": ', interval=0.2)
    assert answer.startswith(b"HTTP/1.1 408") and answer.endswith(b"request body incomplete\n")
    assert time.monotonic() - began >= 2   # the grace: a body may take its time to start
    settle(hook.jobs)
    assert hook.jobs.runs == 0


def test_bodies_past_the_budget_are_refused_at_once_until_those_in_flight_are_done(webhooks, logs, monkeypatch):
    """Many large deliveries at once cannot grow the worker without bound: what does not fit is a 503."""
    monkeypatch.setattr(webhook_module, "BODIES_IN_FLIGHT", 10_000)
    hook = webhooks()
    body = json.dumps(push()).encode()
    head = (b"POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nContent-Length: 4000\r\n\r\n")
    from gevent import socket as green_socket

    holders = [green_socket.create_connection(("127.0.0.1", hook.port), timeout=10) for _ in range(2)]
    for holder in holders:
        holder.sendall(head + b"{")          # 8,000 bytes taken; the bodies are still coming
    gevent.sleep(0.3)
    with gevent.Timeout(2):                   # answered at once, the body never read
        answer = exchange(hook.port, head)
    assert answer.startswith(b"HTTP/1.1 503") and b"\r\nRetry-After: 5\r\n" in answer
    assert answer.endswith(b"too many deliveries being received; try again\n")
    assert "Webhook deliveries refused: the bodies being received fill the budget" in logged(logs)
    assert hook.deliver(body=b"x" * 1000)[0] == 400   # 1,000 bytes still fit: read (and not JSON)
    for holder in holders:
        holder.close()
    gevent.sleep(0.3)
    assert hook.deliver(body=body)[:2] == (202, "sync scheduled\n")   # the budget is whole again
