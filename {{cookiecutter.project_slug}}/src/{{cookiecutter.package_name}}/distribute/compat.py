"""The differences between Keras 3 and tf_keras, in one place: API names, and
what Keras 3 needs fixed under a strategy.

Everything else imports `keras` from here, so the rest of the package reads the
same for either Keras package.
"""

{% include "distribute/compat/" ~ cookiecutter.keras_package ~ ".py" %}