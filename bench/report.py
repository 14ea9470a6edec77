"""Machine-readable results of a benchmark, for bench/run_all.py.

Not a benchmark itself. A benchmark takes ``--json PATH`` (see ``add_option``)
and, once it has measured everything, appends one JSON object per
``Result`` to PATH, one a line. Its human output stays as it is.

A result is one figure next to its baseline, with at most one target: a
figure that has two targets is written twice, once per target. ``met`` is
None when the figure has no target.
"""

import json
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Result:
    benchmark: str                 # the bench file, e.g. "startup.py"
    figure: str                    # what was measured, e.g. "`secret ls`, median warm start"
    value: float                   # Relay's figure
    unit: str                      # "ms", "entries/s", ...
    baseline_value: float | None = None
    baseline: str = ""             # what the baseline is, e.g. "python -m relay"
    ratio: float | None = None     # value / baseline_value
    target: str = ""               # e.g. "ratio <= 1.15 (#2)"; empty: no target
    met: bool | None = None


def add_option(parser):
    parser.add_argument("--json", metavar="PATH",
                        help="also append the results to PATH as JSON lines (for bench/run_all.py)")


def ratio(value, baseline_value):
    return value / baseline_value if baseline_value else None


def write(path, results):
    """Append *results* to *path*, one JSON object a line; nothing when *path* is None."""
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as stream:
        for result in results:
            stream.write(json.dumps(asdict(result)) + "\n")


def read(path):
    """The results in *path*; a line that is not a result raises ValueError."""
    names = {field.name for field in fields(Result)}
    results = []
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or not names.issuperset(record):
                    raise TypeError
                results.append(Result(**record))
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{number}: not a benchmark result: {line.strip()[:80]}") from None
    return results
