"""Stage ``prior`` (only when ``[release] prior`` is not "dataset"): the prior the mechanism is optimised for.

params: {"source": "uniform" | "file" | "dp", "file": path, "file_sha256": hex (file), "table": the sealed
table's keyed handle, "population": str, "draw": commitment, "eps_prior": float, "max_distance": float | None,
"max_total_epsilon": float | None, "require_cap": bool (dp)}.

* ``uniform``: 1 / N;
* ``file``: a public CSV / Parquet file with a ``prior`` column of N non-negative numbers (record order);
* ``dp``: a DP histogram of the secret microdata (the table the door sealed) -- exact discrete Laplace noise (OpenDP, L1 sensitivity 2:
  one individual moves) with budget ``eps_prior``, kept in the private store so a re-run reproduces it --
  then max(noisy, 0) + 1 per record, normalised (post-processing). The mechanism, and so the release,
  depends on it: its ``eps_prior`` joins the release's guarantee. It is charged to the population's
  ledger (key: the draw and the records' dataset, :func:`tasks.measure.charge_key`) *before* it is
  measured, and the object stays private (0700 / 0600) until a release publishes it.

File: prior.parquet (``record_id``, ``prior``; public: a DP output or public data). The export stage puts
it into the instance it solves.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from artifacts.private import PrivateStore
from artifacts.store import ArtifactRef, ObjectWriter, Store
from mdp_core.errors import InputError
from tasks.common import instance_with_graph, run_stage
from tasks.measure import charge_key, charge_then_measure, individuals, kept_measure


def _from_file(path: str, n: int):  # -> (N,) float64
    import numpy as np

    from mdp_core.problem.microdata import read_table

    df = read_table(path, "prior").frame  # same reader: .csv / .parquet, special files refused, clear errors
    if "prior" not in df.columns or len(df) != n:
        raise InputError(f"prior file {path}: needs a 'prior' column with one row per record ({n}), got {len(df)} rows")
    p = df["prior"].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise InputError(f"prior file {path}: values must be finite, >= 0 and not all 0")
    return p


def _compute(w: ObjectWriter, store: Store, params: dict[str, Any], upstream: dict) -> None:
    import numpy as np

    from mdp_core.problem.io import write_table
    from mdp_core.problem.microdata import histogram
    from mdp_core.release.noise import MOVE_SENSITIVITY

    inst = instance_with_graph(store, upstream["dataset"], upstream["graph"])
    n = inst.n_records
    source = params["source"]
    if source == "uniform":
        p = np.ones(n)
    elif source == "file":
        p = _from_file(params["file"], n)
    elif source == "dp":
        private = PrivateStore(store.root)
        draw = private.load(params["draw"])
        eps_prior = float(params["eps_prior"])
        key = charge_key("prior", draw, upstream["dataset"].content_hash, n, eps_prior, params.get("max_distance"))
        meas = charge_then_measure(  # the door: nothing is measured before it
            private,
            draw,
            params,
            {key: ("prior", eps_prior)},
            lambda: kept_measure(private, draw, key)(
                histogram(individuals(private, params, inst, draw), n), MOVE_SENSITIVITY, eps_prior
            ),
        )
        p = np.maximum(meas.values, 0).astype(np.float64) + 1.0
    else:
        raise InputError(f"unknown prior source {source!r}")
    write_table(w.file("prior.parquet"), {"record_id": np.arange(n, dtype=np.int64), "prior": p / p.sum()})
    w.meta.update({"source": source, "eps_prior": float(params["eps_prior"]) if source == "dp" else 0.0})


@task(name="prior")
def prior(store: str, params: dict[str, Any], dataset: ArtifactRef, graph: ArtifactRef) -> ArtifactRef:
    private = params.get("source") == "dp"  # a DP output: derived from the secret table, owner-only until published
    return run_stage("prior", __name__, store, params, {"dataset": dataset, "graph": graph}, _compute, private=private)
