@keras.saving.register_keras_serializable(package="{{ cookiecutter.package_name }}")
class Lamb(keras.optimizers.Optimizer):
    """LAMB on Keras 3's optimizer (see the module's docstring)."""

    def __init__(
        self,
        learning_rate=0.001,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay_rate=0.01,
        name="lamb",
        **kwargs,
    ):
        # Its decay is in the step: the base class's would decay every variable again.
        if kwargs.get("weight_decay") is not None:
            raise ValueError("give Lamb weight_decay_rate, not weight_decay")
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay_rate = weight_decay_rate

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"]
        )

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, (gradient - m) * (1 - self.beta_1))
        self.assign_add(v, (tf.square(gradient) - v) * (1 - self.beta_2))
        m_hat = tf.convert_to_tensor(m) / (1 - tf.pow(tf.cast(self.beta_1, dtype), step))
        v_hat = tf.convert_to_tensor(v) / (1 - tf.pow(tf.cast(self.beta_2, dtype), step))
        weights = tf.convert_to_tensor(variable)
        update = lamb_step(weights, m_hat, v_hat, self.epsilon, self.weight_decay_rate)
        self.assign_sub(variable, tf.cast(learning_rate, dtype) * update)

    def get_config(self):
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay_rate": self.weight_decay_rate,
        }
