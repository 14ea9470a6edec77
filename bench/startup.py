"""Warm start time of relay.pyz against ``python -m relay`` from .venv.

    .venv/bin/python bench/startup.py [--pyz relay.pyz] [--runs 21]

Runs ``secret ls``, ``function ls``, ``stats`` and ``health`` both ways,
interleaved, against a redis-server it starts on a free port and the local
Docker engine, after one untimed run that warms relay.pyz's extraction
cache. Prints the median wall time of each and the ratio pyz / venv.
Targets: ratio <= 1.15, ``secret ls`` from relay.pyz under 150 ms, and the
three admin commands under 200 ms (DESIGN.md: "well under" it).

``function ls`` and ``stats`` read the state database at its fixed path,
/var/lib/relay/db.sqlite3: the bench writes one for the example functions
(with counters) in a temporary directory and bind-mounts it there in a
private mount namespace, so each of their runs includes ``unshare`` and a
``mount`` (a few ms, both ways alike). A command that exits non-zero stops
the bench: a failing command is never timed as if it had run.

Both ways run on the same interpreter binary (the venv's), so the ratio is
the cost of the packaging alone: ``./relay.pyz`` goes through whatever
``python3`` is first on PATH, and a pyenv shim there adds ~150 ms of its own.

``--fresh-pyz`` builds relay.pyz from the current tree into a temporary
directory and times that instead (bench/run_all.py passes it, so a stale
./relay.pyz is never measured); ``--json PATH`` appends the figures for
bench/run_all.py (see bench/report.py).
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import report

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (("secret", "ls"), ("function", "ls"), ("stats",), ("health",))
READS_STATE = {("function", "ls"), ("stats",)}
ADMIN = {"secret ls", "function ls", "stats"}
STATE_DIR = "/var/lib/relay"   # relay.config.STATE_DIR, fixed
# Read by bench/run_all.py without importing this file.
RUN_ALL_ARGS = ["--fresh-pyz"]
QUICK_ARGS = ["--runs", "5"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyz", default=str(ROOT / "relay.pyz"), help="the relay.pyz to time (built if missing)")
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"), help="the venv interpreter")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--fresh-pyz", action="store_true",
                        help="build relay.pyz from the current tree into a temporary directory and time that")
    report.add_option(parser)
    options = parser.parse_args()

    with tempfile.TemporaryDirectory() as build:
        pyz = Path(build) / "relay.pyz" if options.fresh_pyz else Path(options.pyz)
        if options.fresh_pyz or not pyz.exists():
            subprocess.run([sys.executable, str(ROOT / "build_zipapp.py"), "-o", str(pyz)], check=True)
        report.write(options.json, measure(options, pyz))


def measure(options, pyz):
    results = []
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as state, \
            redis_server() as address:
        write_state(Path(state))
        env = {**os.environ, "RELAY_PYZ_CACHE": cache, "REDIS_URI": address}
        ways = {"relay.pyz": [options.python, str(pyz)], "python -m relay": [options.python, "-m", "relay"]}
        for way in ways.values():
            run(way + ["--version"], env)  # untimed: extracts relay.pyz into the cache
        print(f"median warm start over {options.runs} runs (same machine, same run, interleaved)")
        print(f"{'command':<14}{'relay.pyz':>12}{'python -m':>12}{'ratio':>8}")
        for command in COMMANDS:
            prefix = with_state(state) if command in READS_STATE else []
            times = {name: [] for name in ways}
            for _ in range(options.runs):
                for name, way in ways.items():
                    times[name].append(run(prefix + way + list(command), env))
            pyz_ms, venv_ms = (statistics.median(times[name]) * 1000 for name in ways)
            print(f"{' '.join(command):<14}{pyz_ms:>10.1f}ms{venv_ms:>10.1f}ms{pyz_ms / venv_ms:>8.2f}")
            results.extend(results_of(" ".join(command), pyz_ms, venv_ms))
    return results


def results_of(command, pyz_ms, venv_ms):
    """One result per target of issue #2 (and DESIGN.md's bar for admin commands)."""
    figure = f"`{command}`, median warm start"
    ratio = pyz_ms / venv_ms
    results = [report.Result("startup.py", figure, pyz_ms, "ms", venv_ms, "python -m relay", ratio,
                             "ratio <= 1.15 (#2)", ratio <= 1.15)]
    if command == "secret ls":
        results.append(report.Result("startup.py", figure, pyz_ms, "ms", venv_ms, "python -m relay", ratio,
                                     "relay.pyz < 150 ms (#2)", pyz_ms < 150))
    if command in ADMIN:
        results.append(report.Result("startup.py", figure, pyz_ms, "ms", venv_ms, "python -m relay", ratio,
                                     "relay.pyz < 200 ms (DESIGN.md: admin commands 'well under' it)", pyz_ms < 200))
    return results


def run(argv, env):
    began = time.perf_counter()
    finished = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    elapsed = time.perf_counter() - began
    if finished.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {finished.returncode}; not timing a failing command:\n"
                 + finished.stderr.decode(errors="replace")[-2000:])
    return elapsed


def write_state(directory):
    """A state database as `relay start` leaves it: the example functions, ready, and counters."""
    sys.path.insert(0, str(ROOT))
    from relay.functions import load_function
    from relay.live.status import FunctionStatus
    from relay.view.database import StateDatabase
    from relay.view.records import Counters, FunctionStats, Stats, now
    from relay.view.writer import function_record

    moment = now()
    functions = [load_function(path) for path in sorted((ROOT / "examples" / "functions").iterdir())]
    records = [function_record(FunctionStatus(function, ready=True, updated_at=moment, image=function.image,
                                              prepared_at=moment))
               for function in functions]
    counters = Counters(events_processed=1200, handler_successes=1190, handler_failures=10, retries=8)
    database = StateDatabase(directory / "db.sqlite3")
    database.write(records, Stats(counters, pending_entries=3, updated_at=moment),
                   {function.name: FunctionStats(counters) for function in functions})
    database.close()


def with_state(directory):
    """The prefix that runs a command with *directory* at the state's fixed path, privately."""
    os.makedirs(STATE_DIR, exist_ok=True)
    script = 'mount --bind "$1" "$2"; shift 2; exec "$@"'
    return [shutil.which("unshare") or sys.exit("unshare is not installed"), "--mount", "--propagation",
            "private", "--", "sh", "-ec", script, "bench-state", str(directory), STATE_DIR]


class redis_server:
    def __enter__(self):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        binary = shutil.which("redis-server") or sys.exit("redis-server is not installed: run scripts/setup")
        self.process = subprocess.Popen([binary, "--port", str(port), "--save", "", "--bind", "127.0.0.1"],
                                        stdout=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.02)
        return f"127.0.0.1:{port}"

    def __exit__(self, *exc):
        self.process.terminate()
        self.process.wait()


if __name__ == "__main__":
    main()
