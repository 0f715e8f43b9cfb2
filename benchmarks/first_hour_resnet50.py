"""What a new user sees: ``tfplace.place`` of a tf_keras ResNet50 training graph on 4 virtual CPUs.

The graph is built in graph mode as docs/quickstart.md shows (``training=True``, the batch-norm
updates of that call with the training op, Momentum); each device gets 60% of what the weights and their momentum
take, so no single device holds even the variables. Run it with standard error to a file to see
what the user sees start to end, the placement table on standard output::

    .venv/bin/python benchmarks/first_hour_resnet50.py 2> stderr.txt

``--image_size`` (default 64) and ``--batch_size`` (default 32) keep it quick; the profile is
measured afresh unless ``--cache_dir`` names a folder that holds it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--cache_dir", default="")
    args = parser.parse_args()

    import tensorflow as tf
    import tf_keras

    import tfplace

    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    size = args.image_size
    with graph.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [None, size, size, 3], name="images")
        labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
        model = tf_keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=1000)
        logits = model(images, training=True)
        loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(labels, logits))
        with tf.control_dependencies(model.get_updates_for(images)):
            train_op = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        init_op = tf.compat.v1.global_variables_initializer()
        parameters = sum(int(np.prod(v.shape)) for v in tf.compat.v1.trainable_variables())

    def feed_fn(batch_size: int) -> dict[object, np.ndarray]:
        rng = np.random.default_rng(batch_size)
        return {
            images: rng.standard_normal((batch_size, size, size, 3)).astype(np.float32),
            labels: rng.integers(0, 1000, batch_size).astype(np.int32),
        }

    memory = int(0.6 * 2 * 4 * parameters)  # 60% of the weights and their momentum, per device
    print(
        f"ResNet50 at {size}x{size}: {len(graph.get_operations()):,} ops, {parameters:,} parameters; "
        f"4 devices of {memory:,} bytes"
    )
    started = time.perf_counter()
    placement = tfplace.place(
        graph, train_op, feed_fn, "/device:CPU:0-3", memory=memory, batch_size=args.batch_size,
        init_op=init_op, cache_dir=args.cache_dir,
    )  # fmt: skip
    print(placement.summary())
    print(f"place took {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
