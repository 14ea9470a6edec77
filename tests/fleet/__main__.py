"""Run the fleet under faults and print its summary table.

    .venv/bin/python -m tests.fleet [--runs 3] [--events 2000] [--seconds 150]
                                    [--pyz relay.pyz] [--root /var/tmp/relay-fleet]
                                    [--seed N] [--write docs/fleet.md] [--sentinel | --cold]
                                    [--max-duplicates PERCENT]

Without --pyz it builds relay.pyz first (build_zipapp.py). It needs what
scripts/setup installs (dockerd, redis-server, the local base images) and root
(namespaces, a private dockerd). Exits 1 unless every run passed.

--sentinel runs the fleet on Redis under Sentinel (a primary, a replica, three
Sentinels) with failovers for the Redis faults; --cold runs it on one Redis with
every function cold (no warm containers). The default is one Redis, warm. --write
replaces the section of the file that is the mode's own.

A run fails when its duplicates are more than --max-duplicates percent of its
executions (0.3 by default); after each run the duplicates are put down to the
faults they met (tests/fleet/duplicates.py), in a line here and under the table.
"""

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fleet.report import duplicates_by_run, duplicates_line, machine, summary_table, write_section
from tests.fleet.run import DEFAULT_ROOT, Fleet

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=150.0, help="how long the producer adds events")
    parser.add_argument("--pyz", type=Path)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--write", type=Path, help="replace the summary section of this markdown file")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sentinel", action="store_true", help="Redis under Sentinel; failovers for its faults")
    mode.add_argument("--cold", action="store_true", help="every function cold (no warm: block)")
    parser.add_argument("--max-duplicates", type=float, default=0.3, metavar="PERCENT",
                        help="fail a run whose duplicates exceed this share of its executions (default 0.3)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # so each run's cleanup runs

    pyz = args.pyz or build_pyz(args.root)
    reports = []
    for number in range(1, args.runs + 1):
        seed = args.seed + number if args.seed is not None else int(time.time())
        print(f"fleet: run {number}/{args.runs} (seed {seed})", flush=True)
        fleet = Fleet(pyz, args.root, seed, sentinel=args.sentinel, cold=args.cold,
                      max_duplicates=args.max_duplicates)
        report = fleet.run(args.events, args.seconds, progress=lambda text: print(text, flush=True))
        reports.append(report)
        for problem in report.verdict.problems[:50]:
            print(f"fleet: FAIL: {problem}", flush=True)
        print(f"fleet: {duplicates_line(number, report)}", flush=True)
        print(f"fleet: run {number}: {'passed' if report.verdict.passed else 'FAILED'}", flush=True)
    table = summary_table(reports) + "\n\n" + duplicates_by_run(reports)
    command = "python -m tests.fleet " + " ".join(sys.argv[1:] if argv is None else argv)
    print()
    print(table)
    print(f"\n{machine()}; {time.strftime('%Y-%m-%d')}; `{command.strip()}`")
    if args.write:
        mode = "sentinel" if args.sentinel else "cold" if args.cold else "plain"
        write_section(args.write, table, command.strip(), mode=mode)
    return 0 if all(report.verdict.passed for report in reports) else 1


def build_pyz(root):
    output = root / "relay.pyz"
    root.mkdir(parents=True, exist_ok=True)
    print(f"fleet: building {output}", flush=True)
    subprocess.run([sys.executable, str(ROOT / "build_zipapp.py"), "-o", str(output)], check=True,
                   stdout=subprocess.DEVNULL)
    return output


if __name__ == "__main__":
    sys.exit(main())
