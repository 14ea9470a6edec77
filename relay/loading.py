"""Loading /functions at start: every valid function, built, into the catalog.

Invalid names and templates are logged and skipped, a directory without a
template.yaml is ignored, and a function whose image cannot be built is
logged and left out (pending); Relay always starts.
"""

import logging
from pathlib import Path

from relay.catalog import ActiveFunction
from relay.errors import BuildError, TemplateError
from relay.functions import MissingTemplate, load_function

log = logging.getLogger("relay.loading")


def discover(functions_dir):
    """Every function that loads, and the problems of those that do not; sorted by name."""
    root = Path(functions_dir)
    if not root.is_dir():
        log.warning("Functions directory does not exist", extra={"path": str(root)})
        return []
    loaded = []
    for directory in sorted(path for path in root.iterdir() if path.is_dir()):
        try:
            loaded.append(load_function(directory))
        except MissingTemplate:
            log.debug("Directory has no template.yaml; ignored", extra={"path": str(directory)})
        except TemplateError as error:
            log.error("Invalid function; skipped", extra={"path": str(directory), "error": str(error)})
    return loaded


def prepare(function, builder):
    """Build (or reuse) the function's image; an ActiveFunction, or None when the build failed."""
    try:
        image = builder.prepare(function)
    except BuildError as error:
        log.error("Function image build failed; function is pending", extra={
            "function": function.name, "error": str(error)})
        return None
    log.info("Function ready", extra={"function": function.name, "image": image,
                                      "handlers": len(function.template.rules)})
    return ActiveFunction(function=function, image=image)
