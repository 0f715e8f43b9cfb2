"""The share of each model's step compute that the partition rules can split (issue 15, step 1).

Reads saved cost graphs (``results/graphs/*.json.gz`` by default) and prints, per graph, the share
of summed op time in ops with a rule that applies (:func:`tfplace.split.split_coverage`), the share
in ops whose rules wait for attributes the graph does not record (graphs saved before schema
version 3: ``benchmarks/annotate_graphs.py`` adds them), and the op types that stay whole, largest
first. Run from the repository root:

    .venv/bin/python benchmarks/split_coverage.py
    .venv/bin/python benchmarks/split_coverage.py results/graphs/transformer.json.gz
"""

from __future__ import annotations

import glob
import sys

from tfplace.core.costgraph import load_json
from tfplace.core.tables import format_table
from tfplace.core.units import format_seconds
from tfplace.split import split_coverage


def main(paths: list[str]) -> None:
    rows = [("graph", "step compute", "splittable", "needs attrs", "largest whole op types")]
    for path in paths or sorted(glob.glob("results/graphs/*.json.gz")):
        coverage = split_coverage(load_json(path))
        whole = ", ".join(
            f"{op_type} {seconds / coverage.total:.1%}" for op_type, seconds in coverage.by_type[:4]
        )
        rows.append(
            (
                path.rsplit("/", 1)[-1].removesuffix(".json.gz"),
                format_seconds(coverage.total),
                f"{coverage.share:.1%}",
                f"{coverage.needs_attrs / coverage.total:.1%}" if coverage.total else "-",
                whole,
            )
        )
    print(format_table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
