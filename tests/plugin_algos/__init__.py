"""Two algorithms defined outside ``kilorl/``, registered through the ``kilorl.algorithms``
entry point as a third-party package registers (``tests/trainer/test_plugin_algorithms.py``)."""
