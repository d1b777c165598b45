"""The ``mdp-release`` command line.

  mdp-release solve INSTANCE_DIR --method lp --out OUT_DIR
  mdp-release verify INSTANCE_DIR MECHANISM.parquet
  mdp-release audit RUN_DIR
  mdp-release export --dataset grid --out DIR
  mdp-release run [--config FILE] [--refresh | --refresh-from STAGE] [--from-manifest MANIFEST]
  mdp-release reproduce [--quick] [--store DIR] [--out DIR]
  mdp-release server start|stop|status
  mdp-release serve --cron EXPR | --interval SECONDS [--config FILE] [--name N]
  mdp-release deploy --pool NAME [--cron EXPR | --interval SECONDS] [--config FILE] [--name N]

Errors print one line ``mdp-release: error: ...`` and exit with status 2 (bad input) or 1
(verification failed / refused / solver failure).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from mdp_core.errors import InputError, MdpError, PrivacyError, SolverError
from mdp_core.methods import METHOD_NAMES, PARTITIONERS


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
    """HiGHS settings and every registered method's options, built from their option dataclasses
    (``highs.SolverOptions``, ``solve.options_class(method)``): one place defines each option, its
    default and its help. Method options not given on the command line take the method's default."""
    from mdp_core.highs import SolverOptions
    from mdp_core.options import add_arguments
    from mdp_core.solve import METHODS, options_class

    g = p.add_argument_group("LP solver (HiGHS)")
    add_arguments(
        g,
        [SolverOptions],
        skip=("primal_tolerance", "dual_tolerance", "presolve"),
        types={"time_limit": _positive_float},
        suppress=False,
    )
    g.add_argument(
        "--max-mix",
        type=_fraction,
        default=1e-2,
        help="largest share of uniform noise the exact repair may mix in before refusing (default 0.01)",
    )
    # flags the solve sub-command already defines (their dest -> the option name)
    defined = {
        "partition": "partition",
        "subsets": "n_subsets",
        "seed": "seed",
        "gap_abs": "gap_abs",
        "gap_rel": "gap_rel",
        "max_iterations": "max_iterations",
    }
    m = p.add_argument_group("method options (default: the chosen method's own)")
    classes = [c for c in (options_class(name) for name in METHODS) if c is not None]
    added = add_arguments(m, classes, skip=defined.values())
    p.set_defaults(
        **{dest: None for dest in defined},  # None: not given, the method's default applies
        method_options={**defined, **{name: name for name in added}},
    )


def _solver_options(args: argparse.Namespace):
    from mdp_core.highs import SolverOptions

    return SolverOptions(solver=args.solver, threads=args.threads, time_limit=args.time_limit)


def _progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def cmd_solve(args: argparse.Namespace) -> int:
    from mdp_core.io import read_instance, write_mechanism, write_table
    from mdp_core.solve import solve

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError(f"--out {args.out}: exists and is not a directory")
    inst = read_instance(args.instance, epsilon=args.epsilon)
    # only the method options given on the command line (solve() rejects one the method does not take)
    method_args = {
        name: getattr(args, dest) for dest, name in args.method_options.items() if getattr(args, dest, None) is not None
    }
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
    print(
        json.dumps(
            {k: info[k] for k in ("method", "status", "objective", "lower_bound", "gap", "iterations", "seconds")}
        )
    )
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


def cmd_audit(args: argparse.Namespace) -> int:
    from mdp_core.audit import audit_release

    findings = audit_release(args.run_dir)
    for line in findings:
        print(f"{args.run_dir}: {line}")
    if not findings:
        print(f"{args.run_dir}: OK (files, instance, mechanism certificate, microdata provenance all check out)")
    return 1 if findings else 0


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
    from flows.reproduce.flow import reproduce_from_cli

    return reproduce_from_cli(args, where)


def cmd_server(args: argparse.Namespace) -> int:
    from flows.run import server_from_cli

    return server_from_cli(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from flows.operate import serve_from_cli

    return serve_from_cli(args)


def cmd_deploy(args: argparse.Namespace) -> int:
    from flows.operate import deploy_from_cli

    return deploy_from_cli(args)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``mdp-release: error: ...``, exit 2) instead of usage + error;
    ``--help`` still shows the usage. Subcommand parsers inherit this class."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sub = self.prog.removeprefix("mdp-release").strip()
        print(f"mdp-release: error: {sub + ': ' if sub else ''}{_one_line(message)}", file=sys.stderr)
        raise SystemExit(2)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    from flows.run import add_run_arguments

    add_run_arguments(p)
    p.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print tracebacks and Prefect's error logs on the terminal (else: one error line)",
    )


