"""The runtime's two executors as peers behind one Router, pure: no engine."""

import io

from relay.durations import SECOND
from relay.functions.template import Warm
from relay.runtime.cold import ColdExecutor
from relay.runtime.executor import Router, build_executor
from relay.runtime.invocation import Invocation, Outcome
from relay.runtime.warm_pool import WarmExecutor


class Api:
    """Just enough of docker-py's APIClient to make HostConfigs: counts them."""

    def __init__(self):
        self.made = []

    def create_host_config(self, **settings):
        self.made.append(settings.get("network_mode"))
        return dict(settings)


class Client:
    def __init__(self):
        self.api = Api()


class Recording:
    def __init__(self, name):
        self.name = name
        self.ran = []

    def run(self, invocation):
        self.ran.append(invocation.handler)
        return Outcome(ok=True, exit_code=0, duration=0.0)


def invocation(handler, warm=None):
    return Invocation(function="fn", handler=handler, image="relay-fn-fn:0000000000000000", payload=b"{}",
                      timeout=SECOND, warm=warm)


def test_a_warm_invocation_goes_to_the_warm_executor_any_other_cold():
    cold, warm = Recording("cold"), Recording("warm")
    router = Router(cold, warm)
    assert router.run(invocation("a.cold")).ok
    assert router.run(invocation("a.warm", Warm(containers=1))).ok
    assert router.run(invocation("b.cold")).ok
    assert (cold.ran, warm.ran) == (["a.cold", "b.cold"], ["a.warm"])


def test_build_executor_makes_both_sharing_one_host_config_per_network():
    client = Client()
    router = build_executor(client, "host-x", io.StringIO(), warm_capacity=2)
    assert isinstance(router.cold, ColdExecutor) and isinstance(router.warm, WarmExecutor)
    assert router.cold._host_configs is router.warm._host_configs
    first = router.cold._host_configs.get("none")
    assert router.warm._host_configs.get("none") is first and router.cold._host_configs.get(None) is not first
    assert client.api.made == ["none", None]
    assert router.warm.close()
