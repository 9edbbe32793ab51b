

def worker_dir(model_dir, strategy):
    """Where this process writes: one machine, so the model directory itself."""
    return model_dir


def remove_worker_dir(path, model_dir):
    """Nothing to clean up on one machine."""
