"""Run every benchmark under bench/, one after the other, and print one table.

    .venv/bin/python bench/run_all.py [--quick] [--write] [--timeout 1800]

A benchmark is every bench/*.py except run_all.py, report.py and names that
start with "_", so a new bench is picked up without being listed here. Each
runs alone in its own subprocess (never two at once: the figures are ratios
against a baseline measured in the same run, and the machine has few cores)
with ``--json FILE``, the arguments its module-level ``RUN_ALL_ARGS`` list
names and, with ``--quick``, those of its ``QUICK_ARGS`` (smaller sizes, for a
smoke run whose figures mean little). Both lists are read with ``ast``; a
bench is never imported here, since several patch gevent at import.

The benches' own output goes to stderr as they run. stdout gets one markdown
table (Benchmark | Figure | Relay | Baseline | Ratio | Target | Met) followed
by the machine, the command, the commit and the date. ``--write`` also puts
that block between the two marker comments of bench/README.md.

Exit status 0 when every benchmark ran and reported its figures, 1 when one
failed: it exited non-zero with no missed target to explain it (invoke.py
exits 1 when it misses a target), reported nothing, or ran past --timeout.
A failed bench is a row of its own in the table, marked failed. A missed
target alone does not change the exit status; it is a "no" under Met.
"""

import argparse
import ast
import collections
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import report  # bench/report.py: bench/ is sys.path[0] when this file runs as a script

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
README = BENCH / "README.md"
NOT_BENCHMARKS = {"run_all.py", "report.py"}
BEGIN = "<!-- bench/run_all.py --write: table begin -->"
END = "<!-- bench/run_all.py --write: table end -->"
# Paths whose uncommitted changes would change the figures.
MEASURED_PATHS = ("relay", "pyz", "bench", "examples", "build_zipapp.py", "requirements.txt")


@dataclass
class Outcome:
    """What one benchmark run gave: its results, and why it failed if it did."""

    name: str
    results: list = field(default_factory=list)
    failure: str | None = None
    seconds: float = 0.0
    load: str = ""  # the 1-minute load average before and after, a hint of what else ran


def discover(directory=BENCH):
    return sorted(path for path in Path(directory).glob("*.py")
                  if path.name not in NOT_BENCHMARKS and not path.name.startswith("_"))


def declared_args(path, name):
    """The list of strings assigned to *name* at the top of *path*; [] when there is none."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except SyntaxError:
        return []  # the bench fails when it runs, and shows as failed
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(target, "id", None) for target in node.targets] == [name]:
            value = ast.literal_eval(node.value)
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"{Path(path).name}: {name} must be a list of strings")
            return value
    return []


def command_of(path, json_path, quick):
    argv = [sys.executable, str(path), "--json", str(json_path), *declared_args(path, "RUN_ALL_ARGS")]
    return argv + declared_args(path, "QUICK_ARGS") if quick else argv


def run_bench(path, quick=False, timeout=1800.0, echo=None):
    """Run the benchmark at *path* alone, its output copied to *echo* (stderr), and collect its results."""
    echo = echo or sys.stderr
    name = Path(path).name
    began = time.perf_counter()
    load_before = load_average(1)
    with tempfile.TemporaryDirectory(prefix="relay-bench-") as directory:
        json_path = Path(directory) / "results.jsonl"
        try:
            argv = command_of(path, json_path, quick)
        except ValueError as error:
            return Outcome(name, failure=str(error))
        print(f"== {shlex.join([display_path(argv[0]), display_path(argv[1]), *argv[2:]])}", file=echo, flush=True)
        tail, status, timed_out = execute(argv, timeout, echo)
        outcome = Outcome(name, seconds=time.perf_counter() - began, load=f"{load_before} → {load_average(1)}")
        try:
            outcome.results = report.read(json_path) if json_path.exists() else []
        except ValueError as error:
            outcome.failure = str(error)
            return outcome
    outcome.failure = failure_of(status, timed_out, timeout, outcome.results, tail)
    return outcome


def execute(argv, timeout, echo):
    """Run *argv* in its own process group; its last output lines, exit status, and whether it timed out."""
    process = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    expired = threading.Event()

    def expire():
        expired.set()
        stop(process)

    timer = threading.Timer(timeout, expire)
    timer.start()
    tail = collections.deque(maxlen=20)
    try:
        for line in process.stdout:
            echo.write(line)
            echo.flush()
            if line.strip():
                tail.append(line.strip())
        status = process.wait()
    finally:
        timer.cancel()
        if process.poll() is None:  # interrupted: take the bench and its redis-server down too
            stop(process)
        process.stdout.close()
    return list(tail), status, expired.is_set()


def stop(process):
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def failure_of(status, timed_out, timeout, results, tail):
    """Why a bench failed, or None when its results stand."""
    if timed_out:
        return f"timed out after {timeout:.0f} s"
    if status < 0:
        return f"killed by signal {-status}"
    last = tail[-1] if tail else "no output"
    if status != 0 and not any(result.met is False for result in results):
        return f"exit status {status}: {last}"
    if not results:
        return "reported no figures (does it take --json PATH? see bench/report.py)"
    return None


# --- the table ----------------------------------------------------------------------


def figure(value, unit):
    if value is None:
        return "—"
    if unit == "ms":
        return f"{value:,.1f} ms"
    if abs(value) >= 1000:
        return f"{value:,.0f} {unit}"
    return f"{value:.2f} {unit}"


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def table(outcomes):
    lines = ["| Benchmark | Figure | Relay | Baseline | Ratio | Target | Met |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for outcome in outcomes:
        for result in outcome.results:
            baseline = "—" if result.baseline_value is None else \
                f"{figure(result.baseline_value, result.unit)} ({result.baseline})"
            ratio = "—" if result.ratio is None else f"{result.ratio:.3f}"
            met = {True: "yes", False: "**no**", None: "—"}[result.met]
            row = [result.benchmark, result.figure, figure(result.value, result.unit), baseline, ratio,
                   result.target or "—", met]
            lines.append("| " + " | ".join(cell(item) for item in row) + " |")
        if outcome.failure:
            row = [outcome.name, f"**failed**: {outcome.failure}", "—", "—", "—", "—", "**failed**"]
            lines.append("| " + " | ".join(cell(item) for item in row) + " |")
    return "\n".join(lines)


def render(outcomes, machine, command, started, seconds):
    failed = [outcome.name for outcome in outcomes if outcome.failure]
    missed = sum(result.met is False for outcome in outcomes for result in outcome.results)
    met = sum(result.met is True for outcome in outcomes for result in outcome.results)
    times = "; ".join(f"{outcome.name} {duration(outcome.seconds)}" + (f" ({outcome.load})" if outcome.load else "")
                      for outcome in outcomes)
    lines = [table(outcomes), "",
             f"Targets: {met} met, {missed} not met"
             + (f"; failed: {', '.join(failed)}" if failed else "; every benchmark ran") + ".", "",
             f"- Command: `{command}`",
             f"- Date: {started:%Y-%m-%d %H:%M} UTC; took {duration(seconds)}",
             f"- Time per benchmark (1-minute load average before → after): {times}"]
    lines += [f"- {key}: {value}" for key, value in machine.items()]
    return "\n".join(lines) + "\n"


def duration(seconds):
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def replace_section(text, block):
    """*text* with everything between the markers replaced by *block*."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"the table markers are missing or out of order; expected one {BEGIN} and one {END} after it")
    head, rest = text.split(BEGIN)
    _old, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block.rstrip()}\n{END}{tail}"


