"""Declarations: options, methods, dataset kinds, the release contract and the privacy budget.

The bottom layer. Plain Python only: no numerical library (numpy, scipy, pandas, pyarrow, highspy, opendp)
is imported here, so the CLI, the config and the docs generator read every declaration for free
(checked by tests/test_layers.py).
"""
