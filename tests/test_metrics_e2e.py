"""Scrape a running Relay: every metric's name, type and labels, and counters that agree."""

import json
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.redis_server import free_port
from tests.support.workers import Worker, engine_env, harness_command, namespaced_relay_command, write_function

COUNTERS = {
    "events_received": (), "events_processed": (), "handler_success": (), "handler_failure": (), "retries": (),
    "dlq_entries": (), "handler_invocations": ("outcome", "function", "handler"), "build_failures": ("function",),
    "function_events": ("function",), "function_handler_success": ("function",),
    "function_handler_failure": ("function",), "function_retries": ("function",),
    "function_dlq_entries": ("function",), "events_expired": ("function",), "concurrency_waits": (),
    "schedule_occurrences_published": (), "schedule_occurrences_duplicate": (), "schedule_publish_failures": (),
    "rate_limit_waits": ("function",), "rate_limit_wait_seconds": ("function",),
    "concurrency_key_waits": ("function",), "concurrency_key_wait_seconds": ("function",),
}
HISTOGRAMS = {"handler_duration_seconds": ("function", "handler"), "function_build_seconds": ("function",)}
GAUGES = {"pending_entries": (), "pending_oldest_age_seconds": (), "buffered_events": (), "in_flight_invocations": ()}
ALLOWED_LABELS = {"function", "handler", "outcome", "le"}


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return {family.name: family for family in text_string_to_metric_families(response.read().decode())}


def sample(families, name, suffix="_total", **labels):
    family = families[name]
    values = [s.value for s in family.samples if s.name == name + suffix and s.labels == labels]
    return values[0] if values else 0.0


def test_every_metric_after_success_failure_retry_dlq_and_build_failure(redis_server, redis_client, docker_engine,
                                                                       tmp_path):
    functions = tmp_path / "functions"
    write_function(functions, "mixed", """
runtime: python3.14
events:
  - handler: app.ok
    pattern: {kind: [ok]}
  - handler: app.flaky
    pattern: {kind: [flaky]}
    retries: 1
  - handler: app.fail
    pattern: {kind: [doomed]}
    retries: 0
""", {"app.py": "import sys\n\ndef ok(event):\n    pass\n\ndef fail(event):\n    sys.exit(2)\n\n"
                "def flaky(event):\n    sys.exit(1)\n"})
    write_function(functions, "broken", "runtime: python3.14\nevents:\n  - handler: app.h\n    pattern: {a: [1]}\n",
                   {"requirements.txt": "this is not a requirement spec ===\n"})
    port = free_port()
    worker = Worker(harness_command(functions, "worker-1", reclaim=1, idle=1),
                    engine_env(redis_server, METRICS_ADDR=f"127.0.0.1:{port}"), tmp_path, "worker")
    try:
        worker.wait_for('msg="Metrics http server listening"')
        worker.wait_for('msg="Relay started"')
        for kind in ("ok", "flaky", "doomed"):
            redis_client.xadd("events", {"event": json.dumps({"kind": kind})})
        redis_client.xadd("events", {"event": json.dumps({"kind": "nothing"})})
        worker.wait_for('msg="Entry dead-lettered"', count=2, timeout=150)   # doomed at once, flaky after its retry
        time.sleep(1.5)
        families = scrape(port)
    finally:
        worker.stop()

    for name in COUNTERS:
        assert families[name].type == "counter", name
    for name in HISTOGRAMS:
        assert families[name].type == "histogram", name
    for name in GAUGES:
        assert families[name].type == "gauge", name
    for family in families.values():
        for item in family.samples:
            assert set(item.labels) <= ALLOWED_LABELS, item
            assert not item.name.endswith("_created"), item.name
    expected_labels = {**COUNTERS, **HISTOGRAMS}
    for name, labels in expected_labels.items():
        for item in families[name].samples:
            assert set(item.labels) - {"le"} == set(labels), item

    assert sample(families, "events_received") >= 4
    assert sample(families, "events_processed") == 2                      # ok and nothing
    assert sample(families, "handler_success") == 1
    assert sample(families, "handler_failure") == 3                       # flaky twice, doomed once
    assert sample(families, "retries") == 1
    assert sample(families, "dlq_entries") == 2
    assert sample(families, "handler_invocations", outcome="success", function="mixed", handler="app.ok") == 1
    assert sample(families, "handler_invocations", outcome="failure", function="mixed", handler="app.flaky") == 2
    assert sample(families, "function_handler_failure", function="mixed") == 3
    assert sample(families, "function_retries", function="mixed") == 1
    assert sample(families, "function_dlq_entries", function="mixed") == 2
    assert sample(families, "function_events", function="mixed") >= 3
    assert sample(families, "build_failures", function="broken") >= 1    # retried on every periodic pass
    # Created at 0 when the function loaded: its first build failure is an increase() an alert sees.
    assert [(item.name, item.value) for item in families["build_failures"].samples
            if item.labels == {"function": "mixed"}] == [("build_failures_total", 0.0)]
    assert sample(families, "handler_duration_seconds", "_count", function="mixed", handler="app.ok") == 1
    assert sample(families, "pending_entries", "") == 0


