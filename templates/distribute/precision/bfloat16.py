import tensorflow as tf

from {{ cookiecutter.package_name }} import TrainerError
from {{ cookiecutter.package_name }}.distribute.compat import keras

# The policy of --mixed-precision: bfloat16 compute, float32 weights.
MIXED_POLICY = "mixed_bfloat16"
# GPUs with bfloat16 math: Ampere (A100, A10, L4, RTX 30xx) and newer.
BFLOAT16_COMPUTE_CAPABILITY = (8, 0)


def set_precision_policy(mixed_precision):
    """MIXED_POLICY compute with float32 weights, or float32 (what equivalence
    checks use); must run before the model is built. Refused on GPUs without
    bfloat16 math."""
    if mixed_precision:
        check_bfloat16_gpus(gpu_compute_capabilities())
    keras.mixed_precision.set_global_policy(MIXED_POLICY if mixed_precision else "float32")


def gpu_compute_capabilities():
    """(major, minor) of each visible GPU that reports one (CUDA GPUs do)."""
    details = [
        tf.config.experimental.get_device_details(gpu)
        for gpu in tf.config.list_physical_devices("GPU")
    ]
    return [found["compute_capability"] for found in details if "compute_capability" in found]


def check_bfloat16_gpus(capabilities):
    """Refuse mixed_bfloat16 on GPUs without bfloat16 math (CPUs are fine)."""
    old = [
        f"GPU {index} is {major}.{minor}"
        for index, (major, minor) in enumerate(capabilities)
        if (major, minor) < BFLOAT16_COMPUTE_CAPABILITY
    ]
    if old:
        raise TrainerError(
            "mixed_bfloat16 needs GPUs of compute capability 8.0 or newer, but "
            + ", ".join(old)
            + " - pass --no-mixed-precision, or bake the project with mixed_precision=float16"
        )
