"""Run Relay's engine in this process with test timings (short reclaim and idle times).

    python tests/support/harness.py FUNCTIONS_DIR CONSUMER [RECLAIM_SECONDS MIN_IDLE_SECONDS] [NAME=VALUE...]

NAME=VALUE pairs set ``state_db`` (the state database file) or any other
field of Timing, in seconds (e.g. ``rescan_interval=600``). The configuration
comes from the environment exactly as for ``relay start``; only the fixed
internal intervals, paths and the consumer name are overridden, which the
environment cannot do.
"""

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
import sys  # noqa: E402

from relay.config import load_config  # noqa: E402
from relay.logs import configure_logging  # noqa: E402
from relay.supervisor import Supervisor, Timing  # noqa: E402


def main():
    functions_dir, consumer = sys.argv[1], sys.argv[2]
    positional = [arg for arg in sys.argv[3:] if "=" not in arg]
    options = dict(arg.split("=", 1) for arg in sys.argv[3:] if "=" in arg)
    reclaim, idle = (float(value) for value in (positional[:2] or (60, 60)))
    state_db = options.pop("state_db", None)
    timing = Timing(reclaim_interval=reclaim, min_idle=idle, backlog_interval=1.0,
                    **{name: float(value) for name, value in options.items()})
    config = load_config(os.environ, hostname=consumer)
    configure_logging(config.log_level)
    return Supervisor(config, functions_dir=functions_dir, timing=timing, state_path=state_db).run()


if __name__ == "__main__":
    sys.exit(main())
