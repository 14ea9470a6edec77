"""The runtime's Executor: a router between its two peers, cold and warm.

    invocation.warm is None   → ColdExecutor   one throw-away container (relay.runtime.cold)
    invocation.warm is set    → WarmExecutor   a warm container of the function (relay.runtime.warm_pool)

Both run an invocation to its end and never raise for a failing handler or
an engine error; each fits the dispatcher's Executor seam on its own, and
the Router is what the dispatcher is given. ``build_executor`` makes the
pair one worker uses: one HostConfig per network, made once for both, the
same pins, leftovers, output and observer. relay.wiring builds the process's
with it; ``relay invoke``, the tests and bench/ build theirs the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TextIO

from docker import DockerClient

from relay.config import DEFAULT_MAX_CONCURRENCY
from relay.functions import ActiveFunction, Function
from relay.runtime.cold import ColdExecutor
from relay.runtime.containers import HostConfigs
from relay.runtime.events import RuntimeObserver
from relay.runtime.invocation import Invocation, Outcome
from relay.runtime.pins import ImagePins
from relay.runtime.sweep import Leftovers
from relay.runtime.warm_pool import WarmExecutor


class Router:
    """Sends an invocation with ``warm`` settings to *warm*, any other to *cold*."""

    def __init__(self, cold: ColdExecutor, warm: WarmExecutor) -> None:
        self.cold = cold
        self.warm = warm

    def run(self, invocation: Invocation) -> Outcome:
        if invocation.warm is not None:
            return self.warm.run(invocation)   # its container pins the image
        return self.cold.run(invocation)


def build_executor(docker_client: DockerClient, hostname: str, output: TextIO | None = None, *,
                   pins: ImagePins | None = None, leftovers: Leftovers | None = None,
                   warm_capacity: int = DEFAULT_MAX_CONCURRENCY,
                   functions: Callable[[], Iterable[ActiveFunction]] | None = None,
                   environment: Callable[[Function], Mapping[str, str]] | None = None,
                   observer: RuntimeObserver | None = None) -> Router:
    """The cold and the warm executor of one worker, as one Router.

    Containers are labelled with *hostname* (the worker's name: the orphan
    sweep's key); *output* receives the handlers' lines (default: sys.stdout
    as it is now); *pins* keeps each image in use from garbage collection;
    *leftovers* retries the removals the engine could not confirm. The warm
    executor holds at most *warm_capacity* (MAX_CONCURRENCY) containers;
    *functions* and *environment* let it prestart (WarmExecutor). *observer*
    hears ``image_missing`` from both and ``warm_containers_changed``.
    """
    output = output if output is not None else sys.stdout
    host_configs = HostConfigs(docker_client.api)
    cold = ColdExecutor(docker_client, hostname, output, host_configs=host_configs, pins=pins, leftovers=leftovers,
                        observer=observer)
    warm = WarmExecutor(docker_client, hostname, output, capacity=warm_capacity, host_configs=host_configs,
                        pins=pins, leftovers=leftovers, functions=functions, environment=environment,
                        observer=observer)
    return Router(cold, warm)
