"""Image pins: reference counts and callbacks on the last unpin."""

import threading

import pytest

from relay.runtime.pins import ImagePins


def test_counts_nest():
    pins = ImagePins()
    with pins.holding("img:1"):
        with pins.holding("img:1"):
            assert pins.in_use("img:1")
        assert pins.in_use("img:1")
        assert pins.pinned() == {"img:1"}
    assert not pins.in_use("img:1")
    assert pins.pinned() == frozenset()


def test_unpin_without_pin_is_a_bug():
    with pytest.raises(RuntimeError):
        ImagePins().unpin("img:1")


def test_when_unpinned_runs_at_once_for_an_unpinned_image():
    calls = []
    assert ImagePins().when_unpinned("img:1", calls.append) is True
    assert calls == ["img:1"]


def test_when_unpinned_waits_for_the_last_unpin_and_runs_once():
    pins, calls = ImagePins(), []
    pins.pin("img:1")
    pins.pin("img:1")
    assert pins.when_unpinned("img:1", calls.append) is False
    assert pins.when_unpinned("img:1", calls.append) is False  # replaces, does not stack
    pins.unpin("img:1")
    assert calls == []
    pins.unpin("img:1")
    assert calls == ["img:1"]
    pins.pin("img:1")
    pins.unpin("img:1")
    assert calls == ["img:1"]


def test_a_failing_callback_does_not_reach_the_unpinner(caplog):
    pins = ImagePins()
    pins.pin("img:1")
    pins.when_unpinned("img:1", lambda image: 1 / 0)
    pins.unpin("img:1")
    assert "Callback for an idle image failed" in caplog.text


def test_threads_balance():
    pins = ImagePins()

    def work():
        for _ in range(2000):
            with pins.holding("img:1"):
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not pins.in_use("img:1")
