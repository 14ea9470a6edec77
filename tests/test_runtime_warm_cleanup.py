"""A warm container whose create the engine never answered is looked for again, as a cold one is."""

from requests.exceptions import ConnectionError as RequestsConnectionError

from relay.runtime.sweep import UNCONFIRMED_CREATE_GRACE, Leftovers
from relay.runtime.warm import WarmContainer


class EngineGoingDown:
    """An API whose every call fails as an engine that stopped answering does."""

    def __init__(self):
        self.removed = []

    def create_container(self, *args, **kwargs):
        raise RequestsConnectionError("Connection aborted.")

    def remove_container(self, reference, force):
        self.removed.append(reference)
        raise RequestsConnectionError("Connection refused")


class Client:
    def __init__(self, api):
        self.api = api


def test_an_unanswered_create_leaves_its_name_with_the_leftovers():
    api = EngineGoingDown()
    now = [100.0]
    leftovers = Leftovers(Client(api), clock=lambda: now[0])
    container = WarmContainer(api, function="f", image="relay-fn-f:0", version=None, hostname="h", output=None,
                              leftovers=leftovers)
    try:
        container.start(command=("true",), env={}, host_config={}, prefix_parts=("f",), deadline=0)
    except RequestsConnectionError:
        pass
    assert container.broken and container.container_id is None
    assert container.remove() is False
    assert api.removed == [container.name] and len(leftovers) == 1
    leftovers.retry()                     # still unreachable: kept
    assert len(leftovers) == 1
    api.remove_container = lambda reference, force: None   # the engine is back and removed it
    leftovers.retry()
    assert len(leftovers) == 1            # within the grace a late create may still land
    now[0] += UNCONFIRMED_CREATE_GRACE
    leftovers.retry()
    assert len(leftovers) == 0
