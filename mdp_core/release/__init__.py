"""Privacy and release: protection in the data's metric, exact count noise, CBDP post-processing,
the perturbed microdata, evaluation, the audit, the report and signatures.

The top layer: may import every other layer of :mod:`mdp_core`, never Prefect, ``tasks``, ``flows`` or
``artifacts`` (tests/test_layers.py).
"""
