"""``relay console`` as an operator runs it: a real process on a free port, its secret store a temporary
directory bind-mounted at /var/lib/relay (tests.support.commands), talked to over HTTP."""

import subprocess
import time

import requests

from tests.support.commands import relay_secret, secret_command
from tests.support.redis_server import free_port
from tests.support.relay_process import ROOT, base_env


class Console:
    def __init__(self, process, base):
        self.process = process
        self.base = base
        self.http = requests.Session()

    def get(self, path, **kwargs):
        return self.http.get(self.base + path, allow_redirects=False, timeout=10, **kwargs)

    def post(self, path, data=None, **kwargs):
        return self.http.post(self.base + path, data=data, allow_redirects=False, timeout=10, **kwargs)

    def login(self, token):
        answer = self.post("/login", {"token": token, "next": "/fleet"})
        assert answer.status_code == 303, answer.text
        return answer

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def set_token(state_dir, token):
    result = relay_secret(state_dir, "set", "console-token", input=token.encode())
    assert result.returncode == 0, result.stderr


def console_command(state_dir, redis_server, *args, stream="events", group="workers", functions="/nonexistent"):
    command = secret_command(state_dir, *args, "--env-file=/dev/null", f"--dir={functions}",
                             program=("-m", "relay", "console"))
    env = base_env(REDIS_URI=redis_server.address, REDIS_STREAM=stream, REDIS_GROUP=group)
    return command, env


def start_console(state_dir, redis_server, host="127.0.0.1", **names):
    port = free_port()
    command, env = console_command(state_dir, redis_server, f"--addr={host}:{port}", **names)
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"relay console exited: {process.stderr.read().decode()}")
        try:
            requests.get(base + "/assets/console.css", timeout=1)
            return Console(process, base)
        except requests.ConnectionError:
            time.sleep(0.05)
    process.terminate()
    raise AssertionError("relay console did not listen")
