"""Garbage collection of old function images.

Only tags of the exact form relay-fn-<function name>:<16 hex> are ever
considered, and only those of the functions a pass is about: by default the
functions this Relay has loaded (their old versions), or the names given
(functions that were removed). Other Relay processes may share the engine --
replicas on one host, end-to-end tests -- and their functions' images are
theirs. A tag is removed when it is not the active image of its function and
no in-flight invocation pins it; a pinned one is removed when its
last pin is removed, unless it has become active again by then (a
reverted function reuses its old tag). Function images of those functions
that lost their tag (concurrent builds of one version) go too. relay-dep-*
images, build cache layers and every other image are never touched, and
nothing is forced: an image a container still uses stays.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Mapping

from docker import DockerClient
from docker.errors import APIError, NotFound
from requests.exceptions import RequestException

from relay.runtime.pins import ImagePins
from relay.runtime.recipes import FUNCTION_LABEL, FUNCTION_REPOSITORY_PREFIX, KIND_LABEL

log = logging.getLogger("relay.runtime.gc")

_FUNCTION_TAG = re.compile(re.escape(FUNCTION_REPOSITORY_PREFIX) + r"([a-z0-9][a-z0-9._-]*):([0-9a-f]{16})", re.ASCII)


def collect_garbage(docker_client: DockerClient, active: Mapping[str, str], pins: ImagePins,
                    functions: Iterable[str] | None = None) -> list[str]:
    """Remove the function image tags nobody needs; return the tags removed now.

    *active* maps function name -> active image tag. It is read again when a
    pinned tag's last pin ends, so pass the live mapping the dispatcher uses
    (or one that stays valid). *functions* names the functions whose tags the
    pass may remove; by default those in *active*. At startup that removes
    the loaded functions' old versions; after a function is removed, name it
    (and any others known to have gone, e.g. from the state database).
    """
    only = frozenset(active if functions is None else functions)
    try:
        images = docker_client.api.images(name=f"{FUNCTION_REPOSITORY_PREFIX}*")
    except (APIError, RequestException) as error:
        log.warning("Cannot list images for garbage collection", extra={"error": str(error)})
        return []
    keep = set(active.values())
    later = _remover(docker_client, active)
    removed: list[str] = []
    for image in images:
        for tag in image.get("RepoTags") or ():
            name = function_of(tag)
            if name is None or name not in only or tag in keep:
                continue
            if pins.in_use(tag):
                pins.when_unpinned(tag, later)
                log.debug("Image in use; it will be removed after its last invocation", extra={"image": tag})
            elif _remove(docker_client, tag):
                removed.append(tag)
    _remove_untagged(docker_client, only)
    return removed


def retire_image(docker_client: DockerClient, tag: str, pins: ImagePins, active: Mapping[str, str]) -> bool:
    """Remove the old version *tag* now, or after its last pin, unless
    *active* (the live mapping) holds it again by then. Returns whether it
    was handled now."""
    if not is_function_tag(tag):
        return False
    return pins.when_unpinned(tag, _remover(docker_client, active))


def is_function_tag(tag: str) -> bool:
    return function_of(tag) is not None


def function_of(tag: str) -> str | None:
    """The function name in a relay-fn-<name>:<16 hex> tag, or None for any other tag."""
    found = _FUNCTION_TAG.fullmatch(tag)
    return found.group(1) if found else None


def _remover(docker_client: DockerClient, active: Mapping[str, str]) -> Callable[[str], None]:
    """A when_unpinned callback: remove the tag unless it became active again meanwhile."""

    def remove(tag: str) -> None:
        if tag not in set(active.values()):
            _remove(docker_client, tag)

    return remove


def _remove_untagged(docker_client: DockerClient, functions: Collection[str]) -> None:
    """Remove function images that lost their tag: two processes that built the
    same version at once (replicas starting together) leave all but the last
    build untagged. Images still used by a container stay.

    Removing by id also removes a tag the image has gained since it was
    listed -- a third build that hits the build cache ends by tagging the very
    image the others left untagged -- so each is looked at again just before
    its removal. A window remains between that look and the removal: an
    invocation that finds its image gone has it rebuilt (Reconciler.image_missing)."""
    try:
        images = docker_client.api.images(filters={"dangling": True, "label": f"{KIND_LABEL}=function"})
    except (APIError, RequestException) as error:
        log.debug("Cannot list untagged images", extra={"error": str(error)})
        return
    for image in images:
        if (image.get("Labels") or {}).get(FUNCTION_LABEL) in functions and _still_untagged(docker_client, image["Id"]):
            _remove(docker_client, image["Id"])


def _still_untagged(docker_client: DockerClient, image_id: str) -> bool:
    try:
        return not docker_client.api.inspect_image(image_id).get("RepoTags")
    except (APIError, RequestException):
        return False


def _remove(docker_client: DockerClient, tag: str) -> bool:
    try:
        docker_client.api.remove_image(tag, force=False, noprune=False)
    except NotFound:
        return False
    except APIError as error:
        log.info("Old function image kept", extra={"image": tag, "reason": str(error.explanation or error)})
        return False
    except RequestException as error:
        log.warning("Cannot remove old function image", extra={"image": tag, "error": str(error)})
        return False
    log.info("Removed old function image", extra={"image": tag[:19] if tag.startswith("sha256:") else tag})
    return True
