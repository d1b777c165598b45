"""Solving the PMO LP: the HiGHS adapter, the exact LP, row and column generation, Benders, the
Lagrangian bound, the baselines, the privacy certificate (:mod:`mdp_core.solvers.verify`) and the one
entry point :func:`mdp_core.solvers.solve.solve`.

Imports from :mod:`mdp_core.declarations`, :mod:`mdp_core.runtime` and :mod:`mdp_core.problem` only
(tests/test_layers.py).
"""
