"""Stream throughput of Relay's consumer against minimal baselines, in one run.

    .venv/bin/python bench/throughput.py [--entries 20000] [--matched 40] [--warm 2000] [--rounds 4]

1. Entries that match no rule: Relay's read loop (Consumer.read_once:
   XREADGROUP, decode, match against the example functions, XACK pipelined
   with the next read), on a client built as ``relay start`` builds its own,
   next to a minimal redis-py XREADGROUP + XACK loop on
   the same server, same client (hiredis when this interpreter has it, as
   Relay does), same batch size (16, the default MAX_BUFFERED_EVENTS).
   Targets: ratio >= 0.9 (#19) and >= 5,000 entries/s. A third loop, the
   minimal one with its XACK pipelined the same way, is printed for
   reference: Relay's rate against it is what its own work costs.
2. Entries that match a no-op Python handler at MAX_CONCURRENCY 4, with the
   function's own ``concurrency: 4`` (the default of 2 would cap it at two
   containers): Relay's whole path (dispatch, invocation state, container,
   ack) next to the bare docker-py container loop of bench/invoke.py at
   concurrency 4. Target >= 0.9.
3. Entries that match a no-op Python handler at MAX_CONCURRENCY 8 and
   ``concurrency: 8``, warm (``warm: {containers: 8}``) against the same
   function cold, both through Relay's whole path (issue #19). Target: warm
   >= 25 times the cold entries/s; the warm figure is in the table too.

Each path runs baseline and Relay in ``--rounds`` alternating rounds (ABBA:
the baseline first in even rounds, Relay first in odd ones) over the same
amount of work, and reads the rates over all rounds. Run one after the other,
the side that ran second took the drift: the Docker engine slows by a tenth
or more over a few hundred containers here, and one run saw the unmatched
ratio at 1.19 and a later one at 0.67. Per-round ratios are printed too.

It starts its own redis-server on a free port and uses the local Docker engine.
``--json PATH`` appends the figures for bench/run_all.py (see bench/report.py).
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import report  # noqa: E402
from _redis import start_redis  # noqa: E402

from relay.functions import load_function  # noqa: E402
from relay.live.catalog import Catalog  # noqa: E402
from relay.metrics.prometheus import Metrics  # noqa: E402
from relay.runs.ledger import RunLedger  # noqa: E402
from relay.runtime.pins import ImagePins  # noqa: E402
from relay.stream.group import ensure_group  # noqa: E402
from relay.stream.keys import StreamAddress  # noqa: E402
from relay.wiring import build_engine  # noqa: E402

STREAM = "bench"
BATCH = 16
CONCURRENCY = 4     # MAX_CONCURRENCY, the function's concurrency and the bare loop's
# Read by bench/run_all.py without importing this file.
QUICK_ARGS = ["--entries", "2000", "--matched", "8", "--warm", "400", "--rounds", "2"]
WARM_CONCURRENCY = 8  # MAX_CONCURRENCY, the function's concurrency and its warm containers
UNMATCHED = json.dumps({"event_id": "evt", "event_name": "INSERT", "table_name": "orders",
                        "new_image": {"id": "order_1", "total": 42, "note": "x" * 600}})


def fill(client, count):
    client.delete(STREAM)
    pipe = client.pipeline(transaction=False)
    for number in range(count):
        pipe.xadd(STREAM, {"event": UNMATCHED})
        if number % 1000 == 999:
            pipe.execute()
    pipe.execute()


def baseline_reader(client, group="baseline"):
    """The least a consumer can do: read a batch, acknowledge it. Returns read(count) -> seconds."""
    client.xgroup_create(STREAM, group, id="0")

    def read(count):
        began = time.perf_counter()
        done = 0
        while done < count:
            response = client.xreadgroup(group, "bench", {STREAM: ">"}, count=min(BATCH, count - done),
                                         block=1000)
            ids = [entry_id for _stream, entries in response for entry_id, _fields in entries]
            client.xack(STREAM, group, *ids)
            done += len(ids)
        return time.perf_counter() - began

    return read


def pipelined_reader(client, group="pipelined"):
    """The least a consumer can do in one round trip a batch: each batch's XACK goes in a
    pipeline ahead of the next XREADGROUP, as Relay's read loop sends it. A reference for
    how much of Relay's rate is the round trip it saves; no target is set on it."""
    client.xgroup_create(STREAM, group, id="0")

    def read(count):
        began = time.perf_counter()
        done, ids = 0, []
        while done < count:
            wanted = min(BATCH, count - done)
            if ids:
                pipe = client.pipeline(transaction=False)
                pipe.xack(STREAM, group, *ids)
                pipe.xreadgroup(group, "bench", {STREAM: ">"}, count=wanted)
                response = pipe.execute()[1]
            else:
                response = client.xreadgroup(group, "bench", {STREAM: ">"}, count=wanted, block=1000)
            ids = [entry_id for _stream, entries in response or () for entry_id, _fields in entries]
            done += len(ids)
        client.xack(STREAM, group, *ids)
        return time.perf_counter() - began

    return read


