"""Running long work: atomic files, the cooperative stop token, killable child processes, executors.

Imports only :mod:`mdp_core.errors` and :mod:`mdp_core.declarations` from the library (tests/test_layers.py).
"""
