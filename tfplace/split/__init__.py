"""Splitting ops across devices (Tofu's partition-n-reduce, OptCNN's layer-wise parallelism).

:mod:`tfplace.split.rules` says, per TensorFlow op type, along which dimensions an op splits, what
each piece reads and how pieces join; :mod:`tfplace.split.coverage` measures how much of a step
that covers. No TensorFlow is needed.
"""

from tfplace.split.coverage import SplitCoverage, split_coverage
from tfplace.split.rules import RULES, Layout, SplitRule, op_rules

__all__ = ["RULES", "Layout", "SplitCoverage", "SplitRule", "op_rules", "split_coverage"]
