"""Helpers the test modules share: test modules import from here, never from
one another. Fixtures built on them are registered in tests/conftest.py.

harness.py runs as a script with this directory first on sys.path, so no
module here may be named after one Relay imports (relay, redis, docker, ...).
"""
