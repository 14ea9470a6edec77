"""Warm start time of relay.pyz against ``python -m relay`` from .venv.

    .venv/bin/python bench/startup.py [--pyz relay.pyz] [--runs 21]

Runs ``secret ls`` and ``health`` both ways, interleaved, against a
redis-server it starts on a free port and the local Docker engine, after one
untimed run that warms relay.pyz's extraction cache. Prints the median wall
time of each and the ratio pyz / venv. Targets: ratio <= 1.15 and
``secret ls`` from relay.pyz under 150 ms.

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
COMMANDS = (("secret", "ls"), ("health",))
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
    with tempfile.TemporaryDirectory() as cache, redis_server() as address:
        env = {**os.environ, "RELAY_PYZ_CACHE": cache, "REDIS_URI": address}
        ways = {"relay.pyz": [options.python, str(pyz)], "python -m relay": [options.python, "-m", "relay"]}
        for way in ways.values():
            run(way + ["--version"], env)  # untimed: extracts relay.pyz into the cache
        print(f"median warm start over {options.runs} runs (same machine, same run, interleaved)")
        print(f"{'command':<14}{'relay.pyz':>12}{'python -m':>12}{'ratio':>8}")
        for command in COMMANDS:
            times = {name: [] for name in ways}
            for _ in range(options.runs):
                for name, way in ways.items():
                    times[name].append(run(way + list(command), env))
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
        results.append(report.Result("startup.py", figure, pyz_ms, "ms", venv_ms, "python -m relay", ratio,
                                     "relay.pyz < 200 ms (DESIGN.md: admin commands 'well under' it)", pyz_ms < 200))
    return results


def run(argv, env):
    began = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - began


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
