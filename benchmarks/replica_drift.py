"""How far the replicas' copies of a model drift apart under a non-deterministic
kernel, step after step (issue 48): the figures in the generated README's
"Replica copies, checked at every checkpoint".

An Embedding trained with plain SGD on 2 logical CPU replicas: its sparse
gradient is applied as a scatter-add over repeated token ids, which TensorFlow
runs on several threads, so each replica rounds the same all-reduced update its
own way. Prints the largest difference between the copies of each variable
that differs, at a few steps; with --deterministic (op determinism) it stays 0.

Run: .venv/bin/python benchmarks/replica_drift.py [--steps 2000] [--deterministic]
"""

import argparse

import numpy as np
import tensorflow as tf

REPORTED_STEPS = (1, 4, 25, 100, 500, 1000, 2000, 5000)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--vocabulary", type=int, default=2000, help="embedding rows")
    parser.add_argument("--length", type=int, default=200, help="longest sequence of ids")
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--deterministic", action="store_true", help="op determinism on")
    args = parser.parse_args(argv)

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    import keras  # after the devices are split

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((args.length,), dtype="int64"),
                keras.layers.Embedding(args.vocabulary, 16),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(1),
            ]
        )
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    loss = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def step(tokens, labels):
        def replica_step(tokens, labels):
            with tf.GradientTape() as tape:
                per_example = loss(labels[:, None], model(tokens, training=True))
                scaled = tf.reduce_sum(per_example) / args.batch
            gradients = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))

        strategy.run(replica_step, args=(tokens, labels))

    def halves(tokens, labels):
        """Each replica's half of a global batch."""
        return strategy.experimental_distribute_values_from_function(
            lambda context: (
                tokens[context.replica_id_in_sync_group :: 2],
                labels[context.replica_id_in_sync_group :: 2],
            )
        )

    rng = np.random.default_rng(0)
    for number in range(1, args.steps + 1):
        # Sequences of 3 to `length` ids, padded with id 0 (as text is): the
        # padding repeats one row's id thousands of times a step.
        lengths = rng.integers(3, args.length, args.batch)
        tokens = np.zeros((args.batch, args.length), np.int64)
        for row, length in enumerate(lengths):
            tokens[row, :length] = rng.integers(1, args.vocabulary, length)
        step(*halves(tokens, (tokens[:, 0] % 2).astype("float32")))
        if number in REPORTED_STEPS or number == args.steps:
            spreads = {}
            for variable in model.trainable_variables:
                first, *others = strategy.experimental_local_results(variable.value)
                spread = max(float(np.max(np.abs(other - first))) for other in others)
                if spread:
                    spreads[variable.path] = spread
            print(
                f"step {number}: largest difference {max(spreads.values(), default=0.0):.2g}"
                f" ({', '.join(sorted(spreads)) or 'every copy equal'})",
                flush=True,
            )


if __name__ == "__main__":
    main()
