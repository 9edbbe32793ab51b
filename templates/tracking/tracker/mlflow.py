

def make_tracker(config, strategy, plan, model_dir, write_dir):
    """The run's tracker: this worker's TensorBoard event files and, on the
    chief, the run's MLflow run (the other workers train the same steps)."""
    tensorboard = TensorBoardScalars(os.path.join(write_dir, "logs"))
    if not is_chief(strategy):
        return tensorboard
    # Here, not above: importing MLflow takes seconds, which only a run that
    # records to it should pay (not the doctor, nor the other workers).
    from {{ cookiecutter.package_name }}.tracking.mlflow_run import MlflowTracker, run_params

    return MlflowTracker(tensorboard, config, model_dir, run_params(config, strategy, plan))
