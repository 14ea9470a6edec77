"""What an execution container looks like, and how one is removed as a backstop.

Every execution container is hardened the same way (there are no
per-function limits): uid 10001, 128 MiB of memory and no swap beyond it,
one CPU, 128 processes, no Linux capabilities, no-new-privileges, a read-only
root filesystem with a bounded /tmp tmpfs, and the engine's default network
so outbound connections still work -- or no network at all (NetworkMode
"none", loopback only) for a function whose template says ``network: none``.
Its logs are not kept by the engine
(log driver "none"): Relay forwards them as they are written and AutoRemove
would delete them anyway, so handler output is never stored on the host twice.

Seven labels attribute a container to a function, handler, message, event,
worker and image; they are for diagnosis and the orphan sweep only.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from docker import APIClient
from docker.errors import APIError, DockerException, NotFound
from docker.types import LogConfig
from requests.exceptions import RequestException

if TYPE_CHECKING:
    from relay.runtime.invocation import Invocation

log = logging.getLogger("relay.runtime.containers")

USER = "10001:10001"
MEMORY_BYTES = 128 * 1024 * 1024
NANO_CPUS = 1_000_000_000
PIDS_LIMIT = 128
TMPFS = {"/tmp": "rw,nosuid,nodev,size=64m,mode=1777"}
LABEL_VALUE_LIMIT = 256  # IDs come from events; a label is never a payload

FUNCTION_LABEL = "relay.function"
HANDLER_LABEL = "relay.handler"
MESSAGE_ID_LABEL = "relay.message_id"
EVENT_ID_LABEL = "relay.event_id"
EVENT_NAME_LABEL = "relay.event_name"
HOSTNAME_LABEL = "relay.hostname"
IMAGE_LABEL = "relay.image"


def host_config(api: APIClient, network: str | None = None) -> dict[str, Any]:
    """The HostConfig of every execution container; *network* is the template's (None: the engine's default)."""
    return api.create_host_config(
        **({"network_mode": network} if network else {}),
        auto_remove=True,
        mem_limit=MEMORY_BYTES,
        memswap_limit=MEMORY_BYTES,
        nano_cpus=NANO_CPUS,
        pids_limit=PIDS_LIMIT,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        tmpfs=dict(TMPFS),
        log_config=LogConfig(type=LogConfig.types.NONE),
    )


class HostConfigs:
    """One HostConfig per network, made at its first use and shared by the cold and the warm executor."""

    def __init__(self, api: APIClient) -> None:
        self._api = api
        self._made: dict[str | None, dict[str, Any]] = {}

    def get(self, network: str | None) -> dict[str, Any]:
        made = self._made.get(network)
        if made is None:
            made = self._made[network] = host_config(self._api, network)
        return made


def labels(invocation: Invocation, hostname: str) -> dict[str, str]:
    values = {
        FUNCTION_LABEL: invocation.function,
        HANDLER_LABEL: invocation.handler,
        MESSAGE_ID_LABEL: invocation.message_id,
        EVENT_ID_LABEL: invocation.event_id,
        EVENT_NAME_LABEL: invocation.event_name,
        HOSTNAME_LABEL: hostname,
        IMAGE_LABEL: invocation.image,
    }
    return {key: ("" if value is None else str(value))[:LABEL_VALUE_LIMIT] for key, value in values.items()}


def container_name(function: str) -> str:
    """relay-<function>-<random>: readable in ``docker ps``, unique without coordination."""
    return f"relay-{function}-{secrets.token_hex(6)}"


def short(reference: str) -> str:
    """A container's reference as ``docker ps`` shows it: an id's first 12 digits, a name whole."""
    is_id = len(reference) == 64 and all(digit in "0123456789abcdef" for digit in reference)
    return reference[:12] if is_id else reference


def remove_container(api: APIClient, container_id: str, context: Mapping[str, object] | None = None) -> bool:
    """Force-remove a container; return whether it is gone.

    Idempotent: a container that is already removed, or that the engine is
    already removing (AutoRemove after it exited), counts as cleaned up.
    """
    try:
        api.remove_container(container_id, force=True)
    except NotFound:
        return True
    except APIError as error:
        if error.status_code == 409 and "already in progress" in str(error.explanation or error):
            return True
        log.error("Cannot remove execution container", extra={
            **(context or {}), "container": short(container_id), "error": str(error.explanation or error)})
        return False
    except (DockerException, RequestException) as error:
        log.error("Cannot remove execution container", extra={
            **(context or {}), "container": short(container_id), "error": str(error)})
        return False
    return True
