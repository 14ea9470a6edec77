"""``relay health``: are Redis and the Docker engine reachable?

It only creates clients and pings; it never consumes, loads functions,
builds images or opens the state database.
"""

import os
import sys

from relay.errors import RelayError


def run(args):
    """Run ``relay health``; return the exit code."""
    return health()


def health(environ=None):
    environ = os.environ if environ is None else environ
    try:
        from relay.clients import connect_docker, connect_redis, ping_redis
        from relay.config import load_docker_env, load_redis_settings

        settings = load_redis_settings(environ)
        ping_redis(connect_redis(settings), settings)
        print(f"redis: ok ({settings.redacted})")
        docker_env = load_docker_env(environ)
        connect_docker(docker_env).close()
        print(f"docker: ok ({docker_env.get('DOCKER_HOST', 'unix:///var/run/docker.sock')})")
    except RelayError as error:
        print(f"relay health: {error}", file=sys.stderr)
        return 1
    return 0
