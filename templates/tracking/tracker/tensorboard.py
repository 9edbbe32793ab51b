

def make_tracker(config, strategy, plan, model_dir, write_dir):
    """The run's tracker: this worker's TensorBoard event files."""
    return TensorBoardScalars(os.path.join(write_dir, "logs"))
