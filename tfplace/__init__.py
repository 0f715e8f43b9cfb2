"""tfplace: device placement for TensorFlow graphs too large for one device (Celeritas).

>>> import tfplace
>>> placement = tfplace.place(graph, train_op, feed_fn, "/device:GPU:0-3", memory="32GB",
...                           batch_size=512)  # doctest: +SKIP
>>> placement.apply(graph)  # doctest: +SKIP

Importing tfplace does not import TensorFlow; :func:`place` and the estimator do when they run.
"""

from tfplace._version import __version__
from tfplace.api import CostEstimate, estimate_costs, place
from tfplace.core.costgraph import CostGraph, load_json, save_json
from tfplace.core.devices import Device, DeviceSet
from tfplace.core.placement import Placement, register_graph_writer
from tfplace.core.transfer import TransferModel
from tfplace.placer import PLACERS, place_cost_graph
from tfplace.split.plan import SplitPlan
from tfplace.tf_graph.split_rewrite import write_graph

register_graph_writer(
    write_graph
)  # Placement.apply and SplitPlan.apply write TensorFlow graphs (docs/architecture.md)

__all__ = [
    "PLACERS",
    "CostEstimate",
    "CostGraph",
    "Device",
    "DeviceSet",
    "Placement",
    "SplitPlan",
    "TransferModel",
    "__version__",
    "estimate_costs",
    "load_json",
    "place",
    "place_cost_graph",
    "save_json",
]
