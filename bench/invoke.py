"""A no-op Python invocation through Relay's executor, cold and warm, against
bare docker-py loops running the same image with the same limits.

    .venv/bin/python bench/invoke.py [--invocations 60] [--warm-invocations 600] [--keep-image]

Both run under gevent with the standard library patched, as ``relay start``
does, at concurrency 1 and 4 (greenlets sharing one client), interleaved in
rounds so drift on the machine hits both alike. The bare loop is the least a
correct AutoRemove execution needs: create, attach, a wait registered before
start, start, the event on stdin, drain the output, read the exit code. The
executor adds the rest: labels and env, the hardened host config, output
forwarding, deadlines, error handling, pins and logging.

Warm (issue #19): the executor with ``warm:`` (as many containers as the
concurrency), against a bare warm loop: the same image running a minimal
resident reader (one line in, one line out), one container per greenlet,
driven over its attach socket by hand, one request at a time.

A third warm runner, for reference only, is the protocol's floor: Relay's
warm containers (the resident bootstrap, hardened) driven by a minimal loop
that sends a request and waits for both of its end markers, without
Relay's pool, output forwarding or outcome: what the protocol itself costs
against the bare warm loop.

Prints p50/p95 latency and throughput of each and their ratios. With
``--cpu-split N`` it then runs N more warm invocations of each warm runner at
concurrency 4 (no warm container replaced meanwhile) and prints the CPU time each takes per invocation in this
process, in the engine (dockerd and containerd), in the containers' shims
and in the containers themselves, read from /proc: where the warm figure
goes (the engine's figure includes any other work the engine does meanwhile).
Targets: cold p50 ratio <= 1.10 and throughput at concurrency 4 >= 0.90 of
the bare cold loop (#4); warm p50 <= 0.05 of the bare cold loop's and warm
throughput at concurrency 4 >= 0.70 of the bare warm loop's (#19).
Exits 1 when a target is missed. ``--json PATH`` appends the figures for
bench/run_all.py (see bench/report.py).
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import docker  # noqa: E402
import gevent  # noqa: E402
from gevent.queue import Queue  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import report  # noqa: E402

from relay.durations import SECOND  # noqa: E402
from relay.functions import load_function  # noqa: E402
from relay.functions.runtimes import runtime_for  # noqa: E402
from relay.functions.template import Warm  # noqa: E402
from relay.runtime.containers import USER, host_config  # noqa: E402
from relay.runtime.executor import build_executor  # noqa: E402
from relay.runtime.images import ImageBuilder  # noqa: E402
from relay.runtime.invocation import Invocation  # noqa: E402
from relay.runtime.pins import ImagePins  # noqa: E402
from relay.runtime.warm import MARKER, WarmContainer, request  # noqa: E402

HANDLER = "handler.handler"
PAYLOAD = b'{"event_id":"evt_1","event_name":"INSERT","table_name":"users","new_image":{"id":"user_1"}}'
TEMPLATE = "runtime: python3.14\nevents:\n  - handler: handler.handler\n    pattern:\n      event_name: [INSERT]\n"
# Read by bench/run_all.py without importing this file.
QUICK_ARGS = ["--invocations", "8", "--warm-invocations", "80", "--rounds", "2"]
KEY = "5f0c6a1e9b3d47a2c8e1f0b6d2a94c17"   # an idempotency key, as the dispatcher makes them
CONTEXT = {"RELAY_MESSAGE_ID": "1700000000000-0", "RELAY_EVENT_ID": "evt_1", "RELAY_ATTEMPT": "1",
           "RELAY_DEADLINE": "2026-12-06T10:00:30.000Z", "RELAY_IDEMPOTENCY_KEY": KEY}
RESIDENT_READER = "import sys\nfor line in sys.stdin:\n    sys.stdout.write('ok\\n')\n"


def build_image(client, directory):
    function_dir = Path(directory) / "relay-bench-noop"
    function_dir.mkdir()
    (function_dir / "template.yaml").write_text(TEMPLATE)
    (function_dir / "handler.py").write_text("def handler(event):\n    pass\n")
    return ImageBuilder(client).prepare(load_function(function_dir))


def relay_runner(executor, image, warm=None):
    def run():
        outcome = executor.run(Invocation(function="relay-bench-noop", handler=HANDLER, image=image,
                                          payload=PAYLOAD, timeout=30 * SECOND, env={"API_URL": "http://x"},
                                          message_id="1700000000000-0", event_id="evt_1", event_name="INSERT",
                                          warm=warm, idempotency_key=KEY))
        if not outcome.ok:
            raise SystemExit(f"relay invocation failed: {outcome.error}")

    return run


def read_until(sock, needles, exited):
    """Receive from *sock* until every one of *needles* has arrived; SystemExit(*exited*) if it closes."""
    received = b""
    while not all(needle in received for needle in needles):
        data = sock.recv(65536)
        if not data:
            raise SystemExit(exited)
        received += data


class BareWarm:
    """Resident readers in the image, each answering one line per line, taken one request at a time."""

    def __init__(self, client, image, count):
        api = self.api = client.api
        limits = host_config(api)
        self.containers, self.idle = [], Queue()
        for _ in range(count):
            container = api.create_container(image, stdin_open=True, user=USER, host_config=limits,
                                             entrypoint=["python", "-u", "-c", RESIDENT_READER],
                                             labels={"relay.bench.warm": "1"})["Id"]
            handle = api.attach_socket(container, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            api.start(container)
            self.containers.append((container, handle))
            self.idle.put(handle._sock)

    def run(self):
        sock = self.idle.get()
        try:
            sock.sendall(PAYLOAD + b"\n")
            read_until(sock, [b"ok\n"], "the bare warm reader exited")   # frame headers, then the answer
        finally:
            self.idle.put(sock)

    def close(self):
        for container, handle in self.containers:
            handle.close()
            self.api.remove_container(container, force=True)


class ProtocolFloor:
    """Relay's warm containers driven by hand: request out, both end markers in, nothing else."""

    def __init__(self, client, image, count, hostname):
        self.containers, self.idle = [], Queue()
        for _ in range(count):
            container = WarmContainer(client.api, function="relay-bench-noop", image=image, version=None,
                                      hostname=hostname, output=io.StringIO())
            container.start(command=runtime_for("python3.14").warm_command, env={"API_URL": "http://x"},
                            host_config=host_config(client.api), prefix_parts=("relay-bench-noop",),
                            deadline=time.monotonic() + 30)
            self.containers.append(container)
            self.idle.put([container._sock, 0])

    def run(self):
        state = self.idle.get()
        sock, state[1] = state[0], state[1] + 1
        seq, nonce = str(state[1]).encode(), secrets.token_hex(16).encode()
        try:
            sock.sendall(request(seq, nonce, HANDLER, CONTEXT, PAYLOAD))
            read_until(sock, [MARKER + b"end %s %s\n" % (seq, nonce), MARKER + b"done %s %s ok\n" % (seq, nonce)],
                       "a warm container exited")
        finally:
            self.idle.put(state)

    def close(self):
        for container in self.containers:
            container.remove()


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


