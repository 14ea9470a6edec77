"""Relay's Python bootstrap, copied into every python function image.

Runs the handler named by RELAY_HANDLER ("events.created.handler": module
events.created, function handler) on the event JSON read from stdin. The exit
status is the result: 0 when the handler returns, 1 with a traceback on stderr
when it raises (or cannot be found). A coroutine or other awaitable returned
by the handler is run to completion with asyncio.run first.

Standard library only: it runs inside the function's container, not in Relay.
"""

import importlib
import json
import os
import sys
import traceback


def main():
    spec = os.environ.get("RELAY_HANDLER", "")
    module_name, _, function_name = spec.rpartition(".")
    if not module_name or not function_name:
        print(f"relay: RELAY_HANDLER={spec!r} is not of the form module.function", file=sys.stderr)
        return 1
    # The function's directory replaces the bootstrap's own on the path, so a
    # user module can have any name, including this file's.
    sys.path[0] = os.getcwd()
    try:
        event = json.loads(sys.stdin.buffer.read() or b"null")
        module = importlib.import_module(module_name)
        handler = getattr(module, function_name, None)
        if not callable(handler):
            print(f"relay: module {module_name!r} has no function {function_name!r}", file=sys.stderr)
            return 1
        result = handler(event)
        if hasattr(result, "__await__"):
            import asyncio

            asyncio.run(_wait_for(result))
    except Exception:
        traceback.print_exc()
        return 1
    return 0


async def _wait_for(awaitable):
    return await awaitable


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)
