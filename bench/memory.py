"""Peak memory of a Relay worker while a burst drains: warm against cold, in one run.

    .venv/bin/python bench/memory.py [--warm 5000] [--cold 200]

Runs Relay's supervisor (``relay start`` with the test harness's paths:
tests/support/harness.py, so neither /functions nor /var/lib/relay is
touched) at MAX_CONCURRENCY 8 on one no-op Python function with
``concurrency: 8``, once warm (``warm: {containers: 8}``) with ``--warm``
entries published before it starts, once cold with ``--cold`` entries, and
reads the process's peak resident set (VmHWM) once the group has no lag and
nothing pending. The cold burst is the baseline (issue #19 measured 73 MB
during one). Target: the warm peak <= 100 MB. Also prints how fast the warm
burst drained through the whole process.

It starts its own redis-server on a free port and uses the local Docker engine.
``--json PATH`` appends the figures for bench/run_all.py (see bench/report.py).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402
from _redis import start_redis  # noqa: E402

HARNESS = ROOT / "tests" / "support" / "harness.py"
STREAM, GROUP = "events", "relay"
CONCURRENCY = 8
TARGET_MB = 100
# Read by bench/run_all.py without importing this file.
QUICK_ARGS = ["--warm", "500", "--cold", "16"]
TEMPLATE = """runtime: python3.14
concurrency: 8
{warm}events:
  - handler: handler.handler
    pattern:
      kind: [bench]
"""


def write_function(root, name, warm):
    directory = Path(root) / name
    directory.mkdir(parents=True)
    (directory / "template.yaml").write_text(TEMPLATE.format(warm="warm:\n  containers: 8\n" if warm else ""))
    (directory / "handler.py").write_text("def handler(event):\n    pass\n")


def burst(client, port, directory, name, count, warm):
    """Run a worker over *count* entries; (peak RSS in bytes, seconds from its start to the drain)."""
    functions = Path(directory) / f"functions-{name}"
    write_function(functions, name, warm)
    client.delete(STREAM)
    pipe = client.pipeline(transaction=False)
    for number in range(count):
        pipe.xadd(STREAM, {"event": json.dumps({"kind": "bench", "n": number})})
    pipe.execute()
    env = {**os.environ, "REDIS_URI": f"redis://127.0.0.1:{port}/0", "REDIS_STREAM": STREAM, "REDIS_GROUP": GROUP,
           "MAX_CONCURRENCY": str(CONCURRENCY), "LOG_LEVEL": "warn", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(HARNESS), str(functions), f"relay-bench-{os.getpid()}", "60", "60",
               f"state_db={Path(directory) / f'state-{name}.sqlite3'}"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    began = time.monotonic()
    try:
        while not drained(client):
            if process.poll() is not None:
                sys.exit(f"relay exited with {process.returncode} before the burst drained")
            time.sleep(0.05)
        elapsed = time.monotonic() - began
        peak = peak_rss(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    return peak, elapsed


def drained(client):
    try:
        [group] = client.xinfo_groups(STREAM)
    except (ValueError, Exception):   # the group does not exist until the worker starts
        return False
    return group["lag"] == 0 and group["pending"] == 0


def peak_rss(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no VmHWM in /proc: cannot read the peak resident set")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=5000, help="entries in the warm burst (default 5000)")
    parser.add_argument("--cold", type=int, default=200, help="entries in the cold burst (default 200)")
    report.add_option(parser)
    options = parser.parse_args()
    docker_client = docker.from_env()
    with tempfile.TemporaryDirectory() as directory:
        process, client = start_redis(directory)
        port = client.connection_pool.connection_kwargs["port"]
        try:
            cold_peak, cold_seconds = burst(client, port, directory, "relay-bench-cold", options.cold, warm=False)
            warm_peak, warm_seconds = burst(client, port, directory, "relay-bench-warm", options.warm, warm=True)
        finally:
            process.terminate()
            process.wait()
            for image in docker_client.images.list(name="relay-fn-relay-bench-*"):
                docker_client.images.remove(image.id, force=True)
    mb = 1024 * 1024
    print(f"peak resident set of a Relay worker, MAX_CONCURRENCY {CONCURRENCY}, one no-op python function")
    print(f"{'cold burst':<12}{options.cold:>6} entries {cold_peak / mb:>7.1f} MB  drained in {cold_seconds:.1f} s")
    print(f"{'warm burst':<12}{options.warm:>6} entries {warm_peak / mb:>7.1f} MB  drained in {warm_seconds:.1f} s "
          f"({options.warm / warm_seconds:,.0f} entries/s from the worker's start)")
    met = warm_peak / mb <= TARGET_MB
    print(f"target warm peak <= {TARGET_MB} MB: {'met' if met else 'MISSED'}")
    report.write(options.json, [
        report.Result("memory.py", f"peak RSS, warm burst of {options.warm}", warm_peak / mb, "MB", cold_peak / mb,
                      f"cold burst of {options.cold}", warm_peak / cold_peak, f"<= {TARGET_MB} MB (#19)", met),
        report.Result("memory.py", f"warm burst of {options.warm} drained by relay start", options.warm /
                      warm_seconds, "entries/s")])
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
