"""What to build for a function: its dependency image, its function image, and
the Dockerfiles of both. Plain data, no Docker.

A dependency image is content-addressed: ``relay-dep-<fingerprint>``, where the
fingerprint covers the runtime, its base image *tag* (not digest), the
engine's architecture, the install command and the manifests' names and
bytes -- nothing else of the function. Two functions with identical manifests
share one, and a source-only change reuses it. Manifests are read only at
their real path inside the function: never through a link that leads out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from relay.errors import BuildError, LinkOutside
from relay.functions.runtimes import BOOTSTRAP_DIRECTORY, FUNCTION_DIRECTORY, Installer, Runtime
from relay.links import read_inside

DEPENDENCY_REPOSITORY_PREFIX = "relay-dep-"
FUNCTION_REPOSITORY_PREFIX = "relay-fn-"
USER = "10001:10001"
HOME = "/tmp"  # the only writable place in an execution container

# Labels on images Relay builds. They are deliberately not the relay.* labels
# of execution containers (which containers would otherwise inherit from
# their image, and which the orphan sweep looks for).
KIND_LABEL = "relay.build.kind"
RUNTIME_LABEL = "relay.build.runtime"
FINGERPRINT_LABEL = "relay.build.fingerprint"
FUNCTION_LABEL = "relay.build.function"
RECIPE_LABEL = "relay.build.recipe"

if TYPE_CHECKING:
    from relay.functions import Function

_SCHEMA = b"relay-dependencies/1"


@dataclass(frozen=True)
class DependencyRecipe:
    runtime: Runtime
    installer: Installer
    manifests: tuple[tuple[str, bytes], ...]   # (file name, bytes) in the installer's order
    fingerprint: str                           # 64 hex

    @property
    def tag(self) -> str:
        return f"{DEPENDENCY_REPOSITORY_PREFIX}{self.fingerprint}"

    def dockerfile(self) -> str:
        names = " ".join(name for name, _ in self.manifests)
        return (f"FROM {self.runtime.base_image}\n"
                f"WORKDIR {FUNCTION_DIRECTORY}\n"
                f"COPY {names} {FUNCTION_DIRECTORY}/\n"
                f"RUN {json.dumps(list(self.installer.command))}\n"
                f"{_label_instruction(self.labels())}")

    def labels(self) -> dict[str, str]:
        return {KIND_LABEL: "dependencies", RUNTIME_LABEL: self.runtime.name, FINGERPRINT_LABEL: self.fingerprint}


@dataclass(frozen=True)
class FunctionRecipe:
    function: Function
    runtime: Runtime
    base: str                # the dependency image's tag, or the runtime's base image
    bootstrap: bytes
    injected: tuple[tuple[str, bytes], ...]   # (file name, bytes) the function lacks and the runtime supplies

    @property
    def tag(self) -> str:
        return self.function.image

    def dockerfile(self) -> str:
        return self._instructions() + _label_instruction(self.labels())

    @property
    def digest(self) -> str:
        """Everything but the source that shapes the image: a new Relay with a
        changed bootstrap or Dockerfile rebuilds an image whose tag exists."""
        digest = hashlib.sha256()
        for part in (self._instructions().encode(), self.bootstrap,
                     *(piece for name, data in self.injected for piece in (name.encode(), data))):
            _field(digest, part)
        return digest.hexdigest()

    def _instructions(self) -> str:
        runtime = self.runtime
        return (f"FROM {self.base}\n"
                f"WORKDIR {FUNCTION_DIRECTORY}\n"
                f"COPY bootstrap/ {BOOTSTRAP_DIRECTORY}/\n"
                f"COPY function/ {FUNCTION_DIRECTORY}/\n"
                f"ENV HOME={HOME}\n"
                f"USER {USER}\n"
                f"ENTRYPOINT {json.dumps(list(runtime.command))}\n")

    def labels(self) -> dict[str, str]:
        return {KIND_LABEL: "function", RUNTIME_LABEL: self.runtime.name, FUNCTION_LABEL: self.function.name,
                FINGERPRINT_LABEL: self.function.fingerprint, RECIPE_LABEL: self.digest}


def dependency_recipe(directory: Path, runtime: Runtime, architecture: str) -> DependencyRecipe | None:
    """The dependency image *directory* needs, or None when it has no manifest."""
    installer = runtime.installer_for(directory)
    if installer is None:
        return None
    manifests: list[tuple[str, bytes]] = []
    for name in installer.manifests:
        path = Path(directory) / name
        try:
            manifests.append((name, read_inside(directory, name)))
        except FileNotFoundError:
            raise BuildError(f"{installer.trigger} needs {name} next to it, and {path} does not exist") from None
        except LinkOutside as error:
            raise BuildError(f"{Path(directory)}: {error}") from None
        except OSError as error:
            raise BuildError(f"cannot read {path}: {error.strerror or error}") from None
    digest = hashlib.sha256()
    for part in (_SCHEMA, runtime.name.encode(), runtime.base_image.encode(), architecture.encode(),
                 "\0".join(installer.command).encode()):
        _field(digest, part)
    for name, data in manifests:
        _field(digest, name.encode())
        _field(digest, data)
    return DependencyRecipe(runtime=runtime, installer=installer, manifests=tuple(manifests),
                            fingerprint=digest.hexdigest())


def function_recipe(function: Function, runtime: Runtime, dependencies: DependencyRecipe | None) -> FunctionRecipe:
    """The function image for *function*, built FROM *dependencies* (a
    DependencyRecipe) or, without one, from the runtime's base image."""
    injected = tuple((name, data) for name, data in runtime.default_files.items()
                     if not (Path(function.directory) / name).exists()
                     and not (Path(function.directory) / name).is_symlink())
    return FunctionRecipe(function=function, runtime=runtime,
                          base=dependencies.tag if dependencies else runtime.base_image,
                          bootstrap=runtime.bootstrap_source(), injected=injected)


def _label_instruction(labels: Mapping[str, str]) -> str:
    """One LABEL instruction (one build step, not one per label)."""
    return "LABEL " + " ".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items())) + "\n"


def _field(digest: hashlib._Hash, data: bytes) -> None:
    """Length-prefixed, so no two different field lists hash the same bytes."""
    digest.update(b"%d\0" % len(data))
    digest.update(data)
