"""relay.pyz syncs over SSH with the libraries it carries, and so does the webhook's child process.

The interpreter is a plain python3 without Relay's dependencies; the webhook
runs ``python -m relay git sync`` with the pyz's extraction directory on
PYTHONPATH (relay.gitsync.sync_process), which is reproduced here.
"""

import shutil
import subprocess

from tests.support.relay_process import base_env
from tests.support.workers import with_private_paths

TEMPLATE = "runtime: python3.14\nevents:\n  - handler: app.handle\n    pattern: {kind: [x]}\n"


def test_relay_pyz_syncs_and_its_webhook_child_finds_relay(pyz, git_server, tmp_path):
    python = shutil.which("python3")
    assert subprocess.run([python, "-c", "import paramiko"], capture_output=True).returncode != 0
    functions, state, cache = tmp_path / "functions", tmp_path / "state", tmp_path / "cache"
    env = base_env(RELAY_PYZ_CACHE=str(cache))

    def run(command, **extra_env):  # from tmp_path: '-m relay' must not find the source tree
        result = subprocess.run(with_private_paths(command, functions, state), cwd=tmp_path, capture_output=True,
                                text=True, timeout=120, env={**env, **extra_env})
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    repo = git_server.repository()
    repo.commit({"one/template.yaml": TEMPLATE})
    run([python, str(pyz), "git", "keygen"])
    git_server.authorize((state / "ssh/id_ed25519.pub").read_text())
    run([python, str(pyz), "git", "set", git_server.url(repo)])
    assert "Trusted new host" in run([python, str(pyz), "git", "sync"]).stdout
    assert sorted(path.name for path in functions.iterdir()) == ["one"]

    (extraction,) = [path for path in cache.iterdir() if path.is_dir() and path.name.startswith("relay-")]
    repo.commit({"two/template.yaml": TEMPLATE})
    run([python, "-m", "relay", "git", "sync"], PYTHONPATH=str(extraction))
    assert sorted(path.name for path in functions.iterdir()) == ["one", "two"]
