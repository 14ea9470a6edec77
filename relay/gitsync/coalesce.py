"""At most one sync at a time; any requests during a run fold into one more run.

A burst of pushes therefore converges to the latest commit with exactly one
extra sync: the run in progress may have fetched before the last push, and
the single follow-up run fetches after it. A request made before a run has
started is served by that run.
"""

import logging

import gevent

log = logging.getLogger("relay.gitsync")


class CoalescingRunner:
    def __init__(self, job):
        self.job = job
        self._worker = None
        self._again = False
        self._stopping = False

    def request(self):
        """Run the job soon; never waits."""
        if self._stopping:
            return
        if self._worker is not None:
            self._again = True
            return
        self._worker = gevent.spawn(self._run)

    def _run(self):
        try:
            while True:
                self._again = False
                try:
                    self.job()
                except Exception:
                    log.exception("Git sync failed unexpectedly")
                if not self._again or self._stopping:
                    return
        finally:
            self._worker = None

    def stop(self, timeout):
        """Take no more requests; let a running job finish within *timeout* seconds, then kill it."""
        self._stopping = True
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
            if not worker.dead:
                log.warning("Git sync still running at shutdown; stopped", extra={"waited": f"{timeout:g}s"})
                worker.kill(timeout=5)
