"""Standard Evaluation (Celeritas section 4.2): what each op costs, and what a transfer costs.

- :mod:`~tfplace.estimator.profiler`: :func:`profile_graph` measures a graph at small batch sizes;
- :mod:`~tfplace.estimator.regression`: :class:`OpCostRegression` predicts the costs at a large
  batch size, :func:`fill_cost_graph` writes them into a cost graph;
- :mod:`~tfplace.estimator.shapes`: shape-based estimates for ops no trace reports;
- :mod:`~tfplace.estimator.cache`: profiles cached on disk by graph fingerprint;
- :mod:`~tfplace.estimator.calibration`: :func:`calibrate_transfer` fits ``t = k * bytes + b``.

Importing this package does not import TensorFlow; the functions that run it import it.
"""

from tfplace.estimator.cache import ProfileCache, graph_fingerprint
from tfplace.estimator.calibration import calibrate_transfer
from tfplace.estimator.profiler import OpCost, ProfileSet, profile_graph
from tfplace.estimator.regression import OpCostRegression, fill_cost_graph

__all__ = [
    "OpCost",
    "OpCostRegression",
    "ProfileCache",
    "ProfileSet",
    "calibrate_transfer",
    "fill_cost_graph",
    "graph_fingerprint",
    "profile_graph",
]
