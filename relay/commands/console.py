"""``relay console``: serve the console alone, from any host that reaches Redis (no Docker).

It reads REDIS_URI, REDIS_STREAM and REDIS_GROUP (and MAX_EVENT_BYTES) from
the environment or the service's environment file (relay.envfile), and the
console token from the local secret store. Unlike the other admin commands
it is a server, as ``relay start`` is: it runs on gevent, patched by
relay.entry before anything else is imported, and imports gevent (through
relay.console) only when it runs. It serves until SIGINT or SIGTERM. A
non-loopback address without a console token, a port that cannot be bound,
or Redis not answering is one line on stderr and exit status 1.

The replay form matches events against the functions of --dir, loaded as
``relay replay`` loads them, when a replay is counted.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from relay.errors import RelayError

if TYPE_CHECKING:
    from relay.commands import Arguments
    from relay.functions import ActiveFunction

DEFAULT_ADDR = "127.0.0.1:8080"


def run(args: Arguments, environ: Mapping[str, str] | None = None, stderr: TextIO | None = None) -> int:
    stderr = sys.stderr if stderr is None else stderr
    try:
        return _serve(args, environ, stderr)
    except RelayError as error:
        print(f"relay console: {error}", file=stderr)
        return 1


def _serve(args: Arguments, environ: Mapping[str, str] | None, stderr: TextIO) -> int:
    import gevent
    from gevent.event import Event

    from relay.commands import connect_stream
    from relay.config import DEFAULT_MAX_EVENT_BYTES, _positive_int, _required, parse_listen_address
    from relay.console.server import console_site, listen
    from relay.envfile import command_environment
    from relay.secrets.store import FileSecretStore

    if environ is None:
        environ = command_environment(args["--env-file"], os.environ)
    address = parse_listen_address("--addr", args["--addr"] or DEFAULT_ADDR)
    group = _required(environ, "REDIS_GROUP")
    max_event_bytes = int(_positive_int(environ, "MAX_EVENT_BYTES", DEFAULT_MAX_EVENT_BYTES))
    root = Path(args["--dir"] or "/functions")

    def functions() -> list[ActiveFunction]:
        from relay.commands.match import load_functions

        return load_functions(root, "relay console", stderr) if root.is_dir() else []

    client, stream = connect_stream(environ)
    app = console_site(client, stream=stream, group=group, address=address, secrets=FileSecretStore(),
                       functions=functions, max_event_bytes=max_event_bytes, named="--addr")
    server = listen(address, app)
    host = f"[{address.host}]" if ":" in address.host else (address.host or "0.0.0.0")
    print(f"relay console: serving {stream} on http://{host}:{server.server_port}/ (Ctrl-C stops it)",
          file=stderr, flush=True)
    stopping = Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        gevent.signal_handler(number, stopping.set)
    stopping.wait()
    server.stop(timeout=5)
    return 0
