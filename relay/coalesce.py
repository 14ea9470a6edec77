"""At most one run at a time per key; requests made during a run fold into one more run.

A burst of requests therefore converges with exactly one extra run: the run
in progress may have looked before the last request, the single follow-up
looks after it. A request made before a run has started is served by that
run. Git sync runs one job (the sync, under the key None); the reconciler
runs one per function name, on a pool that bounds how many run at once.
"""

import gevent


class CoalescingRunner:
    def __init__(self, job, failed, *, spawn=gevent.spawn):
        """*job(key)* does the work. When it raises, *failed(key)* is called in the except
        block (so it can log the traceback) and the runner carries on. *spawn(function, *args)*
        starts a greenlet: gevent.spawn, or a Pool's spawn, which waits for a free slot."""
        self.job = job
        self.failed = failed
        self.stopping = False
        self._spawn = spawn
        self._running = {}  # key -> its greenlet (None while spawn waits for a slot)
        self._again = set()

    def request(self, key=None):
        """Run job(key) soon; waits for nothing but *spawn*."""
        if self.stopping:
            return
        if key in self._running:
            self._again.add(key)
            return
        self._running[key] = None
        try:
            greenlet = self._spawn(self._run, key)
        except BaseException:
            self._running.pop(key, None)
            raise
        if key in self._running:
            self._running[key] = greenlet

    def _run(self, key):
        try:
            while not self.stopping:
                self._again.discard(key)
                try:
                    self.job(key)
                except Exception:
                    self.failed(key)
                if key not in self._again:
                    return
        finally:
            self._running.pop(key, None)

    def stop(self):
        """Take no more requests; a run going on is the last one of its key."""
        self.stopping = True

    def join(self, timeout=None):
        """Wait up to *timeout* seconds for the runs going on; whether they all ended."""
        greenlets = [greenlet for greenlet in self._running.values() if greenlet is not None]
        gevent.joinall(greenlets, timeout=timeout)
        return all(greenlet.dead for greenlet in greenlets)

    def kill(self, timeout=5):
        """Kill the runs still going on, waiting up to *timeout* seconds for them to die."""
        greenlets = [greenlet for greenlet in self._running.values() if greenlet is not None]
        gevent.killall(greenlets, timeout=timeout)
