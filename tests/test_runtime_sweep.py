"""The orphan sweep at start (only this host's Relay containers, within a deadline),
and the retries of removals that met an unreachable engine."""

import io
import logging
import time

import pytest
from docker.errors import NotFound

from relay.durations import SECOND
from relay.runtime.cold import ColdExecutor
from relay.runtime.invocation import Invocation
from relay.runtime.sweep import Leftovers, sweep_orphans
from tests.support.runtime import token


@pytest.fixture
def make_container(docker_engine):
    made = []

    def make(labels, state):
        command = ["sleep", "300"] if state == "running" else ["true"]
        container = docker_engine.api.create_container(
            "python:3.14-slim", command=command, labels=labels,
            host_config=docker_engine.api.create_host_config(network_mode="none"))["Id"]
        made.append(container)
        if state != "created":
            docker_engine.api.start(container)
        if state == "exited":
            docker_engine.api.wait(container, timeout=30)
        return container

    yield make
    for container in made:
        try:
            docker_engine.api.remove_container(container, force=True)
        except NotFound:
            pass


def exists(client, container):
    try:
        client.api.inspect_container(container)
        return True
    except NotFound:
        return False


def test_sweep_removes_only_this_hosts_relay_containers(docker_engine, make_container, caplog):
    me, other = f"rt-sweep-{token()}", f"rt-sweep-other-{token()}"
    ours = [
        make_container({"relay.function": "fn", "relay.hostname": me, "relay.handler": "h.h"}, "running"),
        make_container({"relay.function": "fn", "relay.hostname": me}, "exited"),
        make_container({"relay.function": "fn", "relay.hostname": me}, "created"),
    ]
    spared = [
        make_container({"relay.function": "fn", "relay.hostname": other}, "running"),  # another replica's
        make_container({"relay.function": "fn", "relay.hostname": other}, "exited"),
        make_container({"relay.hostname": me}, "running"),  # not a Relay execution container
        make_container({"relay.function": "fn"}, "exited"),  # no owner
        make_container({"relay.function": "fn", "relay.hostname": me + "x"}, "exited"),  # a similar name
    ]
    with caplog.at_level(logging.INFO, logger="relay.runtime.sweep"):
        assert sweep_orphans(docker_engine, me) == 3
    assert not any(exists(docker_engine, container) for container in ours)
    assert all(exists(docker_engine, container) for container in spared)
    assert "Removed orphaned containers" in caplog.text
    assert sweep_orphans(docker_engine, me) == 0  # idempotent


class SlowAPI:
    """Lists five orphans, then takes its time removing each."""

    def __init__(self, list_delay=0.0, remove_delay=0.0):
        self.list_delay, self.remove_delay = list_delay, remove_delay
        self.removed = []

    def containers(self, all=False, filters=None):
        assert all and set(filters["label"]) == {"relay.function", "relay.hostname=me"}
        time.sleep(self.list_delay)
        return [{"Id": f"{index:064x}", "Labels": {"relay.function": "fn", "relay.hostname": "me"}}
                for index in range(5)]

    def remove_container(self, container, force=False):
        assert force
        time.sleep(self.remove_delay)
        self.removed.append(container)


class Client:
    def __init__(self, api):
        self.api = api


def test_sweep_stops_at_its_deadline_while_removing(caplog):
    api = SlowAPI(remove_delay=0.2)
    started = time.monotonic()
    removed = sweep_orphans(Client(api), "me", deadline_seconds=0.5)
    assert time.monotonic() - started < 0.9
    assert 1 <= removed < 5
    assert "did not finish in time" in caplog.text


def test_sweep_does_not_wait_for_a_hung_engine_past_its_deadline(caplog):
    started = time.monotonic()
    assert sweep_orphans(Client(SlowAPI(list_delay=3)), "me", deadline_seconds=0.3) == 0
    assert time.monotonic() - started < 1.0
    assert "did not finish in time" in caplog.text


def test_leftovers_are_removed_once_the_engine_answers(docker_engine, make_container):
    """A container whose backstop removal met an unreachable engine is retried
    by reference (its id, or the name it was created under) until it is gone."""
    created = make_container({"relay.function": "f", "relay.hostname": token()}, "created")
    leftovers = Leftovers(docker_engine)
    leftovers.add(created, {"function": "f"})
    leftovers.add(f"relay-f-{token()}")          # a create whose reply was lost: nothing by that name
    leftovers.retry()
    assert not exists(docker_engine, created) and len(leftovers) == 0


def test_an_unreachable_engine_hands_the_container_name_to_leftovers():
    import docker

    client = docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41", timeout=2)
    leftovers = Leftovers(client)
    outcome = ColdExecutor(client, "host-x", output=io.StringIO(), leftovers=leftovers).run(
        Invocation(function="f", handler="h.handler", image="relay-fn-f:0", payload=b"{}", timeout=5 * SECOND))
    assert outcome.engine_unavailable
    (reference,) = leftovers._references
    assert reference.startswith("relay-f-")
    leftovers.retry()                           # still unreachable: kept for the next pass
    assert len(leftovers) == 1


def test_a_name_whose_create_was_never_answered_is_watched_for_its_grace(docker_engine):
    """A hung engine may carry out the create after Relay gave up on it."""
    now = [0.0]
    leftovers = Leftovers(docker_engine, clock=lambda: now[0])
    name = f"relay-late-{token()}"
    leftovers.add(name, grace=60.0)
    leftovers.retry()                            # nothing by that name yet: kept
    assert len(leftovers) == 1
    docker_engine.api.create_container("python:3.14-slim", name=name, command=["true"],
                                       host_config=docker_engine.api.create_host_config(network_mode="none"))
    now[0] = 61.0
    leftovers.retry()
    assert not exists(docker_engine, name) and len(leftovers) == 0


class RefusingApi:
    def remove_container(self, container, force=False):
        from docker.errors import APIError

        raise APIError("conflict", explanation="engine says no")


@pytest.mark.parametrize("reference, shown", [
    ("relay-billing-0123456789ab", "relay-billing-0123456789ab"),          # a name, whole
    ("f" * 64, "f" * 12)])                                                 # an id, as docker ps shows it
def test_a_failed_removal_names_the_container_as_docker_ps_would(caplog, reference, shown):
    from relay.runtime.containers import remove_container

    with caplog.at_level(logging.ERROR, logger="relay.runtime.containers"):
        assert remove_container(RefusingApi(), reference) is False
    (record,) = caplog.records
    assert record.container == shown and record.error == "engine says no"
