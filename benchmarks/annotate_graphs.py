"""Give saved cost graphs what splitting needs, without profiling again (cost-graph schema version 3).

Builds each model at its default (paper) knobs, reads every op's split attributes and static output
shapes, in the graph and in copies shaped for two probe batch sizes (which settle where the batch
goes through computed axes and permutations) (:func:`tfplace.tf_graph.split_attrs.annotate_split_fields`) and rewrites
``<graphs_dir>/<model>.json.gz`` with them; costs are left as they were. Graphs re-made by
``run_experiments.py`` have these fields already (and the regression's ``batch_costs``). Run from
the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/annotate_graphs.py
    PYTHONPATH=. .venv/bin/python benchmarks/annotate_graphs.py --models=inception_v3
    PYTHONPATH=. .venv/bin/python benchmarks/annotate_graphs.py --models=resnet50_inference
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import app, flags

from models import MODELS, build_model
from tfplace.core.costgraph import load_json, save_json
from tfplace.estimator.shapes import shaped_graph
from tfplace.tf_graph.split_attrs import PROBE_BATCHES, annotate_split_fields

FLAGS = flags.FLAGS
RESNET50 = "resnet50_inference"
"""The forward-only ResNet50 of the inference tables (:mod:`experiments.inference`)."""
flags.DEFINE_list("models", [*MODELS, RESNET50], "Models whose saved graphs to annotate.")
flags.DEFINE_string("graphs_dir", "results/graphs", "Where the saved cost graphs are.")


def main(argv: Sequence[str]) -> None:
    del argv
    for name in FLAGS.models:
        path = Path(FLAGS.graphs_dir) / f"{name}.json.gz"
        if not path.exists():
            print(f"{name}: no {path}, skipped")
            continue
        graph = load_json(path)
        tf_graph, feed_fn = _built(name)
        probes = tuple(
            shaped_graph(tf_graph, {key: value.shape for key, value in feed_fn(batch).items()})
            for batch in PROBE_BATCHES
        )
        annotated = annotate_split_fields(graph, tf_graph, (probes[0], probes[1]))
        save_json(graph, path)
        print(f"{name}: {annotated:,} of {len(graph):,} ops annotated -> {path}", flush=True)


def _built(name: str) -> tuple[Any, Any]:
    """The TensorFlow graph of model ``name`` at its default knobs, and its feed function."""
    if name == RESNET50:
        from experiments.inference import RESNET50_IMAGE_SIZE, resnet50_forward

        graph, _, _, feed_fn = resnet50_forward(RESNET50_IMAGE_SIZE)
        return graph, feed_fn
    spec = build_model(name)
    return spec.graph, spec.feed_fn


if __name__ == "__main__":
    app.run(main)