def relay_reader(client):
    """Relay's read loop over the same entries (Consumer.read_once, which pipelines each
    batch's XACK ahead of the next read), with the example functions loaded. Returns
    read(count) -> seconds, and checks that every entry it read was acknowledged."""
    from relay.functions import ActiveFunction

    metrics = Metrics()
    catalog = Catalog()
    catalog.replace(ActiveFunction(load_function(path), image="unused:0")
                    for path in sorted((ROOT / "examples" / "functions").iterdir()))
    ensure_group(client, STREAM, "relay")
    # No entry here matches: the dispatcher and its executor are never called.
    consumer = build_engine(client, StreamAddress(STREAM, "relay", "bench"), catalog=catalog, executor=None,
                            environment=None, pins=ImagePins(), metrics=metrics, max_concurrency=CONCURRENCY,
                            max_buffered_events=BATCH, block_ms=1000).consumer
    total = [0]

    def read(count):
        began = time.perf_counter()
        done = 0
        while done < count:
            done += consumer.read_once(limit=count - done)
        consumer.flush_acks()      # the round's last batch: acknowledged before the clock stops
        elapsed = time.perf_counter() - began
        total[0] += done
        assert metrics.events_processed._value.get() == total[0], "every entry must be acknowledged"
        return elapsed

    return read


def relay_client(client):
    """A client of *client*'s server built as ``relay start`` builds its own (relay.clients.connect_redis:
    its timeouts, health checks and retry policy), so the figure includes what they cost."""
    from relay.clients import connect_redis
    from relay.config import RedisSettings

    return connect_redis(RedisSettings(host="127.0.0.1", port=client.connection_pool.connection_kwargs["port"]))


def alternate(*sides, rounds):
    """Time each of *sides* (calls returning seconds for the same work) *rounds* times, in
    the given order in even rounds and in reverse in odd ones (ABBA), so no side always runs
    last. Returns (total seconds per side, per-round ratios of the last side's rate to the first's).
    """
    totals = [0.0] * len(sides)
    ratios = []
    for number in range(rounds):
        order = range(len(sides)) if number % 2 == 0 else reversed(range(len(sides)))
        seconds = {index: sides[index]() for index in order}
        for index, spent in seconds.items():
            totals[index] += spent
        ratios.append(seconds[0] / seconds[len(sides) - 1])
    return totals, ratios


def client_stack():
    """The redis-py reply parser both sides use: the one Relay gets in this interpreter."""
    from relay.speedups import in_use

    used = in_use()
    return f"{used['redis_parser']} (JSON: {used['json_decoder']})"


def matched_loop(client, docker_client, image, count, concurrency, warm=None, executor=None, ledger=True):
    """Relay's whole path for *count* entries that each match one no-op handler; returns seconds.

    With *warm* (a Warm), the function runs warm at *concurrency*, on *executor* (kept between
    rounds, so its containers are started once). *ledger* False leaves the run ledger out,
    as Relay was before issue #32."""
    import io
    from dataclasses import replace

    from relay.functions import ActiveFunction
    from relay.runtime.executor import build_executor

    function = load_function(Path(image.directory))
    if warm is not None:
        function = replace(function, template=replace(function.template, concurrency=concurrency, warm=warm))
    executor = executor or build_executor(docker_client, f"relay-bench-{os.getpid()}", io.StringIO())
    metrics = Metrics()
    catalog = Catalog([ActiveFunction(function, image=image.tag)])
    client.delete(STREAM)
    for number in range(count):
        client.xadd(STREAM, {"event": json.dumps({"event_name": "INSERT", "n": number})})
    ensure_group(client, STREAM, "matched")
    runs = RunLedger(client, STREAM, host="bench", pid=os.getpid()) if ledger else None
    consumer = build_engine(client, StreamAddress(STREAM, "matched", "bench"), catalog=catalog,
                            executor=executor,
                            environment=lambda fn: dict(fn.template.env), pins=ImagePins(), metrics=metrics,
                            max_concurrency=concurrency, max_buffered_events=BATCH, block_ms=200,
                            ledger=runs).consumer
    began = time.perf_counter()
    reader = gevent.spawn(consumer.read_loop)
    while metrics.events_processed._value.get() < count:
        gevent.sleep(0.02)
    elapsed = time.perf_counter() - began
    consumer.stop()
    reader.join()
    return elapsed


def bare_containers(docker_client, image, count, concurrency):
    """bench/invoke.py's bare docker-py loop, *concurrency* at a time; returns seconds."""
    sys.path.insert(0, str(ROOT / "bench"))
    from invoke import bare_runner, measure

    _latencies, wall = measure(bare_runner(docker_client, image.tag), count, concurrency)
    return wall


