

def mixed_precision_config(config):
    """The run's config, under MIXED_POLICY (a float32 project has no setting for it)."""
    keras.mixed_precision.set_global_policy(MIXED_POLICY)
    return config
