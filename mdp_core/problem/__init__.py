"""The problem: an instance (records, outputs, costs, the mDP graph), its metric, its files, the
partition, the agency's microdata reader and the dataset loaders.

Imports from :mod:`mdp_core.declarations` and :mod:`mdp_core.runtime` only (tests/test_layers.py).
"""
