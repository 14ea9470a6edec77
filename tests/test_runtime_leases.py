"""Image leases: reference counts and callbacks on the last release."""

import threading

import pytest

from relay.runtime.leases import ImageLeases


def test_counts_nest():
    leases = ImageLeases()
    with leases.lease("img:1"):
        with leases.lease("img:1"):
            assert leases.in_use("img:1")
        assert leases.in_use("img:1")
        assert leases.leased() == {"img:1"}
    assert not leases.in_use("img:1")
    assert leases.leased() == frozenset()


def test_release_without_acquire_is_a_bug():
    with pytest.raises(RuntimeError):
        ImageLeases().release("img:1")


def test_when_idle_runs_at_once_for_an_unleased_image():
    calls = []
    assert ImageLeases().when_idle("img:1", calls.append) is True
    assert calls == ["img:1"]


def test_when_idle_waits_for_the_last_release_and_runs_once():
    leases, calls = ImageLeases(), []
    leases.acquire("img:1")
    leases.acquire("img:1")
    assert leases.when_idle("img:1", calls.append) is False
    assert leases.when_idle("img:1", calls.append) is False  # replaces, does not stack
    leases.release("img:1")
    assert calls == []
    leases.release("img:1")
    assert calls == ["img:1"]
    leases.acquire("img:1")
    leases.release("img:1")
    assert calls == ["img:1"]


def test_a_failing_callback_does_not_reach_the_releaser(caplog):
    leases = ImageLeases()
    leases.acquire("img:1")
    leases.when_idle("img:1", lambda image: 1 / 0)
    leases.release("img:1")
    assert "Callback for an idle image failed" in caplog.text


def test_threads_balance():
    leases = ImageLeases()

    def work():
        for _ in range(2000):
            with leases.lease("img:1"):
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not leases.in_use("img:1")
