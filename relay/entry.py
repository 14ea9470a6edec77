"""Process entry point shared by ``python -m relay`` and ``relay.pyz``.

``relay start`` and ``relay console`` run on gevent, and gevent must patch the standard library
before redis, docker, urllib3 or requests are imported. This shim is the only
place that decides it, by looking at the raw argument list before anything
else is imported. Every other command stays unpatched and light.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

_IMPORTED_TOO_EARLY = ("redis", "docker", "urllib3", "requests", "ssl")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    early: tuple[str, ...] = ()
    if argv[:1] in (["start"], ["console"]):   # the two servers run on gevent
        early = tuple(name for name in _IMPORTED_TOO_EARLY if name in sys.modules)
        from gevent import monkey

        monkey.patch_all()
    from relay.cli import run

    try:
        return run(argv, imported_before_patch=early)
    except BrokenPipeError:
        # The reader went away (``relay dlq ls | head``): stop quietly, as other tools do,
        # with stdout pointed at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
