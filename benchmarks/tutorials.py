"""TensorFlow's own tutorials, as references for the generated training code.

Each function is the tutorial's training code, given the same model, data,
global batch and strategy as the generated code it is measured against:

- "Distributed training with Keras" (tensorflow.org/tutorials/distribute/keras):
  compile under the scope, then `model.fit` on the batched dataset;
- "Custom training with tf.distribute.Strategy"
  (tensorflow.org/tutorials/distribute/custom_training): one step per
  `tf.function` call, the loss summed over the replicas and accumulated per epoch.

Departures from the text, each so the reference runs and measures only training:
`verbose=0` and no callbacks (the progress bar and the per-epoch checkpoint
would count against the tutorial); `reduction=None` (Keras 3's name for
`Reduction.NONE`); and the custom loop's optimizer is built under the scope
before the first step, which Keras 3 needs (Adam created there but built lazily
in `strategy.run` fails with "You must feed a value for placeholder tensor").
"""

import keras
import tensorflow as tf


class KerasTutorial:
    """The Keras tutorial's model, compiled under the scope, and its `fit`."""

    def __init__(self, strategy, build_model, train_dataset):
        with strategy.scope():
            self.model = build_model()
            self.model.compile(
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=keras.optimizers.Adam(),
                metrics=["accuracy"],
            )
        self.train_dataset = train_dataset

    def epoch(self):
        self.model.fit(self.train_dataset, epochs=1, verbose=0)


class CustomTrainingTutorial:
    """The custom-training tutorial's state and its `distributed_train_step`."""

    def __init__(self, strategy, build_model, train_dataset):
        self.train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
        with strategy.scope():
            loss_object = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=None
            )
            self.train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
            self.model = build_model()
            self.optimizer = keras.optimizers.Adam(learning_rate=0.001)
            self.optimizer.build(self.model.trainable_variables)

        def compute_loss(labels, predictions, model_losses):
            per_example_loss = loss_object(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss)
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
            return loss

        def train_step(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                predictions = self.model(images, training=True)
                loss = compute_loss(labels, predictions, self.model.losses)
            gradients = tape.gradient(loss, self.model.trainable_variables)
            self.optimizer.apply_gradients(
                zip(gradients, self.model.trainable_variables, strict=True)
            )
            self.train_accuracy.update_state(labels, predictions)
            return loss

        @tf.function
        def distributed_train_step(dataset_inputs):
            per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

        self.distributed_train_step = distributed_train_step

    def epoch(self):
        """One epoch as the tutorial runs it; returns the mean training loss."""
        total_loss = 0.0
        num_batches = 0
        for x in self.train_dist_dataset:
            total_loss += self.distributed_train_step(x)
            num_batches += 1
        train_loss = total_loss / num_batches
        self.train_accuracy.reset_state()
        return float(train_loss)
