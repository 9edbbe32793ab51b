from {{ cookiecutter.package_name }}.distribute.compat import keras

# The policy of --mixed-precision: float16 compute, float32 weights.
MIXED_POLICY = "mixed_float16"


def set_precision_policy(mixed_precision):
    """MIXED_POLICY compute with float32 weights, or float32 (what equivalence
    checks use); must run before the model is built."""
    keras.mixed_precision.set_global_policy(MIXED_POLICY if mixed_precision else "float32")
