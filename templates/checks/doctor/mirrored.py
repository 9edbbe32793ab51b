

# With no GPU, the doctor splits the CPU: one replica could not show a sync error.
DOCTOR_CPU_REPLICAS = 2


def check_replicas(config):
    """This machine's replicas: every GPU, or --cpu-replicas logical CPUs
    (DOCTOR_CPU_REPLICAS where there is no GPU)."""
    cpu_replicas = config.cpu_replicas
    if cpu_replicas is None and not tf.config.list_physical_devices("GPU"):
        cpu_replicas = DOCTOR_CPU_REPLICAS
    return check_local_replicas(cpu_replicas)


def replicas_reading(plan):
    return "the replicas"