def test_a_taken_port_never_stops_event_processing(redis_server, redis_client, docker_engine, tmp_path):
    import socket

    functions = tmp_path / "functions"
    write_function(functions, "quick", "runtime: python3.14\nevents:\n  - handler: app.h\n    pattern: {a: [1]}\n",
                   {"app.py": "def h(event):\n    print('handled', flush=True)\n"})
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    worker = Worker(harness_command(functions, "worker-1"), engine_env(redis_server, METRICS_ADDR=f"127.0.0.1:{port}"),
                    tmp_path, "worker")
    try:
        worker.wait_for('msg="Relay started"')
        worker.wait_for('msg="Metrics http server cannot listen; retrying"')
        redis_client.xadd("events", {"event": json.dumps({"a": 1})})
        worker.wait_for("handled", where="stdout")
        blocker.close()
        worker.wait_for('msg="Metrics http server listening"', timeout=60)
        families = scrape(port)
        assert sample(families, "handler_success") == 1
    finally:
        blocker.close()
        assert worker.stop() == 0


def open_idle_sockets(port, count):
    """*count* connections that never send a byte."""
    import socket

    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]


def test_idle_connections_neither_starve_a_scrape_nor_exhaust_the_worker(redis_server, redis_client, docker_engine,
                                                                          tmp_path):
    functions, state = tmp_path / "functions", tmp_path / "state"
    state.mkdir()
    write_function(functions, "quick", "runtime: python3.14\nevents:\n  - handler: app.h\n    pattern: {a: [1]}\n",
                   {"app.py": "def h(event):\n    print('handled', flush=True)\n"})
    port = free_port()
    command = ["prlimit", "--nofile=256:256", "--", *namespaced_relay_command(functions, state, "relay-idle-metrics")]
    worker = Worker(command, engine_env(redis_server, METRICS_ADDR=f"127.0.0.1:{port}"), tmp_path, "worker")
    idle = []
    try:
        worker.wait_for('msg="Relay started"', timeout=300)
        worker.wait_for('msg="Metrics http server listening"')
        idle = open_idle_sockets(port, 300)
        time.sleep(0.5)
        began = time.monotonic()
        families = scrape(port)
        assert time.monotonic() - began < 2   # the bound
        assert "events_received" in families
        redis_client.xadd("events", {"event": json.dumps({"a": 1})})
        worker.wait_for("handled", where="stdout")
        worker.wait_for('msg="Metrics http server at its connection limit; closing the oldest connections waiting '
                        'on a slow client"')
    finally:
        for sock in idle:
            sock.close()
        worker.stop()
        worker.kill()
    assert worker.process.returncode == 0
    assert "Too many open files" not in worker.stderr and "Traceback" not in worker.stderr
