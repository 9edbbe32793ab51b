def per_example_loss(labels, logits):
    """Cross-entropy per example, in float32 whatever the compute dtype (float16
    loses the softmax's precision). Training adds the regularization once per
    step; evaluation reports this loss alone."""
    logits = tf.cast(logits, tf.float32)
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def per_example_metric(labels, logits):
    """1.0 where the highest logit is the label's class, else 0.0."""
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int64)
    return tf.cast(tf.equal(predictions, tf.cast(labels, tf.int64)), tf.float32)
