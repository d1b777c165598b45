"""mdp_core: the pure library behind mdp-release.

Numpy / scipy / highspy only (pandas and pyarrow for I/O); no Prefect imports. Five layer subpackages
above :mod:`mdp_core.errors` (``InputError``, ``PrivacyError``, ``SolverError``); a module imports only from
its own layer or a lower one, and every name has one import path: the module that defines it (nothing
is re-exported, not even here) (tests/test_layers.py, docs/architecture.md):

- ``declarations`` -- no numerical import: options and their defaults, the solver options, the
  method registry (``methods``), the dataset kinds (``dataset_kinds``), the release contract (stages,
  published files and their columns: ``contract``) and the exact privacy budget (``budget``);
- ``runtime``      -- running long work: atomic files, the cooperative stop token (``control``), killable
  child processes (``isolate``), per-key workers (``executor``);
- ``problem``      -- the PMO instance and its validation, metrics, the mDP graph, the Parquet format (``io``),
  partitions, the agency's microdata reader and the dataset loaders (``datasets/``);
- ``solvers``      -- the one HiGHS adapter (``highs``), the exact LP, row and column generation, Benders, the
  Lagrangian bound, the automatic choice, the baseline mechanisms, ConstOPTMech, the privacy
  certificate and repair (``verify``) and the one entry point ``solve.solve``;
- ``release``      -- protection in the data's metric, exact count noise, CBDP post-processing, the perturbed
  microdata, evaluation, the audit, the report and signatures.
"""

__version__ = "0.1.0"
