"""Relay's Python bootstrap, copied into every python function image.

One-shot (the default): runs the handler named by RELAY_HANDLER
("events.created.handler": module events.created, function handler) on the
event JSON read from stdin. The exit status is the result: 0 when the
handler returns, 1 with a traceback on stderr when it raises (or cannot be
found). A coroutine or other awaitable returned by the handler is run to
completion with asyncio.run first.

Warm (``--warm``, started as ``sh -c 'exec python ... --warm 3<&0 </dev/null'``
so the handler's own stdin is /dev/null): stays resident and serves one
invocation at a time. Each request, read from fd 3, is a header line, the
invocation's context and the event's bytes:

    invoke <seq> <nonce> <handler> <m> <n>\\n<m bytes of context JSON><n bytes of event JSON>

The context is a JSON object of RELAY_* variables (RELAY_MESSAGE_ID,
RELAY_ATTEMPT, ...): they are in os.environ, with RELAY_HANDLER, while the
handler runs, and taken out when it returns, so no invocation sees
another's. The handler runs exactly as in one-shot mode (its module
imported once, on first use), writing to the same stdout and stderr; then
the bootstrap writes a marker line to each stream, ``\\x1e\\x1frelay:end
<seq> <nonce>`` on stderr and ``\\x1e\\x1frelay:done <seq> <nonce> ok|error``
on stdout, so Relay knows that all of the invocation's output has arrived.
The nonce is Relay's random token for this request alone: it stays in this
loop's locals, never in os.environ, so a handler that prints a marker (event
text echoed, say) cannot end its invocation with it. ``\\x1e\\x1frelay:ready
3`` on stdout says the bootstrap is listening. A handler that exits the
process ends the container; Relay replaces it.

Standard library only: it runs inside the function's container, not in Relay.
"""

import importlib
import json
import os
import sys
import traceback

MARKER = b"\x1e\x1frelay:"


def main():
    spec = os.environ.get("RELAY_HANDLER", "")
    if not spec.rpartition(".")[0] or not spec.rpartition(".")[2]:
        print(f"relay: RELAY_HANDLER={spec!r} is not of the form module.function", file=sys.stderr)
        return 1
    _use_function_directory()
    try:
        return 0 if run(spec, sys.stdin.buffer.read()) else 1
    except Exception:
        traceback.print_exc()
        return 1


def serve():
    """The warm loop: requests from fd 3 until it closes."""
    _use_function_directory()
    os.set_inheritable(3, False)  # the handlers' child processes never see the requests
    requests = os.fdopen(3, "rb")
    _write(1, b"ready 3\n")
    while True:
        header = requests.readline(512)
        if not header:
            return 0
        words = header.split()
        if len(words) != 6 or words[0] != b"invoke" or not (words[4].isdigit() and words[5].isdigit()):
            print(f"relay: not a request: {header[:100]!r}", file=sys.stderr)
            return 2
        seq, nonce, spec = words[1], words[2], words[3].decode("ascii", "replace")
        sizes = int(words[4]), int(words[5])
        context, payload = requests.read(sizes[0]), requests.read(sizes[1])
        if (len(context), len(payload)) != sizes:
            return 2
        variables = json.loads(context)
        os.environ["RELAY_HANDLER"] = spec
        os.environ.update(variables)
        try:
            ok = run(spec, payload)
        except Exception:
            traceback.print_exc()
            ok = False
        finally:
            for name in variables:
                os.environ.pop(name, None)
        sys.stdout.flush()
        sys.stderr.flush()
        _write(2, b"end %s %s\n" % (seq, nonce))
        _write(1, b"done %s %s %s\n" % (seq, nonce, b"ok" if ok else b"error"))


def run(spec, payload):
    """Run handler *spec* on the event *payload*; True when it returned, False when it cannot be found."""
    module_name, _, function_name = spec.rpartition(".")
    if not module_name or not function_name:
        print(f"relay: handler {spec!r} is not of the form module.function", file=sys.stderr)
        return False
    event = json.loads(payload or b"null")
    module = importlib.import_module(module_name)
    handler = getattr(module, function_name, None)
    if not callable(handler):
        print(f"relay: module {module_name!r} has no function {function_name!r}", file=sys.stderr)
        return False
    result = handler(event)
    if hasattr(result, "__await__"):
        import asyncio

        asyncio.run(_wait_for(result))
    return True


def _use_function_directory():
    # The function's directory replaces the bootstrap's own on the path, so a
    # user module can have any name, including this file's.
    sys.path[0] = os.getcwd()


def _write(fd, text):
    data = MARKER + text
    while data:
        data = data[os.write(fd, data):]


async def _wait_for(awaitable):
    return await awaitable


if __name__ == "__main__":
    status = serve() if sys.argv[1:] == ["--warm"] else main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)
