"""A private redis-server for a benchmark: not a benchmark itself (bench/run_all.py skips _ files)."""

import shutil
import socket
import subprocess
import sys
import time

import redis


def start_redis(directory):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    binary = shutil.which("redis-server") or sys.exit("redis-server is not installed: run scripts/setup")
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no", "--dir", directory], stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return process, client
        except redis.ConnectionError:
            time.sleep(0.02)
    sys.exit("redis-server did not start")