def _reproduce_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="tiny sizes (about a minute), for tests / CI")
    p.add_argument("--store", default="artifacts/store", help="artifact store root")
    p.add_argument("--out", default=None, help="also copy the report, tables and PNGs to this folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None, help="real data folder (default ../shared/data beside the repo)")
    p.add_argument("--refresh", action="store_true", help="recompute every stage, ignoring caches")


def _solve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("instance", help="instance directory (records/outputs/edges/costs.parquet + instance.json)")
    p.add_argument(
        "--method",
        default="auto",
        choices=list(METHOD_NAMES),
        help="auto (default): lp or rowgen from the instance's structure, the choice and reason go into "
        "solve.json; lp: exact LP; rowgen: exact LP by row generation (dense graphs); colgen: by column "
        "generation; benders: partition + Benders; exp / laplace / constopt: baselines",
    )
    p.add_argument("--out", required=True, help="output directory for mechanism.parquet and solve.json")
    p.add_argument("--epsilon", type=_positive_float, default=None, help="override the instance's epsilon")
    p.add_argument("--partition", default="kmdv", choices=list(PARTITIONERS), help="Benders partitioner")
    p.add_argument("--subsets", type=int, default=25, metavar="M", help="Benders: number of subsets (default 25)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gap-abs", type=float, default=0.0, help="benders/colgen: stop when UB - LB <= this (paper: 0.01)")
    p.add_argument("--gap-rel", type=float, default=1e-6, help="benders/colgen: stop when UB - LB <= this * |UB|")
    p.add_argument("--max-iterations", type=int, default=1000, help="benders/colgen: iteration limit")
    _add_solver_args(p)


def _verify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("instance")
    p.add_argument("mechanism", help="mechanism.parquet")
    p.add_argument("--json", action="store_true", help="also print the certificate as JSON")


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a release folder, e.g. artifacts/store/runs/<run>/")


def _export_arguments(p: argparse.ArgumentParser) -> None:
    from flows.cli_export import add_export_arguments

    add_export_arguments(p)


def _server_arguments(p: argparse.ArgumentParser) -> None:
    from flows.run import add_server_arguments

    add_server_arguments(p)


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    from flows.operate import add_serve_arguments

    add_serve_arguments(p)


def _deploy_arguments(p: argparse.ArgumentParser) -> None:
    from flows.operate import add_deploy_arguments

    add_deploy_arguments(p)


# name, help, add its arguments, run it
COMMANDS: tuple[
    tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]], ...
] = (
    ("solve", "solve an instance directory and write a verified mechanism", _solve_arguments, cmd_solve),
    ("verify", "verify a mechanism against an instance (exit 1 on violation)", _verify_arguments, cmd_verify),
    (
        "audit",
        "re-check a published release from its files alone (exit 1 on any discrepancy)",
        _audit_arguments,
        cmd_audit,
    ),
    ("export", "build an instance directory from a dataset", _export_arguments, cmd_export),
    ("run", "run the release pipeline (Prefect flow); built-in default without --config", _run_arguments, cmd_run),
    (
        "reproduce",
        "run the papers' experiment grids and compare with the published numbers",
        _reproduce_arguments,
        cmd_reproduce,
    ),
    ("server", "start / stop / check a local Prefect server that `run` reuses", _server_arguments, cmd_server),
    ("serve", "serve scheduled releases from this process (flow.serve; needs a server)", _serve_arguments, cmd_serve),
    (
        "deploy",
        "deploy scheduled releases to a work pool (run by `prefect worker start`)",
        _deploy_arguments,
        cmd_deploy,
    ),
)


def build_parser(only: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The command-line parser. ``only``: the commands whose arguments to build (None: all). The others
    are listed (``--help``) but take no arguments: building ``solve``'s options imports every method's
    module, which ``mdp-release run`` should not pay for (:func:`main` builds only the command given)."""
    parser = _Parser(
        prog="mdp-release",
        description="Optimal metric-DP perturbation mechanisms (exact LP / Benders) and reproducible releases.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="print tracebacks (and Prefect's error logs) on the terminal"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = None if only is None else set(only)
    for name, text, add_arguments, func in COMMANDS:
        p = sub.add_parser(name, help=text)
        if wanted is None or name in wanted:
            add_arguments(p)
        p.set_defaults(func=func)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (the first word that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def _one_line(text: object) -> str:
    """An error message on one line (multi-line messages, e.g. pydantic's, joined with '; ')."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip()) or "unknown error"


def _fail(message: object, code: int, debug: bool) -> int:
    """Print ``mdp-release: error: <message>`` (one line; the traceback too with --debug), return ``code``."""
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)
    print(f"mdp-release: error: {_one_line(message)}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    command = _command(args_in)
    # Still silent after 2.5 s (building the options, imports, reading input): one line, so no command looks
    # hung (run, serve, deploy and server print their own first line at once).
    import threading

    notice = threading.Timer(2.5, lambda: print(f"mdp-release {command}: working...", file=sys.stderr, flush=True))
    notice.daemon = True
    if command in ("solve", "verify", "audit", "export", "reproduce"):
        notice.start()
    parser = build_parser(only=[command] if command else [])
    try:
        args = parser.parse_args(args_in)
    except SystemExit as exc:  # a bad option (one line printed by _Parser.error) or --help
        notice.cancel()
        return exc.code if isinstance(exc.code, int) else 2
    debug = bool(getattr(args, "debug", False))
    t0 = time.perf_counter()
    try:
        code = args.func(args)
    except InputError as exc:
        return _fail(exc, 2, debug)
    except TimeoutError as exc:  # a stage over its [run.timeouts] limit (an OSError, but not bad input)
        return _fail(f"timed out: {str(exc).rstrip('.')} (a stage exceeded its [run] timeouts limit)", 1, debug)
    except OSError as exc:  # e.g. --out names an existing file or an unwritable directory
        return _fail(f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else exc, 2, debug)
    except (PrivacyError, SolverError, MdpError) as exc:
        return _fail(exc, 1, debug)
    except KeyboardInterrupt:
        print("mdp-release: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # anything unforeseen (inside the flow too): one line, traceback with --debug
        return _fail(f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1, debug)
    finally:
        notice.cancel()
    if getattr(args, "verbose", False):
        print(f"done in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
