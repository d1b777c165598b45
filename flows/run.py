"""``mdp-release run``: placeholder until the Prefect release flow lands (issue 4)."""

from __future__ import annotations

import argparse


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="TOML config (default: the built-in default release)")


def run_from_cli(args: argparse.Namespace) -> int:
    import tempfile

    from mdp_core.datasets import grid
    from mdp_core.io import write_instance, write_mechanism
    from mdp_core.solve import solve

    inst = grid()
    out = tempfile.mkdtemp(prefix="mdp-release-")
    write_instance(inst, out)
    sol = solve(inst, "lp")
    write_mechanism(inst, sol.z, out, sol.solve_info())
    print(sol.certificate.summary())
    print(f"objective {sol.objective:.6g}, written to {out}")
    return 0
