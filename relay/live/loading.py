"""What /functions holds: the names of its direct subdirectories.

Every direct subdirectory is a candidate function whose name is the
directory's name; the reconciler decides what each one is (a function, an
invalid name, not ready yet). Files next to them are not functions, and
neither are hidden directories: git sync stages its copies in
``.relay-sync-*`` before renaming them into place.
"""

from __future__ import annotations

import os
from pathlib import Path


def function_names(functions_dir: str | os.PathLike[str]) -> list[str]:
    """The names of the directories directly under *functions_dir*, sorted; [] when it is missing."""
    root = Path(functions_dir)
    try:
        entries = list(root.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(entry.name for entry in entries if entry.is_dir() and not entry.name.startswith("."))
