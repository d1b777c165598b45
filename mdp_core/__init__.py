"""mdp_core: the pure library behind mdp-release.

Numpy / scipy / highspy only (pandas and pyarrow for I/O); no Prefect imports.
Modules are small and named for what they are:

- ``instance``   -- the :class:`Instance` dataclass (one PMO problem) and its validation;
- ``io``         -- the Parquet instance / mechanism format, atomic writes, content hashes;
- ``metrics``    -- distance functions (Euclidean, haversine in km);
- ``graph``      -- the mDP graph (neighbour pairs), components, path distances;
- ``result``     -- ``RawSolution``, the ``Status`` enum, the gap rule and honest status;
- ``highs``      -- the one HiGHS adapter (models from arrays, status map, time limits, retries);
- ``options``    -- option dataclasses as the source of defaults, help texts and CLI arguments;
- ``executor``   -- stateful per-key workers for independent solves (serial, processes);
- ``lp``         -- the exact PMO linear program solved with HiGHS;
- ``colgen``     -- column generation by output (exact LP, with a proven bound);
- ``verify``     -- privacy certificates and the exact repair;
- ``mechanisms`` -- baseline mechanisms (exponential mechanism, planar Laplace);
- ``constopt``   -- ConstOPTMech (Imola et al. 2022) adapted to neighbour-threshold mDP;
- ``solve``      -- one entry point: solve an instance with a method, verify, repair or refuse;
- ``partition``  -- the four partitioners of Qiu 2024 and their balance statistics;
- ``benders``    -- Benders decomposition over a partition (master + subproblems, cuts, bounds);
- ``postprocess``-- CBDP consistent count release (Fioretto et al. 2018) and its baselines;
- ``release``    -- individuals' microdata: draw, perturb, the released table;
- ``evaluate``   -- utility, privacy and bound metrics of a mechanism;
- ``report``     -- plots and markdown;
- ``datasets``   -- built-in and real dataset loaders producing instances.
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
