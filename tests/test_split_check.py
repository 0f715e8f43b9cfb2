"""The reordering floor a split's training deviation is judged against (the unsplit graph fed its
batch in every other order, per value), and the split's training checked one step at a time."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfplace.split.rules import BATCH
from tfplace.tf_graph.session import virtual_cpu_config
from tfplace.tf_graph.split_check import ReorderingFloor, batch_orders, compare_steps, reordering_floor
from tfplace.tf_graph.split_rewrite import uniform_plan

pytestmark = pytest.mark.tensorflow


def test_batch_orders_are_every_other_order_of_a_small_batch_and_distinct_samples_of_a_large_one() -> None:
    small = batch_orders(4, 23)
    assert len({tuple(order) for order in small}) == 23 and (0, 1, 2, 3) not in {tuple(o) for o in small}
    large = batch_orders(8, 10)
    assert len({tuple(order) for order in large}) == 10
    assert all(sorted(order) == list(range(8)) and list(order) != list(range(8)) for order in large)


def small_training_graph() -> tuple[tf.Graph, dict[str, np.ndarray]]:
    """A matmul, a mean squared loss and Adam on a batch of 4."""
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
        w = tf.compat.v1.get_variable("w", [3, 2], initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)), name="loss")
        tf.compat.v1.train.AdamOptimizer(0.1, epsilon=1e-9).minimize(loss, name="train")
    return graph, {"x:0": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}


def test_the_reordering_floor_holds_each_weight_and_scalar_fetch_with_its_largest_deviation() -> None:
    graph, feeds = small_training_graph()
    floor = reordering_floor(
        graph, ["loss:0", "train"], feeds, steps=3, batch_size=4, config=virtual_cpu_config(1), orders=5
    )
    assert floor.orders == 5 == len(floor.per_order)
    assert {"loss:0 at step 1", "loss:0 at step 3", "w:0 after step 3"} <= set(floor.per_value)
    assert floor.max_deviation == max(floor.per_value.values()) < 1e-4  # float reordering only
    assert all(floor.per_value[name] == max(d[name] for d in floor.per_order) for name in floor.per_value)


def test_a_value_is_beyond_the_floor_only_past_the_tolerance_and_every_order_and_orders_count_alike() -> None:
    per_order = [
        {"a": 1.0, "b": 0.5, "c": 1e-6},
        {"a": 3.0, "b": 0.2, "c": 1e-6},
        {"a": 2.0, "b": 0.1, "c": 0.0},
    ]
    floor = ReorderingFloor(3.0, "a", {"a": 3.0, "b": 0.5, "c": 1e-6}, 3, per_order)
    split = {"a": 2.5, "b": 0.7, "c": 1e-5}
    assert floor.beyond(split, 1e-4) == [("b", 0.7, 0.5)]  # c is beyond its floor but within the tolerance
    assert floor.beyond(split, 1e-4, without=0) == [("b", 0.7, 0.2)]
    # order 0: b beyond the others' 0.2; order 1: a beyond the others' 2.0; order 2: nothing
    assert floor.beyond_the_others(1e-4) == [1, 1, 0]


def test_each_step_of_a_batch_split_from_the_unsplit_state_matches_the_unsplit_step() -> None:
    graph, feeds = small_training_graph()
    plan = uniform_plan(graph, ["/device:CPU:0", "/device:CPU:1"], BATCH)
    config = virtual_cpu_config(2)
    steps = compare_steps(graph, plan, ["loss:0", "train"], feeds, steps=3, config=config, batch_size=4)
    assert [s.step for s in steps] == [1, 2, 3]
    assert all(s.deviation < 1e-6 and s.floor is None for s in steps), steps
    assert {s.worst for s in steps} <= {
        "loss:0",
        "w:0",
        "w/Adam:0",
        "w/Adam_1:0",
        "beta1_power:0",
        "beta2_power:0",
    }
    measured = compare_steps(
        graph,
        plan,
        ["loss:0", "train"],
        feeds,
        steps=2,
        config=config,
        batch_size=4,
        floor_above=-1.0,
        orders=3,
    )
    assert all(s.floor is not None and s.floor < 1e-6 and "(order [" in s.floor_worst for s in measured)
