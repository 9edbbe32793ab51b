

def mixed_precision_config(config):
    """The run's config with mixed precision on, whatever its flags (the engine
    sets the policy from it)."""
    return dataclasses.replace(config, mixed_precision=True)
