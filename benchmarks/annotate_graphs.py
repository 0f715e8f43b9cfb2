"""Give saved cost graphs what splitting needs, without profiling again (cost-graph schema version 3).

Builds each model at its default (paper) knobs, reads every op's split attributes and static output
shapes (:func:`tfplace.tf_graph.split_attrs.annotate_split_fields`) and rewrites
``<graphs_dir>/<model>.json.gz`` with them; costs are left as they were. Graphs re-made by
``run_experiments.py`` have these fields already (and the regression's ``batch_costs``). Run from
the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/annotate_graphs.py
    PYTHONPATH=. .venv/bin/python benchmarks/annotate_graphs.py --models=inception_v3
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from absl import app, flags

from models import MODELS, build_model
from tfplace.core.costgraph import load_json, save_json
from tfplace.tf_graph.split_attrs import annotate_split_fields

FLAGS = flags.FLAGS
flags.DEFINE_list("models", list(MODELS), "Models whose saved graphs to annotate.")
flags.DEFINE_string("graphs_dir", "results/graphs", "Where the saved cost graphs are.")


def main(argv: Sequence[str]) -> None:
    del argv
    for name in FLAGS.models:
        path = Path(FLAGS.graphs_dir) / f"{name}.json.gz"
        if not path.exists():
            print(f"{name}: no {path}, skipped")
            continue
        graph = load_json(path)
        annotated = annotate_split_fields(graph, build_model(name).graph)
        save_json(graph, path)
        print(f"{name}: {annotated:,} of {len(graph):,} ops annotated -> {path}", flush=True)


if __name__ == "__main__":
    app.run(main)
