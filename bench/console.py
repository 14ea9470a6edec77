"""How fast the console's pages answer with 100,000 run records, against the same pages with 1,000.

    .venv/bin/python bench/console.py [--records 100000] [--baseline 1000] [--rounds 5]

Fills two streams' run ledgers (``relay:<stream>:runs``) with records of the
last hour, as the workers write them (relay.runs.record.Run, ~450 bytes
each, 20 functions, one in seven failed), starts ``relay console`` on each
(loopback, reading needs no login), and times each page's GET, the median
of ``--rounds`` after one to warm up: the full ledger against the small one.
The console's reads are bounded (a page of the ledger's filter, the charts'
capped read), so the ratio says how much a full ledger costs a page.
Target (#33): every page under 200 ms with the full ledger.

It starts its own redis-server on a free port; no Docker.
``--json PATH`` appends the figures for bench/run_all.py (see bench/report.py).
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import report  # noqa: E402
from _redis import start_redis  # noqa: E402

from relay.runs.record import Run, RunStatus, Settled  # noqa: E402
from relay.stream.keys import runs_stream  # noqa: E402

QUICK_ARGS = ["--records", "20000", "--rounds", "3"]
PAGES = ("/runs", "/runs?function=fn3&outcome=failed", "/runs?function=nothing-matches", "/functions", "/fleet",
         "/dead-letters")
TARGET_MS = 200


def fill(client, stream, count):
    now = int(time.time() * 1000)
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        started = now - 3_500_000 + n * 3_400_000 // count
        pipe.xadd(runs_stream(stream), Run(
            entry=f"{started}-0", function=f"fn{n % 20}", handler="app.handler", rule=f"fn{n % 20}/app.handler",
            attempt=1, host="worker-a", pid=1, mode="warm", started_ms=started, duration_ms=10.0 + n % 50,
            status=RunStatus.FAILED if n % 7 == 0 else RunStatus.SUCCEEDED, exit_code=1 if n % 7 == 0 else 0,
            stdout="x" * 120, stderr="y" * 120 if n % 7 == 0 else "", settled=Settled.ACKNOWLEDGED).fields())
        if n % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def serve(port, redis_port, stream):
    env = {**os.environ, "REDIS_URI": f"127.0.0.1:{redis_port}", "REDIS_STREAM": stream, "REDIS_GROUP": "relay"}
    process = subprocess.Popen([sys.executable, "-m", "relay", "console", f"--addr=127.0.0.1:{port}",
                                "--env-file=/dev/null"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    for _ in range(400):
        if process.poll() is not None:
            sys.exit(f"relay console exited: {process.stderr.read().decode()}")
        try:
            requests.get(base + "/assets/console.css", timeout=1)
            return process, base
        except requests.ConnectionError:
            time.sleep(0.05)
    process.terminate()
    sys.exit("relay console did not listen")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timed(session, url, rounds):
    session.get(url, timeout=30)   # warm: its scripts are loaded once
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        answer = session.get(url, timeout=30)
        times.append((time.perf_counter() - began) * 1000)
        if answer.status_code != 200:
            sys.exit(f"{url} answered {answer.status_code}")
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="run records in the full ledger")
    parser.add_argument("--baseline", type=int, default=1_000, help="run records in the small ledger")
    parser.add_argument("--rounds", type=int, default=5, help="timed GETs of each page (the median is kept)")
    report.add_option(parser)
    options = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as directory:
        redis_process, client = start_redis(directory)
        servers = []
        try:
            fill(client, "full", options.records)
            fill(client, "small", options.baseline)
            redis_port = client.connection_pool.connection_kwargs["port"]
            servers = [serve(free_port(), redis_port, stream) for stream in ("full", "small")]
            (full_process, full), (small_process, small) = servers
            session = requests.Session()
            print(f"console pages, median of {options.rounds} GETs: {options.records:,} run records against "
                  f"{options.baseline:,}")
            for page in PAGES:
                slow, fast = timed(session, full + page, options.rounds), timed(session, small + page, options.rounds)
                met = slow < TARGET_MS
                print(f"{page:<38}{slow:>8.1f} ms  {fast:>8.1f} ms  ratio {slow / fast:.2f}"
                      f"{'' if met else '  (over the target)'}")
                results.append(report.Result("console.py", f"`{page}`, {options.records:,} run records", slow, "ms",
                                             fast, f"the same page, {options.baseline:,} records",
                                             report.ratio(slow, fast), f"< {TARGET_MS} ms (#33)", met))
            report.write(options.json, results)
        finally:
            for process, _base in servers:
                process.terminate()
                process.wait()
            redis_process.terminate()
            redis_process.wait()


if __name__ == "__main__":
    main()
