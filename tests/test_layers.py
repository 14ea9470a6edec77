"""The import structure of relay/: layers that only look down, and no circle of modules.

Every import counts, wherever it stands: at the top of a module, inside a
function, or under ``if TYPE_CHECKING``. A module may import from its own
layer or the ones below, never above; and no chain of imports leads from a
module back to itself. A new module or package must be placed in LAYERS.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "relay"

# Bottom first. A name is a module or a package (all its modules); "leaves" are relay's own top-level modules
# that know nothing of the rest (their order among themselves is kept by the no-circle rule).
LAYERS = (
    ("leaves",),
    ("relay.secrets",),
    ("relay.functions",),
    ("relay.runtime", "relay.gitsync"),
    ("relay.live", "relay.stream"),
    ("relay.runs",),
    ("relay.metrics",),
    ("relay.view",),
    ("relay.console",),
    ("relay.wiring", "relay.commands"),
    ("relay.supervisor",),
    ("relay.cli",),
    ("relay.entry", "relay.__main__", "relay"),
)
ABOVE_LEAVES = {name for layer in LAYERS[1:] for name in layer}


def module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules():
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def rank(module):
    for index, layer in enumerate(LAYERS):
        for name in layer:
            if module == name or (name != "relay" and module.startswith(name + ".")):
                return index
    top = module.split(".")[:2]
    if len(top) == 2 and ".".join(top) not in ABOVE_LEAVES and module.count(".") == 1:
        return 0
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")


def imports(module, path, known):
    """The relay modules *module* imports, anywhere in its source."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("relay"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                base = ".".join(parent[:len(parent) - node.level + 1] + ([base] if base else []))
            if not base.startswith("relay"):
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    found.discard(module)
    return {name for name in found if name in known}


def graph():
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_every_module_has_a_layer():
    for module in modules():
        rank(module)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = sorted(f"{module} (layer {rank(module)}) imports {target} (layer {rank(target)})"
                    for module, targets in graph().items() for target in targets
                    if rank(target) > rank(module) and not module.startswith(target + "."))
    assert upward == []


def test_no_circle_of_imports():
    edges = {module: {target for target in targets if not module.startswith(target + ".")}
             for module, targets in graph().items()}
    state, circles = {}, []

    def visit(module, trail):
        state[module] = "open"
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                circles.append(" -> ".join([*trail[trail.index(target):], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert circles == []
