"""The reordering floor a split's training deviation is judged against: the unsplit graph fed its
batch in every other order, per value."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfplace.tf_graph.session import virtual_cpu_config
from tfplace.tf_graph.split_check import batch_orders, reordering_floor

pytestmark = pytest.mark.tensorflow


def test_batch_orders_are_every_other_order_of_a_small_batch_and_distinct_samples_of_a_large_one() -> None:
    small = batch_orders(4, 23)
    assert len({tuple(order) for order in small}) == 23 and (0, 1, 2, 3) not in {tuple(o) for o in small}
    large = batch_orders(8, 10)
    assert len({tuple(order) for order in large}) == 10
    assert all(sorted(order) == list(range(8)) and list(order) != list(range(8)) for order in large)


def test_the_reordering_floor_holds_each_weight_and_scalar_fetch_with_its_largest_deviation() -> None:
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
        w = tf.compat.v1.get_variable("w", [3, 2], initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)), name="loss")
        tf.compat.v1.train.AdamOptimizer(0.1, epsilon=1e-9).minimize(loss, name="train")
    feeds = {"x:0": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}
    floor = reordering_floor(
        graph, ["loss:0", "train"], feeds, steps=3, batch_size=4, config=virtual_cpu_config(1), orders=5
    )
    assert floor.orders == 5
    assert {"loss:0 at step 1", "loss:0 at step 3", "w:0 after step 3"} <= set(floor.per_value)
    assert floor.max_deviation == max(floor.per_value.values()) < 1e-4  # float reordering only
