"""Blocking work in gevent's thread pool, its exception raised in the caller and nowhere else.

gevent hands every exception a pool task raises to the hub as well, and the
hub prints its traceback on stderr before the caller sees it: each invalid
template Relay loads would put a Python traceback among its log lines. The
task here returns its exception instead, and the caller raises it.
"""

from collections.abc import Callable
from typing import TypeVar, TypeVarTuple

import gevent

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def in_thread(function: Callable[[*Ts], T], *args: *Ts) -> T:
    """*function(*args)* in the hub's thread pool; its value, or its exception raised here."""
    failed, outcome = gevent.get_hub().threadpool.apply(_call, (function, args))
    if failed:
        raise outcome
    return outcome


def _call(function: Callable[[*Ts], T], args: tuple[*Ts]) -> tuple[bool, T | Exception]:
    try:
        return False, function(*args)
    except Exception as error:  # raised again by in_thread, in the caller's greenlet
        return True, error
