"""Relay's administrative commands as an operator runs them: real processes whose
/var/lib/relay is a temporary directory, bind-mounted in a private mount namespace."""

import os
import shutil
import subprocess
import sys

from tests.support.relay_process import ROOT, base_env


def secret_command(state_dir, *args, program=("-m", "relay", "secret")):
    """*args* run by ``python -m relay secret`` with *state_dir* mounted at /var/lib/relay."""
    os.makedirs("/var/lib/relay", exist_ok=True)
    script = 'mount --bind "$1" /var/lib/relay; shift; exec "$@"'
    return [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "sh", "-ec", script,
            "relay-secret", str(state_dir), sys.executable, *program, *args]


def relay_secret(state_dir, *args, input=b""):
    result = subprocess.run(secret_command(state_dir, *args), cwd=ROOT, env=base_env(), input=input,
                            capture_output=True, timeout=60)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(),
                                       result.stderr.decode())


def view_command(state_dir, *args):
    """``python -m relay <args>`` with *state_dir* mounted at /var/lib/relay, nothing else available."""
    os.makedirs("/var/lib/relay", exist_ok=True)
    script = 'mount --bind "$1" /var/lib/relay; shift; exec "$@"'
    command = [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "sh", "-ec", script,
               "relay-views", str(state_dir), sys.executable, "-m", "relay", *args]
    env = base_env(REDIS_URI="127.0.0.1:1", DOCKER_HOST="tcp://127.0.0.1:1")
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def with_service_env(command, etc_relay):
    """*command* in a private mount namespace where the directory *etc_relay* is /etc/relay, the directory of
    the systemd unit's EnvironmentFile (/etc/relay/relay.env); the host's /etc/relay is only a mount point."""
    os.makedirs("/etc/relay", exist_ok=True)
    script = 'mount --bind "$1" /etc/relay; shift; exec "$@"'
    return [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "sh", "-ec", script,
            "relay-env", str(etc_relay), *command]
