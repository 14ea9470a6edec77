"""A template's YAML, read within limits: bytes, expanded nodes, nesting depth.

YAML anchors and aliases let a few hundred bytes stand for a hundred million
values (8 levels of 10 aliases each), and a walk over what they expand to
holds the one thread everything runs on. So the text is composed into its
node graph first, where an alias is the very node object it names, and
measured there before anything is constructed:

* more than MAX_TEMPLATE_BYTES of text is refused without parsing it;
* a document that expands to more than MAX_NODES nodes is refused; a shared
  node counts at every reference, but its expanded size is computed once
  (memoised by id), so measuring costs the size of the text, not of the
  expansion;
* nesting deeper than MAX_DEPTH collections is refused (an alias that
  contains itself nests forever, so it is refused too).

Within the limits, anchors keep working for ordinary reuse, such as a
pattern shared by two rules. The duplicate-key walk visits every node once.

``Locations`` maps the field paths of a template (``events[2].pattern.price``)
to the lines they are written on, from the node graph's marks, so that every
problem can say where it is.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from relay.errors import InvalidTemplate, TemplateTooLarge
from relay.functions.problems import Problem, Problems, join

MAX_TEMPLATE_BYTES = 64 * 1024
MAX_NODES = 10_000
MAX_DEPTH = 32

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Node = Any   # a node of PyYAML's composed graph (yaml.Node: ScalarNode, SequenceNode, MappingNode); PyYAML is untyped


class _Refused(Exception):
    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def too_large(size: int) -> str | None:
    """The problem of a template of *size* bytes, or None."""
    if size > MAX_TEMPLATE_BYTES:
        return f"is larger than {MAX_TEMPLATE_BYTES // 1024} KiB; a template is refused unread past that"
    return None


def load_document(text: str, source: str, problems: Problems) -> tuple[object, Node | None]:
    """The constructed document and its node graph; adds duplicate keys to *problems*.

    Raises TemplateTooLarge past a limit, InvalidTemplate for text that is not YAML.
    """
    problem = too_large(len(text.encode("utf-8", "surrogatepass")))
    if problem:
        raise TemplateTooLarge(source, Problem("", problem))
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        measure(root)
        _check_duplicate_keys(root, problems)
        document = loader.construct_document(root)
    except _Refused as refused:
        raise TemplateTooLarge(source, Problem("", refused.problem)) from None
    except RecursionError:
        raise TemplateTooLarge(source, Problem("", _too_deep())) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise InvalidTemplate(source, [Problem("", f"is not valid YAML: {_yaml_problem(error)}",
                                               line=mark.line + 1 if mark is not None else None)]) from None
    except ValueError as error:  # e.g. an integer past Python's digit limit
        raise InvalidTemplate(source, [Problem("", f"is not a usable YAML value: {error}")]) from None
    finally:
        loader.dispose()
    return document, root


def measure(root: Node) -> int:
    """Refuse *root* (a composed node) past MAX_NODES expanded nodes or MAX_DEPTH levels; else its size."""
    known: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, collection levels from it down)

    def visit(node: Node, depth: int) -> tuple[int, int]:
        """*depth*: the collections above *node*."""
        if isinstance(node, yaml.ScalarNode):
            return 1, 0
        seen = known.get(id(node))
        if seen is None:
            if depth >= MAX_DEPTH:
                raise _Refused(_too_deep())
            children = ([part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode)
                        else node.value)
            size, height = 1, 0
            for child in children:
                child_size, child_height = visit(child, depth + 1)
                size += child_size
                height = max(height, child_height)
                if size > MAX_NODES:
                    raise _Refused(f"expands to more than {MAX_NODES} nodes")
            seen = known[id(node)] = (size, height + 1)
        if depth + seen[1] > MAX_DEPTH:
            raise _Refused(_too_deep())
        return seen

    return visit(root, 0)[0]


def _too_deep() -> str:
    return f"nests deeper than {MAX_DEPTH} levels"


def _check_duplicate_keys(root: Node, problems: Problems) -> None:
    """Every mapping's repeated keys, each mapping looked at once however often it is referenced."""
    visited = set()
    pending: list[tuple[Node, str]] = [(root, "")]
    while pending:
        node, path = pending.pop()
        if isinstance(node, yaml.ScalarNode) or id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen = set()
            children = []
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key in seen:
                    problems.add(join(path, key), "is given twice; YAML would keep only the last one",
                                 line=_line(key_node))
                seen.add(key)
                children.append((value_node, join(path, key) if key is not None else path))
        else:
            children = [(item, join(path, index)) for index, item in enumerate(node.value)]
        pending.extend(reversed(children))


class Locations:
    """Field path -> the 1-based line it is written on, for every field of a template.

    A mapping's field is on its key's line, a list item on the line it starts.
    A path the template does not hold (a required key that is missing, a key
    YAML turned into something other than text) is placed at its nearest
    ancestor that it does hold; the template as a whole has no line.
    """

    _LAST_STEP = re.compile(r"(.*?)(?:\[[0-9]+\]|\.[^.]*)\Z", re.DOTALL)

    def __init__(self, root: Node | None) -> None:
        self._lines: dict[str, int] = {}
        pending: list[tuple[Node, str]] = [(root, "")] if root is not None else []
        while pending:  # every path once; measure() bounded their number by MAX_NODES
            node, path = pending.pop()
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if isinstance(key_node, yaml.ScalarNode):
                        child = join(path, key_node.value)
                        self._lines.setdefault(child, _line(key_node))
                        pending.append((value_node, child))
            elif isinstance(node, yaml.SequenceNode):
                for index, item in enumerate(node.value):
                    child = join(path, index)
                    self._lines.setdefault(child, _line(item))
                    pending.append((item, child))

    def line(self, path: str) -> int | None:
        """The line of *path*, or of its nearest ancestor in the template; None for the template itself."""
        while path:
            line = self._lines.get(path)
            if line is not None:
                return line
            found = self._LAST_STEP.fullmatch(path)
            path = found.group(1) if found else ""
        return None


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _yaml_problem(error: yaml.YAMLError) -> str:
    problem = getattr(error, "problem", None) or str(error)
    mark = getattr(error, "problem_mark", None)
    where = f" at column {mark.column + 1}" if mark is not None else ""  # the line is the problem's own
    return " ".join(f"{problem}{where}".split())