def write_readme(path, block):
    path = Path(path)
    updated = replace_section(path.read_text(encoding="utf-8"), block)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(updated, encoding="utf-8")
    os.replace(temporary, path)


# --- the machine --------------------------------------------------------------------


def machine_info():
    return {
        "Machine": f"{cpu_model()}, {os.cpu_count()} cores, {memory()} memory, Linux {platform.release()}",
        "Python": f"{platform.python_version()} ({display_path(sys.executable)})",
        "Docker": docker_version(),
    }


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def memory():
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 ** 2:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return "unknown"


def load_average(count=3):
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg()[:count])
    except OSError:
        return "unknown"


def output_of(argv):
    try:
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def docker_version():
    server = (output_of(["docker", "version", "--format", "{{.Server.Version}}"]) or "").strip()
    return f"engine {server}" if server else "unknown (`docker version` failed)"


def code_version():
    commit = (output_of(["git", "rev-parse", "--short", "HEAD"]) or "").strip()
    if not commit:
        return "unknown (not a git checkout)"
    changed = output_of(["git", "status", "--porcelain", "--", *MEASURED_PATHS]) or ""
    paths = sorted({line[3:] for line in changed.splitlines()} - {"bench/README.md"})
    if not paths:
        return f"commit {commit}, no uncommitted changes to the code measured"
    return f"commit {commit} plus uncommitted changes to {', '.join(paths)}"


def display_path(path):
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return str(path)


# --- the command --------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="pass each bench its QUICK_ARGS (a smoke run)")
    parser.add_argument("--write", action="store_true", help="put the table into bench/README.md")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one bench may take (default 1800)")
    parser.add_argument("--bench-dir", default=str(BENCH), help=argparse.SUPPRESS)
    parser.add_argument("--readme", default=str(README), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)

    arguments = argv if argv is not None else sys.argv[1:]
    command = shlex.join([display_path(sys.executable), "bench/run_all.py", *arguments])
    started = datetime.now(UTC)
    began = time.perf_counter()
    load_before = load_average()
    code_before = code_version()
    benches = discover(options.bench_dir)
    if not benches:
        sys.exit(f"no benchmark found in {options.bench_dir}")
    outcomes = [run_bench(path, options.quick, options.timeout) for path in benches]
    code_after = code_version()
    code = code_before if code_after == code_before else \
        f"{code_before} at the start; {code_after} at the end (the tree changed during the run)"
    machine = {**machine_info(), "Code": code,
               "Load average (1, 5, 15 min)": f"{load_before} at the start, {load_average()} at the end"}
    block = render(outcomes, machine, command, started, time.perf_counter() - began)
    print(block, end="")
    if options.write:
        write_readme(options.readme, block)
        print(f"wrote the table into {display_path(options.readme)}", file=sys.stderr)
    return 1 if any(outcome.failure for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
