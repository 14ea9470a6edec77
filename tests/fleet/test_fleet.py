"""Three relay.pyz workers under faults, once per test run, on one Redis and on
Redis under Sentinel; ``python -m tests.fleet [--sentinel]`` runs the same
fleet several times and prints the summary table."""

import shutil
import time

import pytest

from tests.fleet.report import summary_table
from tests.fleet.run import Fleet

EVENTS, SECONDS = 1000, 150   # half the documented runs (python -m tests.fleet), to fit CI
SENTINEL_EVENTS, SENTINEL_SECONDS = 600, 90   # the faults' timeline scaled to 90 s


@pytest.mark.timeout(45 * 60)   # about ten minutes; the drain alone may take up to 25
def test_a_fleet_under_faults_loses_nothing(pyz, tmp_path_factory):
    report = run_fleet(pyz, tmp_path_factory.mktemp("fleet"), EVENTS, SECONDS)
    verdict = report.verdict
    assert (verdict.events, verdict.lost) == (EVENTS, 0)
    assert verdict.malformed == 48 and verdict.dlq >= verdict.malformed
    assert report.restarts - report.exits == 2 and len(report.faults) == 8


@pytest.mark.timeout(40 * 60)   # about eight minutes; the drain alone may take up to 25
def test_a_fleet_under_sentinel_failovers_loses_nothing(pyz, tmp_path_factory):
    report = run_fleet(pyz, tmp_path_factory.mktemp("fleet-sentinel"), SENTINEL_EVENTS, SENTINEL_SECONDS,
                       sentinel=True)
    verdict = report.verdict
    assert (verdict.events, verdict.lost) == (SENTINEL_EVENTS, 0)
    assert verdict.malformed == 48 and verdict.dlq >= verdict.malformed
    assert [(failover.killed, failover.promoted) for failover in report.failovers] == [
        ("redis-0", "redis-1"), ("redis-1", "redis-0")]
    assert report.restarts - report.exits == 2 and len(report.faults) == 8


def run_fleet(pyz, root, events, seconds, **options):
    """One fleet run with a fresh seed; its report, once the verdict passed."""
    seed = int(time.time())
    print(f"fleet seed {seed}")
    try:
        report = Fleet(pyz, root, seed, **options).run(events, seconds)
    finally:
        shutil.rmtree(root / "docker", ignore_errors=True)   # the private engine's images and layers
    print(summary_table([report]))
    verdict = report.verdict
    assert verdict.passed, f"seed {seed}, logs in {report.run_dir}:\n" + "\n".join(verdict.problems[:40])
    return report