class NoopImage:
    def __init__(self, docker_client, directory):
        sys.path.insert(0, str(ROOT / "bench"))
        from invoke import TEMPLATE

        from relay.runtime.images import ImageBuilder

        self.directory = Path(directory) / "relay-bench-noop"
        self.directory.mkdir()
        (self.directory / "template.yaml").write_text(f"concurrency: {CONCURRENCY}\n{TEMPLATE}")
        (self.directory / "handler.py").write_text("def handler(event):\n    pass\n")
        self.tag = ImageBuilder(docker_client).prepare(load_function(self.directory))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20000, help="entries for the unmatched path, in all")
    parser.add_argument("--matched", type=int, default=40, help="entries per round for the matched path")
    parser.add_argument("--warm", type=int, default=2000, help="entries per round for the warm path (0: skip it)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds of each path (ABBA order)")
    report.add_option(parser)
    options = parser.parse_args()
    if options.rounds < 1 or options.entries < options.rounds:
        parser.error("--rounds must be at least 1 and at most --entries")
    results = []
    with tempfile.TemporaryDirectory() as directory:
        process, client = start_redis(directory)
        try:
            fill(client, options.entries)
            chunk = options.entries // options.rounds
            stack = client_stack()
            read_baseline, read_pipelined, read_relay = (baseline_reader(client), pipelined_reader(client),
                                                         relay_reader(relay_client(client)))
            (bare_seconds, pipelined_seconds, relay_seconds), ratios = alternate(
                lambda: read_baseline(chunk), lambda: read_pipelined(chunk), lambda: read_relay(chunk),
                rounds=options.rounds)
            entries = chunk * options.rounds
            bare, pipelined, ours = entries / bare_seconds, entries / pipelined_seconds, entries / relay_seconds
            print(f"entries matching no rule, {options.rounds} rounds of {chunk} entries of {len(UNMATCHED)} bytes, "
                  f"batch {BATCH}; both sides on {stack}")
            print(f"{'minimal XREADGROUP+XACK':<26}{bare:>10,.0f} entries/s")
            print(f"{'the same, XACK pipelined':<26}{pipelined:>10,.0f} entries/s  (one round trip a batch)")
            print(f"{'Relay consumer':<26}{ours:>10,.0f} entries/s")
            print(f"ratio Relay/minimal: {ours / bare:.2f}  (targets >= 0.9, >= 5,000 entries/s; per round "
                  f"{_listed(ratios)}); Relay/pipelined: {ours / pipelined:.2f}")
            figure = "entries matching no rule"
            baseline = f"XREADGROUP+XACK loop, {stack}"
            results += [report.Result("throughput.py", figure, ours, "entries/s", bare, baseline,
                                      ours / bare, "ratio >= 0.9 (#19)", ours / bare >= 0.9),
                        report.Result("throughput.py", figure, ours, "entries/s", bare, baseline,
                                      ours / bare, ">= 5,000 entries/s (#5)", ours >= 5000),
                        report.Result("throughput.py", figure, ours, "entries/s", pipelined,
                                      "the same loop, XACK pipelined with the next read", ours / pipelined)]
            if options.matched:
                import docker

                docker_client = docker.from_env(max_pool_size=32)
                image = NoopImage(docker_client, directory)
                bare_containers(docker_client, image, CONCURRENCY, CONCURRENCY)    # warm up both sides
                matched_loop(client, docker_client, image, CONCURRENCY, CONCURRENCY)
                (bare_seconds, relay_seconds), ratios = alternate(
                    lambda: bare_containers(docker_client, image, options.matched, CONCURRENCY),
                    lambda: matched_loop(client, docker_client, image, options.matched, CONCURRENCY),
                    rounds=options.rounds)
                entries = options.matched * options.rounds
                bare_rate, relay_rate = entries / bare_seconds, entries / relay_seconds
                ratio = relay_rate / bare_rate
                print(f"entries matching a no-op python handler, {options.rounds} rounds of {options.matched}, "
                      f"concurrency {CONCURRENCY}")
                print(f"{'bare container loop':<26}{bare_rate:>10.2f} entries/s")
                print(f"{'Relay, end to end':<26}{relay_rate:>10.2f} entries/s")
                print(f"ratio Relay/bare: {ratio:.2f}  (target >= 0.9; per round {_listed(ratios)})")
                figure = f"entries matching a no-op handler, concurrency {CONCURRENCY}"
                results.append(report.Result("throughput.py", figure, relay_rate, "entries/s", bare_rate,
                                             "bare docker-py loop", ratio, "ratio >= 0.9 (#5)", ratio >= 0.9))
                if options.warm:
                    results += warm_path(client, docker_client, image, options)
                docker_client.api.remove_image(image.tag, force=True)
            report.write(options.json, results)
        finally:
            process.terminate()
            process.wait()


