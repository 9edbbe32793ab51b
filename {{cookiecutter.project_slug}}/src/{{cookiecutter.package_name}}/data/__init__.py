"""The input: the task's record format as the framework reads it, the training
data's statistics, the sources{% if cookiecutter.data_source == "tfrecord" %} (shards, their manifest, the import and data
commands){% endif %}, and each worker's pipeline in global steps."""
