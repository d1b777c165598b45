"""The ``mdp-release`` command line.

  mdp-release solve INSTANCE_DIR --method lp --out OUT_DIR
  mdp-release verify INSTANCE_DIR MECHANISM.parquet
  mdp-release export --dataset grid --out DIR
  mdp-release run [--config FILE] [--refresh | --refresh-from STAGE] [--from-manifest MANIFEST]
  mdp-release reproduce [--quick] [--store DIR] [--out DIR]
  mdp-release server start|stop|status

Errors print one line ``mdp-release: error: ...`` and exit with status 2 (bad input) or 1
(verification failed / refused / solver failure).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from mdp_core.errors import InputError, MdpError, PrivacyError, SolverError


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text}")
    return v


def _add_solver_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LP solver (HiGHS)")
    g.add_argument("--solver", choices=["simplex", "ipm"], default="simplex", help="dual simplex (default) or interior point")
    g.add_argument("--threads", type=int, default=0, help="HiGHS threads (0 = HiGHS default)")
    g.add_argument("--time-limit", type=_positive_float, default=float("inf"), metavar="SECONDS")
    g.add_argument("--max-mix", type=_fraction, default=1e-2,
                   help="largest share of uniform noise the exact repair may mix in before refusing (default 0.01)")


def _solver_options(args: argparse.Namespace):
    from mdp_core.lp import SolverOptions

    return SolverOptions(solver=args.solver, threads=args.threads, time_limit=args.time_limit)


def _progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def cmd_solve(args: argparse.Namespace) -> int:
    from mdp_core.io import read_instance, write_mechanism, write_table
    from mdp_core.solve import solve

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError(f"--out {args.out}: exists and is not a directory")
    inst = read_instance(args.instance, epsilon=args.epsilon)
    method_args = {}
    if args.method in ("benders", "colgen"):
        method_args = {"gap_abs": args.gap_abs, "gap_rel": args.gap_rel, "max_iterations": args.max_iterations}
    if args.method == "benders":
        method_args |= {"partition": args.partition, "n_subsets": args.subsets, "seed": args.seed}
    print(
        f"solving {args.instance}: N={inst.n_records}, K={inst.n_outputs}, |E|={inst.n_edges}, "
        f"eps={inst.epsilon:g}, method={args.method}",
        file=sys.stderr,
    )
    sol = solve(inst, args.method, _solver_options(args), progress=_progress, max_mix=args.max_mix, **method_args)
    info = write_mechanism(inst, sol.z, args.out, sol.solve_info())
    if sol.trace is not None:
        write_table(Path(args.out) / "trace.parquet", {c: sol.trace[c].to_numpy() for c in sol.trace.columns})
    print(sol.certificate.summary())
    print(json.dumps({k: info[k] for k in ("method", "status", "objective", "lower_bound", "gap", "iterations", "seconds")}))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from mdp_core.io import read_instance, read_mechanism
    from mdp_core.verify import verify

    inst = read_instance(args.instance)
    z = read_mechanism(args.mechanism, inst.n_records, inst.n_outputs)
    cert = verify(inst, z)
    print(cert.summary())
    if args.json:
        print(json.dumps(cert.as_dict(), sort_keys=True))
    return 0 if cert.passed else 1


def cmd_export(args: argparse.Namespace) -> int:
    from flows.cli_export import build_from_args
    from mdp_core.io import write_instance

    inst = build_from_args(args)
    meta = write_instance(inst, args.out)
    print(
        f"wrote {args.out}: N={meta['n_records']}, K={meta['n_outputs']}, |E|={meta['n_edges']}, "
        f"eps={meta['epsilon']:g}, eta={meta['eta']:g} {meta['distance_unit']}"
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from flows.run import run_from_cli

    return run_from_cli(args)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from flows.run import prepare_environment

    where = prepare_environment()  # before Prefect is imported
    from flows.reproduce import reproduce_from_cli

    return reproduce_from_cli(args, where)


def cmd_server(args: argparse.Namespace) -> int:
    from flows.run import server_from_cli

    return server_from_cli(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdp-release",
        description="Optimal metric-DP perturbation mechanisms (exact LP / Benders) and reproducible releases.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("solve", help="solve an instance directory and write a verified mechanism")
    p.add_argument("instance", help="instance directory (records/outputs/edges/costs.parquet + instance.json)")
    p.add_argument("--method", default="lp", choices=["lp", "colgen", "benders", "exp", "laplace", "constopt"],
                   help="lp: exact LP; colgen: exact LP by column generation; benders: partition + Benders; "
                   "exp / laplace / constopt: baselines")
    p.add_argument("--out", required=True, help="output directory for mechanism.parquet and solve.json")
    p.add_argument("--epsilon", type=_positive_float, default=None, help="override the instance's epsilon")
    p.add_argument("--partition", default="kmdv", choices=["kmdv", "kmrec", "kmadj", "bsc"], help="Benders partitioner")
    p.add_argument("--subsets", type=int, default=25, metavar="M", help="Benders: number of subsets (default 25)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gap-abs", type=float, default=0.0, help="benders/colgen: stop when UB - LB <= this (paper: 0.01)")
    p.add_argument("--gap-rel", type=float, default=1e-6, help="benders/colgen: stop when UB - LB <= this * |UB|")
    p.add_argument("--max-iterations", type=int, default=1000, help="benders/colgen: iteration limit")
    _add_solver_args(p)
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("verify", help="verify a mechanism against an instance (exit 1 on violation)")
    p.add_argument("instance")
    p.add_argument("mechanism", help="mechanism.parquet")
    p.add_argument("--json", action="store_true", help="also print the certificate as JSON")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("export", help="build an instance directory from a dataset")
    from flows.cli_export import add_export_arguments

    add_export_arguments(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("run", help="run the release pipeline (Prefect flow); built-in default without --config")
    from flows.run import add_run_arguments

    add_run_arguments(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("reproduce", help="run the papers' experiment grids and compare with the published numbers")
    p.add_argument("--quick", action="store_true", help="tiny sizes (about a minute), for tests / CI")
    p.add_argument("--store", default="artifacts/store", help="artifact store root")
    p.add_argument("--out", default=None, help="also copy the report, tables and PNGs to this folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None, help="real data folder (default ../shared/data beside the repo)")
    p.add_argument("--refresh", action="store_true", help="recompute every stage, ignoring caches")
    p.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("server", help="start / stop / check a local Prefect server that `run` reuses")
    from flows.run import add_server_arguments

    add_server_arguments(p)
    p.set_defaults(func=cmd_server)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        code = args.func(args)
    except InputError as exc:
        print(f"mdp-release: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. --out names an existing file or an unwritable directory
        print(f"mdp-release: error: {f'{exc.filename}: {exc.strerror}' if exc.filename else exc}", file=sys.stderr)
        return 2
    except (PrivacyError, SolverError, MdpError) as exc:
        print(f"mdp-release: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mdp-release: interrupted", file=sys.stderr)
        return 130
    if getattr(args, "verbose", False):
        print(f"done in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
