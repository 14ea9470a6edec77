"""The runtime registry: everything that differs between runtimes, as data.

A runtime is a fixed base image, the ways its dependency manifests are
installed, a bootstrap and the command line that runs it. Adding a runtime
(python3.15, node26) is one new entry in RUNTIMES; template checks, the
build and the execution engines (relay.runtime) read nothing else. It is
plain data, here below the runtime layer, so that checking a function can
ask which files its runtime loads without reaching up into Docker's code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from relay.errors import BuildError

BOOTSTRAP_DIRECTORY = "/opt/relay"  # where the bootstrap lives inside every function image
FUNCTION_DIRECTORY = "/function"    # the function's source, and the container's working directory


@dataclass(frozen=True)
class Installer:
    """How one kind of dependency manifest is installed into a dependency image.

    *trigger* is the file whose presence selects this installer; *manifests*
    are all the files the install reads (the trigger first). Only those files
    go into the dependency build, and only their bytes key its fingerprint.
    """

    trigger: str
    command: tuple[str, ...]
    manifests: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.manifests:
            object.__setattr__(self, "manifests", (self.trigger,))


@dataclass(frozen=True)
class Runtime:
    name: str
    base_image: str
    installers: tuple[Installer, ...]   # tried in order; the first whose trigger exists wins
    bootstrap: str                      # a file in relay/runtime/bootstraps/
    interpreter: tuple[str, ...]        # the command line before the bootstrap's path
    module_files: tuple[str, ...] = ()  # where the bootstrap looks for module a.b: "a/b" + each of these, in order
    default_files: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def bootstrap_path(self) -> str:
        """The bootstrap's path inside the image."""
        return f"{BOOTSTRAP_DIRECTORY}/{self.bootstrap}"

    @property
    def command(self) -> tuple[str, ...]:
        """The container's command line."""
        return (*self.interpreter, self.bootstrap_path)

    @property
    def warm_command(self) -> tuple[str, ...]:
        """The command line of a warm container: the bootstrap, resident, reading requests on fd 3
        (the attached stdin, moved there by the shell) with /dev/null as the handlers' stdin."""
        line = " ".join((*self.interpreter, self.bootstrap_path, "--warm"))
        return ("/bin/sh", "-c", f"exec {line} 3<&0 </dev/null")

    def module_paths(self, module: str) -> tuple[str, ...]:
        """The files, relative to the function's directory, that the bootstrap loads module *module* from."""
        base = module.replace(".", "/")
        return tuple(base + ending for ending in self.module_files)

    def installer_for(self, directory: str | Path) -> Installer | None:
        """The installer for the manifests in *directory*, or None when it has none."""
        for installer in self.installers:
            trigger = Path(directory) / installer.trigger
            if trigger.is_symlink() or trigger.is_file():  # a link is chosen, then read only if it stays inside
                return installer
        return None

    def bootstrap_source(self) -> bytes:
        """The bootstrap's bytes, read from the package (works inside relay.pyz too)."""
        return resources.files("relay.runtime").joinpath("bootstraps", self.bootstrap).read_bytes()


_PIP = Installer("requirements.txt", ("pip", "install", "--no-cache-dir", "-r", "requirements.txt"))
_NPM_CI = Installer("package-lock.json", ("npm", "ci", "--omit=dev"), manifests=("package-lock.json", "package.json"))
_NPM_INSTALL = Installer("package.json", ("npm", "install", "--omit=dev"))

RUNTIMES = MappingProxyType({
    "python3.14": Runtime(
        name="python3.14",
        base_image="python:3.14-slim",
        installers=(_PIP,),
        bootstrap="relay_bootstrap.py",
        interpreter=("python", "-u", "-B"),  # unbuffered output, no .pyc on a read-only root
        module_files=(".py", "/__init__.py"),
    ),
    "node24": Runtime(
        name="node24",
        base_image="node:24-alpine",
        installers=(_NPM_CI, _NPM_INSTALL),
        bootstrap="relay_bootstrap.mjs",
        interpreter=("node",),
        module_files=(".js", ".mjs", ".cjs"),
        # Without a package.json, Node would read .js files as CommonJS.
        default_files=MappingProxyType({"package.json": b'{"type":"module"}\n'}),
    ),
})


def runtime_for(name: str) -> Runtime:
    """The registry entry for *name*, or BuildError naming the supported ones."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise BuildError(f"runtime {name!r} is not supported; use one of {', '.join(RUNTIMES)}") from None
