"""The partition table (issue 15, step 1): what each op type splits along and how pieces join."""

from __future__ import annotations

import pytest

from tfplace.core.costgraph import CostGraph
from tfplace.split import split_coverage
from tfplace.split.rules import (
    BATCH,
    CHANNEL,
    HEIGHT,
    PARTIAL,
    REDUCTION,
    REPLICATED,
    RULES,
    halo,
    op_rules,
    sharded,
)

NHWC = {"data_format": "NHWC"}


def test_conv2d_batch_split_reads_a_slice_of_the_images_and_the_whole_filter():
    rule = op_rules("Conv2D", NHWC)[BATCH]
    assert (rule.read(0), rule.read(1), rule.write(0)) == (sharded(0), REPLICATED, sharded(0))


def test_conv2d_height_split_reads_a_halo_and_concatenates_rows():
    rule = op_rules("Conv2D", NHWC)[HEIGHT]
    assert (rule.read(0), rule.write(0)) == (halo(1), sharded(1))


def test_weight_gradients_split_on_the_batch_are_partial_sums():
    assert op_rules("Conv2DBackpropFilter", NHWC)[BATCH].write(0) == PARTIAL
    assert op_rules("BiasAddGrad", NHWC)[BATCH].write(0) == PARTIAL
    dense_weight_grad = {"transpose_a": True, "transpose_b": False}
    assert op_rules("MatMul", dense_weight_grad)[REDUCTION].write(0) == PARTIAL


def test_matmul_rules_follow_its_transposes():
    plain = op_rules("MatMul", {"transpose_a": False, "transpose_b": False})
    weight_grad = op_rules("MatMul", {"transpose_a": True, "transpose_b": False})
    assert plain[BATCH].read(0) == sharded(0) and BATCH not in weight_grad
    assert weight_grad[REDUCTION].read(0) == sharded(0) and plain[REDUCTION].read(0) == sharded(1)


def test_an_op_whose_split_depends_on_attributes_it_lacks_stays_whole():
    assert op_rules("Conv2D", None) == {}
    assert op_rules("Conv2D", {"data_format": "NCHW"}) == {}
    assert op_rules("Sum", None) == {}


def test_a_reduction_over_the_batch_joins_by_summing_one_that_keeps_it_by_concatenating():
    assert op_rules("Sum", {"reduces_axis0": True})[REDUCTION].write(0) == PARTIAL
    assert op_rules("Mean", {"reduces_axis0": False})[BATCH].write(0) == sharded(0)
    assert BATCH not in op_rules("Sum", {"reduces_axis0": True})


def test_elementwise_ops_need_no_attributes_and_read_every_input_alike():
    rule = op_rules("AddN", None)[BATCH]
    assert rule.read(0) == rule.read(7) == sharded(0)
    assert set(op_rules("ReluGrad")) == {BATCH}


@pytest.mark.parametrize("op_type", ["FusedBatchNormV3", "FusedBatchNormGradV3", "FusedBatchNorm"])
def test_batch_norm_splits_on_the_batch_with_its_statistics_partial_over_the_pieces(op_type):
    # training statistics are the whole batch's: the pieces' sums are combined (synchronized)
    rules = op_rules(op_type, NHWC)
    assert set(rules) == {BATCH, CHANNEL}
    assert rules[BATCH].write(1).kind == "partial"


def test_unknown_op_types_stay_whole():
    assert op_rules("StatelessWhile", {}) == {}
    assert op_rules("NoSuchOp") == {}


@pytest.mark.parametrize("op_type", sorted(RULES))
def test_every_rule_names_known_dimensions_and_layouts(op_type):
    for dim, rule in RULES[op_type].items():
        assert dim in {"batch", "channel", "height", "width", "reduction"}
        for layout in (*rule.reads, *rule.writes):
            assert layout.kind in {"replicated", "sharded", "halo", "partial"}
            assert (layout.axis is None) == (layout.kind in {"replicated", "partial"})
        assert rule.reads and rule.writes


def test_coverage_counts_compute_of_ops_with_an_applicable_rule():
    graph = CostGraph()
    graph.add_op("conv", compute_time=3.0, op_type="Conv2D", attrs=NHWC)
    graph.add_op("relu", compute_time=1.0, op_type="Relu")
    graph.add_op("old_conv", compute_time=2.0, op_type="Conv2D")
    graph.add_op("loop", compute_time=4.0, op_type="While")
    coverage = split_coverage(graph)
    assert coverage.share == pytest.approx(0.4)
    assert coverage.needs_attrs == 2.0
    assert coverage.by_type == (("While", 4.0), ("Conv2D", 2.0))
