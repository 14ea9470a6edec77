"""relay.coalesce: at most one run per key; requests during a run fold into one more."""

import sys

import gevent
import pytest
from gevent.event import Event
from gevent.pool import Pool

from relay.coalesce import CoalescingRunner


class Job:
    """Records each run's key; a run waits for *gate* when one is set."""

    def __init__(self, gate=None):
        self.runs = []
        self.gate = gate
        self.at_once = 0
        self.most_at_once = 0

    def __call__(self, key):
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            if self.gate is not None:
                self.gate.wait()
            self.runs.append(key)
        finally:
            self.at_once -= 1


def never_fails(key):
    raise AssertionError(f"the job for {key!r} failed")


def settle():
    gevent.sleep(0.05)


def test_a_request_runs_the_job_once_with_its_key():
    job = Job()
    runner = CoalescingRunner(job, never_fails)
    runner.request("a")
    runner.request()
    settle()
    assert job.runs == ["a", None]


def test_requests_before_the_run_starts_are_served_by_it():
    job = Job()
    runner = CoalescingRunner(job, never_fails)
    for _ in range(5):
        runner.request("a")
    settle()
    assert job.runs == ["a"]


def test_requests_during_a_run_fold_into_exactly_one_more():
    job = Job(gate=Event())
    runner = CoalescingRunner(job, never_fails)
    runner.request("a")
    settle()
    for _ in range(5):
        runner.request("a")
    job.gate.set()
    settle()
    assert job.runs == ["a", "a"] and job.most_at_once == 1
    runner.request("a")
    settle()
    assert job.runs == ["a", "a", "a"]


def test_different_keys_run_side_by_side():
    job = Job(gate=Event())
    runner = CoalescingRunner(job, never_fails)
    runner.request("a")
    runner.request("b")
    settle()
    assert job.at_once == 2
    job.gate.set()
    settle()
    assert sorted(job.runs) == ["a", "b"]


def test_a_pool_bounds_the_keys_running_at_once_and_a_waiting_key_takes_its_requests():
    job = Job(gate=Event())
    pool = Pool(1)
    runner = CoalescingRunner(job, never_fails, spawn=pool.spawn)
    runner.request("a")
    waiting = gevent.spawn(runner.request, "b")  # blocks in the pool's spawn until "a" is done
    settle()
    runner.request("b")
    runner.request("b")
    assert not waiting.dead and job.at_once == 1
    job.gate.set()
    waiting.join(timeout=5)
    pool.join(timeout=5)
    assert job.runs == ["a", "b"] and job.most_at_once == 1


def test_a_failed_run_is_reported_in_its_except_block_and_the_next_request_runs():
    failures = []

    def failing(key):
        raise RuntimeError(f"boom {key}")

    runner = CoalescingRunner(failing, lambda key: failures.append((key, str(sys.exc_info()[1]))))
    runner.request("a")
    settle()
    runner.request("a")
    settle()
    assert failures == [("a", "boom a"), ("a", "boom a")]


def test_a_stopped_runner_takes_no_requests_and_ends_after_the_run_going_on():
    job = Job(gate=Event())
    runner = CoalescingRunner(job, never_fails)
    runner.request("a")
    settle()
    runner.request("a")             # would be one more run
    runner.stop()
    runner.request("b")
    job.gate.set()
    assert runner.join(timeout=5)
    assert job.runs == ["a"]


def test_join_says_whether_the_runs_ended_and_kill_ends_them():
    job = Job(gate=Event())
    runner = CoalescingRunner(job, never_fails)
    runner.request("a")
    settle()
    runner.stop()
    assert runner.join(timeout=0.05) is False
    runner.kill(timeout=5)
    assert runner.join(timeout=0) is True and job.runs == [] and job.at_once == 0


def test_a_spawn_that_fails_leaves_the_key_free():
    job = Job()

    def refusing(function, *args):
        raise gevent.GreenletExit()

    runner = CoalescingRunner(job, never_fails, spawn=refusing)
    with pytest.raises(gevent.GreenletExit):
        runner.request("a")
    runner._spawn = gevent.spawn
    runner.request("a")
    settle()
    assert job.runs == ["a"]
