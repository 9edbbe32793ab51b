@keras.saving.register_keras_serializable(package="{{ cookiecutter.package_name }}")
class Lamb(keras.optimizers.Optimizer):
    """LAMB on tf_keras's optimizer (see the module's docstring)."""

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
        super().__init__(name=name, **kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay_rate = weight_decay_rate

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._built = True
        self._momentums = [self.add_variable_from_reference(var, "m") for var in var_list]
        self._velocities = [self.add_variable_from_reference(var, "v") for var in var_list]

    def update_step(self, gradient, variable):
        dtype = variable.dtype
        gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)
        step = tf.cast(self.iterations + 1, dtype)
        index = self._index_dict[self._var_key(variable)]
        m, v = self._momentums[index], self._velocities[index]
        m.assign_add((gradient - m) * (1 - self.beta_1))
        v.assign_add((tf.square(gradient) - v) * (1 - self.beta_2))
        m_hat = m / (1 - tf.pow(tf.cast(self.beta_1, dtype), step))
        v_hat = v / (1 - tf.pow(tf.cast(self.beta_2, dtype), step))
        update = lamb_step(variable, m_hat, v_hat, self.epsilon, self.weight_decay_rate)
        variable.assign_sub(tf.cast(self.learning_rate, dtype) * update)

    def get_config(self):
        return {
            **super().get_config(),
            "learning_rate": self._serialize_hyperparameter(self._learning_rate),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay_rate": self.weight_decay_rate,
        }