_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid):
    """(parent pid, CPU seconds of *pid* and its reaped children), or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), sum(int(value) for value in fields[11:15]) / _TICKS


def _processes():
    """pid -> (parent pid, command name, CPU seconds) of every process on the machine."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            try:
                name = Path(f"/proc/{entry}/comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue
            found[int(entry)] = (stat[0], name, stat[1])
    return found


def _cpu_sample(roots):
    """CPU seconds so far of the engine, of the shims of the containers whose main
    processes are *roots*, and of those containers' processes."""
    processes = _processes()
    children = {}
    for pid, (parent, _, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    tree, stack = 0.0, list(roots)
    while stack:
        pid = stack.pop()
        tree += processes.get(pid, (0, "", 0.0))[2]
        stack += children.get(pid, [])
    shims = {processes[pid][0] for pid in roots if pid in processes}
    return {"engine": sum(cpu for _, name, cpu in processes.values() if name in ("dockerd", "containerd")),
            "shims": sum(processes[pid][2] for pid in shims if pid in processes), "containers": tree}


def cpu_split(client, runs, label_filters, count):
    """CPU microseconds per invocation of each runner, split between this process, the
    engine, the shims and the containers (the runner's, found by their label)."""
    rows = {}
    for name, run in runs.items():
        ids = [container["Id"] for container in client.api.containers(filters={"label": label_filters[name]})]
        roots = {client.api.inspect_container(container)["State"]["Pid"] for container in ids}
        before, mine = _cpu_sample(roots), time.process_time()
        measure(run, count, 4)
        mine, after = time.process_time() - mine, _cpu_sample(roots)
        rows[name] = {"relay": mine, **{key: after[key] - before[key] for key in before}}
    print(f"CPU per invocation at concurrency 4, {count} invocations each (microseconds, /proc at {_TICKS} Hz):")
    print(f"{'runner':>6} {'this process':>12} {'engine':>7} {'shims':>6} {'containers':>10} {'total':>6}")
    for name, row in rows.items():
        per = {key: value / count * 1e6 for key, value in row.items()}
        print(f"{name:>6} {per['relay']:>12.0f} {per['engine']:>7.0f} {per['shims']:>6.0f} {per['containers']:>10.0f} "
              f"{sum(per.values()):>6.0f}")
    return rows


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
    parser.add_argument("--warm-invocations", type=int, default=600,
                        help="per warm runner and concurrency (default 600)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds per measurement (default 4)")
    parser.add_argument("--keep-image", action="store_true", help="leave the benchmark image on the engine")
    parser.add_argument("--cpu-split", type=int, default=0, metavar="N",
                        help="then run N warm invocations of each warm runner and split their CPU time")
    report.add_option(parser)
    options = parser.parse_args()

    client = docker.from_env(max_pool_size=32)
    hostname = f"relay-bench-{os.getpid()}"
    with tempfile.TemporaryDirectory() as directory:
        image = build_image(client, directory)
    # A created, never started container keeps the image from being garbage
    # collected by another Relay on this engine while the benchmark runs.
    pin = client.api.create_container(image, command=["true"], labels={"relay.bench.pin": "1"})["Id"]
    executor = build_executor(client, hostname, io.StringIO(), pins=ImagePins(), warm_capacity=4)
    bare_warm = BareWarm(client, image, 4)
    floor = ProtocolFloor(client, image, 4, f"{hostname}-floor")
    runners = {"relay": relay_runner(executor, image), "bare": bare_runner(client, image),
               "warm": relay_runner(executor, image, Warm(containers=4)), "bwarm": bare_warm.run,
               "pwarm": floor.run}
    counts = {"relay": options.invocations, "bare": options.invocations, "warm": options.warm_invocations,
              "bwarm": options.warm_invocations, "pwarm": options.warm_invocations}
    verdicts = []
    reported = []
    try:
        for run in runners.values():  # warm caches, pooled connections and the warm containers
            measure(run, 4, 4)
        print(f"no-op python invocation of {image}; {options.invocations} per cold runner and "
              f"{options.warm_invocations} per warm runner and concurrency, {options.rounds} interleaved rounds; "
              f"gevent, docker {client.version()['Version']}, {os.cpu_count()} CPUs")
        print(f"{'concurrency':>11} {'runner':>6} {'p50 ms':>8} {'p95 ms':>8} {'per s':>7}")
        for concurrency in (1, 4):
            results = {name: ([], 0.0) for name in runners}
            for _ in range(options.rounds):
                for name, run in runners.items():
                    latencies, wall = measure(run, max(1, counts[name] // options.rounds), concurrency)
                    results[name] = (results[name][0] + latencies, results[name][1] + wall)
            figures = {}
            for name, (latencies, wall) in results.items():
                figures[name] = (statistics.median(latencies), percentile(latencies, 0.95), len(latencies) / wall)
                p50, p95, rate = figures[name]
                print(f"{concurrency:>11} {name:>6} {p50 * 1000:>8.1f} {p95 * 1000:>8.2f} {rate:>7.2f}")
            relay, bare, warm, bwarm, pwarm = (figures[name] for name in ("relay", "bare", "warm", "bwarm", "pwarm"))
            ratios = tuple(relay[index] / bare[index] for index in range(3))
            print(f"{concurrency:>11} {'ratio':>6} {ratios[0]:>8.3f} {ratios[1]:>8.3f} {ratios[2]:>7.3f}")
            warm_p50 = warm[0] / bare[0]
            warm_rate = warm[2] / bwarm[2]
            print(f"{concurrency:>11} {'warm':>6} p50 {warm_p50:.4f} of the bare cold loop's; "
                  f"throughput {warm_rate:.3f} of the bare warm loop's, {warm[2] / relay[2]:.1f}x Relay cold")
            print(f"{concurrency:>11} {'floor':>6} the protocol driven by hand: throughput {pwarm[2] / bwarm[2]:.3f} "
                  f"of the bare warm loop's; Relay warm {warm[2] / pwarm[2]:.3f} of it")
            verdicts.append((f"p50 ratio at concurrency {concurrency} <= 1.10", ratios[0] <= 1.10))
            verdicts.append((f"warm p50 at concurrency {concurrency} <= 0.05 of the bare cold loop's",
                             warm_p50 <= 0.05))
            if concurrency == 4:
                verdicts.append(("throughput ratio at concurrency 4 >= 0.90", ratios[2] >= 0.90))
                verdicts.append(("warm throughput at concurrency 4 >= 0.70 of the bare warm loop's",
                                 warm_rate >= 0.70))
            reported.extend(results_of(concurrency, relay, bare, ratios))
            reported.extend(warm_results_of(concurrency, warm, bare, bwarm))
            reported.append(report.Result("invoke.py", f"warm protocol driven by hand, throughput, concurrency "
                                          f"{concurrency}", pwarm[2], "invocations/s", bwarm[2], "bare warm loop",
                                          pwarm[2] / bwarm[2]))
        for text, passed in verdicts:
            print(f"target {text}: {'met' if passed else 'MISSED'}")
        if options.cpu_split:
            steady = relay_runner(executor, image, Warm(containers=4, max_invocations=10**9))  # none replaced
            cpu_split(client, {"warm": steady, "pwarm": floor.run, "bwarm": runners["bwarm"]},
                      {"warm": f"relay.hostname={hostname}", "pwarm": f"relay.hostname={hostname}-floor",
                       "bwarm": "relay.bench.warm=1"}, options.cpu_split)
        report.write(options.json, reported)
    finally:
        executor.warm.close()
        bare_warm.close()
        floor.close()
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


def warm_results_of(concurrency, warm, bare, bwarm):
    """The warm figures at *concurrency*, with issue #19's targets."""
    def result(figure, value, unit, baseline, baseline_name, target="", met=None):
        return report.Result("invoke.py", f"warm {figure}, concurrency {concurrency}", value, unit, baseline,
                             baseline_name, value / baseline, target, met)

    p50 = warm[0] / bare[0]
    results = [result("p50 latency", warm[0] * 1000, "ms", bare[0] * 1000, "bare cold docker-py loop",
                      "ratio <= 0.05 (#19)", p50 <= 0.05),
               result("p95 latency", warm[1] * 1000, "ms", bwarm[1] * 1000, "bare warm loop")]
    rate = warm[2] / bwarm[2]
    if concurrency == 4:
        results.append(result("throughput", warm[2], "invocations/s", bwarm[2], "bare warm loop",
                              "ratio >= 0.70 (#19)", rate >= 0.70))
    else:
        results.append(result("throughput", warm[2], "invocations/s", bwarm[2], "bare warm loop"))
    return results


if __name__ == "__main__":
    sys.exit(main())