def warm_path(client, docker_client, image, options):
    """Warm against cold, both end to end at MAX_CONCURRENCY and concurrency WARM_CONCURRENCY."""
    import io

    from relay.functions.template import Warm
    from relay.runtime.executor import build_executor

    warm = Warm(containers=WARM_CONCURRENCY)
    executor = build_executor(docker_client, f"relay-bench-{os.getpid()}", io.StringIO(),
                              warm_capacity=WARM_CONCURRENCY)
    try:
        matched_loop(client, docker_client, image, WARM_CONCURRENCY, WARM_CONCURRENCY, warm, executor)  # start them
        (cold_seconds, warm_seconds), ratios = alternate(
            lambda: matched_loop(client, docker_client, image, options.matched, WARM_CONCURRENCY) *
            options.warm / options.matched,
            lambda: matched_loop(client, docker_client, image, options.warm, WARM_CONCURRENCY, warm, executor),
            rounds=options.rounds)
    finally:
        executor.warm.close()
    entries = options.warm * options.rounds
    cold_rate, warm_rate = entries / cold_seconds, entries / warm_seconds
    ratio = warm_rate / cold_rate
    print(f"entries matching a no-op python handler at concurrency {WARM_CONCURRENCY}, warm ({options.rounds} rounds "
          f"of {options.warm}) and cold ({options.matched} a round)")
    print(f"{'Relay, cold':<26}{cold_rate:>10.2f} entries/s")
    print(f"{'Relay, warm':<26}{warm_rate:>10.2f} entries/s")
    print(f"ratio warm/cold: {ratio:.1f}  (target >= 25; per round {_listed(ratios)})")
    figure = f"entries matching a warm no-op handler, concurrency {WARM_CONCURRENCY}"
    results = [report.Result("throughput.py", figure, warm_rate, "entries/s", cold_rate, "the same function cold",
                             ratio, "ratio >= 25 (#19)", ratio >= 25)]
    return results + ledger_cost(client, docker_client, image, options, warm)


def ledger_cost(client, docker_client, image, options, warm):
    """The run ledger's cost on the warm path (#32): warm end to end with it, as ``relay start`` runs, and
    without it, as Relay ran before, alternated on the same warm containers. Besides the rates, the
    worker's own CPU time per entry (this process: the engine, the executor, redis-py), which other
    work on the machine disturbs far less than the wall clock."""
    import io

    from relay.runtime.executor import build_executor

    executor = build_executor(docker_client, f"relay-bench-{os.getpid()}", io.StringIO(),
                              warm_capacity=WARM_CONCURRENCY)
    cpu = {False: 0.0, True: 0.0}

    def run(ledger):
        began = time.process_time()
        seconds = matched_loop(client, docker_client, image, options.warm, WARM_CONCURRENCY, warm, executor,
                               ledger=ledger)
        cpu[ledger] += time.process_time() - began
        return seconds

    try:
        matched_loop(client, docker_client, image, WARM_CONCURRENCY, WARM_CONCURRENCY, warm, executor)
        (without_seconds, with_seconds), ratios = alternate(lambda: run(False), lambda: run(True),
                                                            rounds=options.rounds)
    finally:
        executor.warm.close()
    entries = options.warm * options.rounds
    without, with_ledger = entries / without_seconds, entries / with_seconds
    ratio = with_ledger / without
    cpu_without, cpu_with = cpu[False] / entries * 1e6, cpu[True] / entries * 1e6
    print(f"the run ledger on the warm path, {options.rounds} rounds of {options.warm}")
    print(f"{'Relay, warm, no ledger':<26}{without:>10.2f} entries/s  {cpu_without:>6.0f} µs of worker CPU an entry")
    print(f"{'Relay, warm, ledger':<26}{with_ledger:>10.2f} entries/s  {cpu_with:>6.0f} µs of worker CPU an entry")
    print(f"ratio ledger/no ledger: {ratio:.3f}  (target >= 0.95; per round {_listed(ratios)}); "
          f"CPU an entry {cpu_with / cpu_without:.3f} of the one without")
    figure = f"entries matching a warm no-op handler, concurrency {WARM_CONCURRENCY}, with the run ledger"
    return [report.Result("throughput.py", figure, with_ledger, "entries/s", without,
                          "the same without the run ledger", ratio, "ratio >= 0.95 (#32)", ratio >= 0.95),
            report.Result("throughput.py", "worker CPU an entry, warm, with the run ledger", cpu_with, "µs",
                          cpu_without, "the same without the run ledger", cpu_with / cpu_without)]


def _listed(ratios):
    return ", ".join(f"{ratio:.2f}" for ratio in ratios)


if __name__ == "__main__":
    main()
