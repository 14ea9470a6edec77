"""Process entry point shared by ``python -m relay`` and ``relay.pyz``.

``relay start`` runs on gevent, and gevent must patch the standard library
before redis, docker, urllib3 or requests are imported. This shim is the only
place that decides it, by looking at the raw argument list before anything
else is imported. Every other command stays unpatched and light.
"""

import sys

_IMPORTED_TOO_EARLY = ("redis", "docker", "urllib3", "requests", "ssl")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    early = ()
    if argv[:1] == ["start"]:
        early = tuple(name for name in _IMPORTED_TOO_EARLY if name in sys.modules)
        from gevent import monkey

        monkey.patch_all()
    from relay.cli import run

    return run(argv, imported_before_patch=early)
