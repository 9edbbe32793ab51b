"""What a task is written with: the kinds of field its record is declared with,
the heads of the common problems, the training data's moments{% if cookiecutter.task == "image" %}, ImageNet's crops{% endif %}.
Nothing here imports the task."""
