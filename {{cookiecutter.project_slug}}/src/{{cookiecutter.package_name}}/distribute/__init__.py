"""The processes and devices a run spreads over: the quiet start of TensorFlow,
SIGTERM from the first moment, the one place a strategy is made{% if cookiecutter.distribution == "multi_worker" %},
TF_CONFIG and the local launcher{% endif %}, and what Keras needs under a
strategy{% if cookiecutter.mixed_precision != "no" %} (and the mixed precision policy){% endif %}."""
