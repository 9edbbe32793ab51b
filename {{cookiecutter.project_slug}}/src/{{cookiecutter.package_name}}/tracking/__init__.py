"""Where a run's scalars go: TensorBoard{% if cookiecutter.tracking == "mlflow" %}, and the run in MLflow{% endif %}."""
