def per_example_loss(labels, logits):
    """Cross-entropy per example against the label smoothed by LABEL_SMOOTHING,
    in float32 whatever the compute dtype (float16 loses the softmax's
    precision). Training adds the regularization once per step; evaluation
    reports this loss alone."""
    logits = tf.cast(logits, tf.float32)
    # Labels of shape [batch] or [batch, 1] (tf_keras's compiled loss adds the 1).
    labels = tf.reshape(tf.cast(labels, tf.int32), tf.shape(logits)[:-1])
    targets = tf.one_hot(labels, NUM_CLASSES)
    return keras.losses.categorical_crossentropy(
        targets, logits, from_logits=True, label_smoothing=LABEL_SMOOTHING
    )


def per_example_metric(labels, logits):
    """1.0 where the highest logit is the label's class, else 0.0."""
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int64)
    return tf.cast(tf.equal(predictions, tf.cast(labels, tf.int64)), tf.float32)


def serving_outputs(logits):
    """What the exported model returns for the model's logits."""
    return {"logits": logits, "probabilities": tf.nn.softmax(logits)}
