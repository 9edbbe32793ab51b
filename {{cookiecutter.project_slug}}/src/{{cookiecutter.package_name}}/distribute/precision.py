"""Mixed precision: the Keras policy of --mixed-precision, set before any model
is built (the engines' and export's)."""

{% include "distribute/precision/" ~ cookiecutter.mixed_precision ~ ".py" ignore missing %}