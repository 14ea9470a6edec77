"""A no-op Python invocation through Relay's executor, against a bare docker-py
loop running the same image with the same limits.

    .venv/bin/python bench/invoke.py [--invocations 60] [--keep-image]

Both run under gevent with the standard library patched, as ``relay start``
does, at concurrency 1 and 4 (greenlets sharing one client), interleaved in
rounds so drift on the machine hits both alike. The bare loop is the least a
correct AutoRemove execution needs: create, attach, a wait registered before
start, start, the event on stdin, drain the output, read the exit code. The
executor adds the rest: labels and env, the hardened host config, output
forwarding, deadlines, error handling, leases and logging.

Prints p50/p95 latency and throughput of both and their ratios.
Targets: p50 ratio <= 1.10; throughput at concurrency 4 >= 0.90 of the bare loop.
Exits 1 when a target is missed. ``--json PATH`` appends the figures for
bench/run_all.py (see bench/report.py).
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import docker  # noqa: E402
import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import report  # noqa: E402

from relay.durations import SECOND  # noqa: E402
from relay.functions import load_function  # noqa: E402
from relay.runtime.containers import USER, host_config  # noqa: E402
from relay.runtime.executor import Executor  # noqa: E402
from relay.runtime.images import ImageBuilder  # noqa: E402
from relay.runtime.invocation import Invocation  # noqa: E402
from relay.runtime.leases import ImageLeases  # noqa: E402

HANDLER = "handler.handler"
PAYLOAD = b'{"event_id":"evt_1","event_name":"INSERT","table_name":"users","new_image":{"id":"user_1"}}'
TEMPLATE = "runtime: python3.14\nevents:\n  - handler: handler.handler\n    pattern:\n      event_name: [INSERT]\n"
# Read by bench/run_all.py without importing this file.
QUICK_ARGS = ["--invocations", "8", "--rounds", "2"]


def build_image(client, directory):
    function_dir = Path(directory) / "relay-bench-noop"
    function_dir.mkdir()
    (function_dir / "template.yaml").write_text(TEMPLATE)
    (function_dir / "handler.py").write_text("def handler(event):\n    pass\n")
    return ImageBuilder(client).prepare(load_function(function_dir))


def relay_runner(client, image, hostname):
    executor = Executor(client, hostname, io.StringIO(), leases=ImageLeases())

    def run():
        outcome = executor.run(Invocation(function="relay-bench-noop", handler=HANDLER, image=image,
                                          payload=PAYLOAD, timeout=30 * SECOND, env={"API_URL": "http://x"},
                                          message_id="1700000000000-0", event_id="evt_1", event_name="INSERT"))
        if not outcome.ok:
            raise SystemExit(f"relay invocation failed: {outcome.error}")

    return run


def bare_runner(client, image):
    api = client.api
    limits = host_config(api)

    def run():
        container = api.create_container(image, stdin_open=True, user=USER, host_config=limits,
                                         environment={"RELAY_HANDLER": HANDLER})["Id"]
        handle = api.attach_socket(container, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        sock = handle._sock
        wait = api._post(api._url("/containers/{0}/wait", container), params={"condition": "removed"}, stream=True)
        api.start(container)
        sock.sendall(PAYLOAD)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
        status = wait.json()["StatusCode"]
        for closable in (handle, sock, wait):
            closable.close()
        if status != 0:
            raise SystemExit(f"bare invocation exited with {status}")

    return run


def measure(run, count, concurrency):
    """Latencies (seconds) of *count* runs, *concurrency* at a time, and the wall time."""
    latencies = []
    remaining = [count]

    def worker():
        while remaining[0] > 0:
            remaining[0] -= 1
            started = time.perf_counter()
            run()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    gevent.joinall([gevent.spawn(worker) for _ in range(concurrency)], raise_error=True)
    return latencies, time.perf_counter() - started


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=60, help="per runner and concurrency (default 60)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds per measurement (default 4)")
    parser.add_argument("--keep-image", action="store_true", help="leave the benchmark image on the engine")
    report.add_option(parser)
    options = parser.parse_args()

    client = docker.from_env(max_pool_size=32)
    hostname = f"relay-bench-{os.getpid()}"
    with tempfile.TemporaryDirectory() as directory:
        image = build_image(client, directory)
    # A created, never started container keeps the image from being garbage
    # collected by another Relay on this engine while the benchmark runs.
    pin = client.api.create_container(image, command=["true"], labels={"relay.bench.pin": "1"})["Id"]
    runners = {"relay": relay_runner(client, image, hostname), "bare": bare_runner(client, image)}
    verdicts = []
    reported = []
    try:
        for run in runners.values():  # warm caches and pooled connections
            measure(run, 3, 1)
        print(f"no-op python invocation of {image}; {options.invocations} per runner and concurrency, "
              f"{options.rounds} interleaved rounds; gevent, docker {client.version()['Version']}, "
              f"{os.cpu_count()} CPUs")
        print(f"{'concurrency':>11} {'runner':>6} {'p50 ms':>8} {'p95 ms':>8} {'per s':>7}")
        for concurrency in (1, 4):
            results = {name: ([], 0.0) for name in runners}
            per_round = max(1, options.invocations // options.rounds)
            for _ in range(options.rounds):
                for name, run in runners.items():
                    latencies, wall = measure(run, per_round, concurrency)
                    results[name] = (results[name][0] + latencies, results[name][1] + wall)
            figures = {}
            for name, (latencies, wall) in results.items():
                figures[name] = (statistics.median(latencies), percentile(latencies, 0.95), len(latencies) / wall)
                p50, p95, rate = figures[name]
                print(f"{concurrency:>11} {name:>6} {p50 * 1000:>8.1f} {p95 * 1000:>8.1f} {rate:>7.2f}")
            relay, bare = figures["relay"], figures["bare"]
            ratios = (relay[0] / bare[0], relay[1] / bare[1], relay[2] / bare[2])
            print(f"{concurrency:>11} {'ratio':>6} {ratios[0]:>8.3f} {ratios[1]:>8.3f} {ratios[2]:>7.3f}")
            verdicts.append((f"p50 ratio at concurrency {concurrency} <= 1.10", ratios[0] <= 1.10))
            if concurrency == 4:
                verdicts.append(("throughput ratio at concurrency 4 >= 0.90", ratios[2] >= 0.90))
            reported.extend(results_of(concurrency, relay, bare, ratios))
        for text, passed in verdicts:
            print(f"target {text}: {'met' if passed else 'MISSED'}")
        report.write(options.json, reported)
    finally:
        client.api.remove_container(pin, force=True)
        leftovers = client.api.containers(all=True, filters={"label": f"relay.hostname={hostname}"})
        if leftovers:
            print(f"warning: {len(leftovers)} execution containers were left behind", file=sys.stderr)
        if not options.keep_image:
            client.api.remove_image(image, force=True)
    return 0 if verdicts and all(passed for _, passed in verdicts) else 1


def results_of(concurrency, relay, bare, ratios):
    """Every figure at *concurrency*, with issue #4's targets where it sets one."""
    def result(figure, index, unit, target="", met=None):
        scale = 1000 if unit == "ms" else 1
        return report.Result("invoke.py", f"{figure}, concurrency {concurrency}", relay[index] * scale, unit,
                             bare[index] * scale, "bare docker-py loop", ratios[index], target, met)

    results = [result("p50 latency", 0, "ms", "ratio <= 1.10 (#4)", ratios[0] <= 1.10), result("p95 latency", 1, "ms")]
    if concurrency == 4:
        results.append(result("throughput", 2, "invocations/s", "ratio >= 0.90 (#4)", ratios[2] >= 0.90))
    else:
        results.append(result("throughput", 2, "invocations/s"))
    return results


if __name__ == "__main__":
    sys.exit(main())
