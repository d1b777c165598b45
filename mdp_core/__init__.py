"""mdp_core: the pure library behind mdp-release.

Numpy / scipy / highspy only (pandas and pyarrow for I/O); no Prefect imports. Five layer subpackages
above :mod:`mdp_core.errors` (``InputError``, ``PrivacyError``, ``SolverError``); a module imports only from
its own layer or a lower one (tests/test_layers.py, docs/architecture.md):

- ``spec``     -- declarations, no numerical import: options and their defaults, the solver options, the
  method registry (``methods``), the dataset kinds (``dataset_kinds``), the release contract (stages,
  published files and their columns: ``contract``) and the exact privacy budget (``budget``);
- ``runtime``  -- running long work: atomic files, the cooperative stop token (``control``), killable
  child processes (``isolate``), per-key workers (``executor``);
- ``problem``  -- the PMO instance and its validation, metrics, the mDP graph, the Parquet format (``io``),
  partitions, the agency's microdata reader and the dataset loaders (``datasets/``);
- ``solvers``  -- the one HiGHS adapter (``highs``), the exact LP, row and column generation, Benders, the
  Lagrangian bound, the automatic choice, the baseline mechanisms, ConstOPTMech, the privacy
  certificate and repair (``verify``) and the one entry point ``solve.solve``;
- ``release``  -- protection in the data's metric, exact count noise, CBDP post-processing, the perturbed
  microdata, evaluation, the audit, the report and signatures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mdp_core.errors import InputError, MdpError, PrivacyError, SolverError

if TYPE_CHECKING:
    from mdp_core.problem.instance import Instance

__all__ = ["Instance", "InputError", "MdpError", "PrivacyError", "SolverError"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``mdp_core.Instance`` on first use: importing the package stays free of numpy, pandas and scipy,
    so what needs only a light module (the CLI, the artifact store, a fully cached run) does not pay for them."""
    if name == "Instance":
        from mdp_core.problem.instance import Instance

        return Instance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
