"""Run Relay's engine in this process with test timings (short reclaim and idle times).

    python tests/engine/harness.py FUNCTIONS_DIR CONSUMER [RECLAIM_SECONDS MIN_IDLE_SECONDS]

The configuration comes from the environment exactly as for ``relay start``;
only the fixed internal intervals and the consumer name are overridden, which
the environment cannot do.
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
    reclaim, idle = (float(value) for value in (sys.argv[3:5] or (60, 60)))
    config = load_config(os.environ, hostname=consumer)
    configure_logging(config.log_level)
    Supervisor(config, functions_dir=functions_dir,
               timing=Timing(reclaim_interval=reclaim, min_idle=idle, backlog_interval=1.0)).run()


if __name__ == "__main__":
    main()
