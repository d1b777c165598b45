"""The ``mdp-release`` command line.

  mdp-release solve INSTANCE_DIR --method lp --out OUT_DIR
  mdp-release verify INSTANCE_DIR MECHANISM.parquet
  mdp-release audit RUN_DIR
  mdp-release check --config FILE [--json]
  mdp-release export --dataset grid --out DIR
  mdp-release run [--config FILE] [--refresh | --refresh-from STAGE] [--from-manifest MANIFEST [--microdata PATH]]
  mdp-release reproduce [--quick] [--store DIR] [--out DIR]
  mdp-release server start|stop|status
  mdp-release serve --cron EXPR | --interval SECONDS [--config FILE] [--name N]
  mdp-release deploy --pool NAME [--cron EXPR | --interval SECONDS] [--config FILE] [--name N]
  mdp-release store [--store DIR | --config FILE] [--json] [--prune-objects]
  mdp-release key [rotate --by WHO --why TEXT] [--store DIR | --config FILE]
  mdp-release approve RUN_ID --by WHO [--note TEXT] [--max-charge X] [--min-left Y] | --reject

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
from typing import Any

from mdp_core.declarations.methods import METHOD_NAMES
from mdp_core.errors import InputError, MdpError, PrivacyError, SolverError


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


def _method_groups(p: argparse.ArgumentParser) -> list[str]:
    """The options every method shares (HiGHS settings, the repair limit) in one group, then one group per
    method (mdp_core.declarations.methods), each flag built from its declaration (:meth:`mdp_core.declarations.options.Spec.add_argument`).
    An option several methods declare (the gap, the executor, ...) is one flag, in the group "options of
    several methods", its help naming each method's default. Flags not given are absent from the namespace:
    the method's own default applies. Returns the method options' names."""
    from mdp_core.declarations.methods import REGISTRY
    from mdp_core.declarations.options import show, specs
    from mdp_core.declarations.solver_options import RepairOptions, SolverOptions

    common = p.add_argument_group("solver options (every method)")
    for cls in (SolverOptions, RepairOptions):
        for s in specs(cls):
            if s.exposed:
                s.add_argument(common)
    owners: dict[str, list[tuple[str, Any]]] = {}
    for name, m in REGISTRY.items():
        for s in specs(m.options):
            if s.exposed:
                owners.setdefault(s.name, []).append((name, s))
    shared = {n: o for n, o in owners.items() if len(o) > 1}
    if shared:
        g = p.add_argument_group("options of several methods", "each method's default applies when not given")
        for entries in shared.values():
            helps = {s.help for _, s in entries}
            defaults = {show(s.default) for _, s in entries}
            users = ", ".join(n for n, _ in entries)
            if len(helps) == 1 and len(defaults) == 1:
                text = f"{users}: {entries[0][1].described}"
            else:
                text = "; ".join(f"{n}: {s.described}" for n, s in entries)
            entries[0][1].add_argument(g, help=text)
    for name, m in REGISTRY.items():
        own = [s for s in specs(m.options) if s.exposed and s.name not in shared]
        also = [s.flag for s in specs(m.options) if s.exposed and s.name in shared]
        note = f"also: {' '.join(also)}" if also else None if own else "no options"
        g = p.add_argument_group(f"--method {name}: {m.help}", note)
        for s in own:
            s.add_argument(g)
    return list(owners)


def _solver_options(args: argparse.Namespace):
    from mdp_core.declarations.options import specs
    from mdp_core.declarations.solver_options import SolverOptions

    return SolverOptions(**{s.name: getattr(args, s.name) for s in specs(SolverOptions) if hasattr(args, s.name)})


def _check_method_flags(method: str, given: dict) -> None:
    """InputError naming the flags among ``given`` (option names) that ``method`` does not take."""
    from mdp_core.declarations.methods import REGISTRY
    from mdp_core.declarations.options import specs

    flags = {s.name: s.flag for m in REGISTRY.values() for s in specs(m.options)}
    unknown = sorted(flags[n] for n in set(given) - {s.name for s in specs(REGISTRY[method].options)})
    if unknown:
        raise InputError(f"--method {method} does not take {', '.join(unknown)} (solve --help lists its options)")


SOLVE_HEARTBEAT = 30.0  # seconds of silence before `solve` says what the solver is doing


def _progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


class _StderrLog:
    """The heartbeat's log: indented lines on stderr, like the progress lines."""

    def info(self, fmt: str, *args: Any) -> None:
        _progress(fmt % args)


def cmd_solve(args: argparse.Namespace) -> int:
    from mdp_core.problem.io import read_instance, write_published
    from mdp_core.runtime import control
    from mdp_core.solvers.solve import solve
    from mdp_core.solvers.verify import write_mechanism
    from tasks.progress import Heartbeat

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError(f"--out {args.out}: exists and is not a directory")
    # only the method options given on the command line; one the method does not take is an error at once
    method_args = {name: getattr(args, name) for name in args.method_options if hasattr(args, name)}
    _check_method_flags(args.method, method_args)
    options = _solver_options(args)
    inst = read_instance(args.instance, epsilon=args.epsilon)
    print(
        f"solving {args.instance}: N={inst.n_records}, K={inst.n_outputs}, |E|={inst.n_edges}, "
        f"eps={inst.epsilon:g}, method={args.method}",
        file=sys.stderr,
    )
    repair = {"max_mix": args.max_mix} if hasattr(args, "max_mix") else {}
    # a long LP reports nothing for minutes: after SOLVE_HEARTBEAT s of silence, say what HiGHS is doing
    with control.scope(label="solve") as token, Heartbeat("solve", _StderrLog(), SOLVE_HEARTBEAT, token) as beat:

        def progress(line: str) -> None:
            _progress(line)
            beat.note(line)

        sol = solve(inst, args.method, options, progress=progress, **repair, **method_args)
    info = write_mechanism(inst, sol.z, args.out, sol.solve_info())
    if sol.trace is not None:
        trace = {c: sol.trace[c].to_numpy() for c in sol.trace.columns}
        write_published(Path(args.out) / "trace.parquet", trace, "trace.parquet")
    print(sol.certificate.summary())
    print(
        json.dumps(
            {k: info[k] for k in ("method", "status", "objective", "lower_bound", "gap", "iterations", "seconds")}
        )
    )
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from mdp_core.problem.io import read_instance, read_mechanism
    from mdp_core.solvers.verify import verify

    inst = read_instance(args.instance)
    z = read_mechanism(args.mechanism, inst.n_records, inst.n_outputs)
    cert = verify(inst, z)
    print(cert.summary())
    if args.json:
        print(json.dumps(cert.as_dict(), sort_keys=True))
    return 0 if cert.passed else 1


def cmd_audit(args: argparse.Namespace) -> int:
    from mdp_core.release import signing
    from mdp_core.release.audit import audit_release, check_signature

    pin: str | bytes | None = None
    try:
        if args.public_key:
            pin = signing.pin_fingerprint(Path(args.public_key).read_bytes())
        elif args.fingerprint:
            pin = signing.pin_fingerprint(args.fingerprint)
    except (OSError, InputError) as exc:
        print(f"mdp-release audit: the pinned key: {exc}", file=sys.stderr)
        return 2
    findings = audit_release(args.run_dir, public_key=pin)
    for line in findings:
        print(f"{args.run_dir}: {line}")
    signer, _ = check_signature(args.run_dir, pin)
    store = signing.store_of(args.run_dir)
    if signer is not None and pin is None:
        try:
            own = signing.agency_fingerprint(store) if store is not None else None
        except InputError:
            own = None
        if own is None:
            print(
                f"{args.run_dir}: signed by key {signer}: compare it with the agency's published key fingerprint "
                "(or pin it: --public-key FILE | --fingerprint HEX)"
            )
        else:
            print(f"{args.run_dir}: signed by key {signer}, compared with this store's own signing key")
    elif signer is not None:
        print(f"{args.run_dir}: signed by key {signer}, compared with the pinned key")
    if not findings:
        print(
            f"{args.run_dir}: OK (signature, files, instance, mechanism certificate, microdata provenance and every "
            "sentence of the report check out)"
        )
    return 1 if findings else 0


def cmd_check(args: argparse.Namespace) -> int:
    from flows.check import check_from_cli

    return check_from_cli(args)


def cmd_export(args: argparse.Namespace) -> int:
    from flows.cli_export import build_from_args
    from mdp_core.problem.io import write_instance

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


def cmd_notify(args: argparse.Namespace) -> int:
    from flows.notify import notify_from_cli

    return notify_from_cli(args)


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
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds), for tests / CI")
    p.add_argument("--store", default="artifacts/store", help="artifact store root")
    p.add_argument("--out", default=None, help="also copy the report, tables and PNGs to this folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None, help="real data folder (default ../shared/data beside the repo)")
    p.add_argument("--refresh", action="store_true", help="recompute every stage, ignoring caches")


def _solve_arguments(p: argparse.ArgumentParser) -> None:
    from mdp_core.declarations.methods import REGISTRY

    p.add_argument("instance", help="instance directory (records/outputs/edges/costs.parquet + instance.json)")
    p.add_argument(
        "--method",
        default="auto",
        choices=list(METHOD_NAMES),
        help="the solve method (default: auto, which picks lp or rowgen and writes its choice and reason into "
        "solve.json); its options are in its group below: "
        + "; ".join(f"{name}: {m.help}" for name, m in REGISTRY.items()),
    )
    p.add_argument("--out", required=True, help="output directory for mechanism.parquet and solve.json")
    p.add_argument("--epsilon", type=_positive_float, default=None, help="override the instance's epsilon")
    p.set_defaults(method_options=_method_groups(p))


def _verify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("instance")
    p.add_argument("mechanism", help="mechanism.parquet")
    p.add_argument("--json", action="store_true", help="also print the certificate as JSON")


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a release folder, e.g. artifacts/store/runs/<run>/")
    pin = p.add_mutually_exclusive_group()
    pin.add_argument(
        "--public-key",
        metavar="FILE",
        help="the agency's Ed25519 public key (PEM): a release signed by any other fails",
    )
    pin.add_argument(
        "--fingerprint", metavar="HEX", help="the agency's published key fingerprint (sha256 of the raw public key)"
    )


def _check_arguments(p: argparse.ArgumentParser) -> None:
    from flows.check import add_check_arguments

    add_check_arguments(p)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    from flows.cli_export import add_export_arguments

    add_export_arguments(p)


def cmd_store(args: argparse.Namespace) -> int:
    from flows.store_cli import store_from_cli

    return store_from_cli(args)


def _store_arguments(p: argparse.ArgumentParser) -> None:
    from flows.store_cli import add_store_arguments

    add_store_arguments(p)


def _server_arguments(p: argparse.ArgumentParser) -> None:
    from flows.run import add_server_arguments

    add_server_arguments(p)


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    from flows.operate import add_serve_arguments

    add_serve_arguments(p)


def cmd_ledger(args: argparse.Namespace) -> int:
    from flows.ledger_cli import cmd_ledger as run_ledger

    return run_ledger(args)


def _ledger_arguments(p: argparse.ArgumentParser) -> None:
    from flows.ledger_cli import add_arguments

    add_arguments(p)


def cmd_key(args: argparse.Namespace) -> int:
    from flows.key_cli import key_from_cli

    return key_from_cli(args)


def _key_arguments(p: argparse.ArgumentParser) -> None:
    from flows.key_cli import add_arguments

    add_arguments(p)


def cmd_approve(args: argparse.Namespace) -> int:
    from flows.approve_cli import approve_from_cli

    return approve_from_cli(args)


def _approve_arguments(p: argparse.ArgumentParser) -> None:
    from flows.approve_cli import add_arguments

    add_arguments(p)


def _deploy_arguments(p: argparse.ArgumentParser) -> None:
    from flows.operate import add_deploy_arguments

    add_deploy_arguments(p)


def _notify_arguments(p: argparse.ArgumentParser) -> None:
    from flows.notify import add_notify_arguments

    add_notify_arguments(p)


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
    (
        "check",
        "check a release config and its microdata in a second, without Prefect (exit 0: would be accepted, "
        "2: the reasons; snap-distance aggregates for the terminal only)",
        _check_arguments,
        cmd_check,
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
        "approve",
        "approve (or --reject) a release run waiting for the officer, before it measures anything (needs a server)",
        _approve_arguments,
        cmd_approve,
    ),
    (
        "deploy",
        "deploy scheduled releases to a work pool (run by `prefect worker start`)",
        _deploy_arguments,
        cmd_deploy,
    ),
    (
        "ledger",
        "show the populations' privacy budgets; set a cap or start a new budget (recorded)",
        _ledger_arguments,
        cmd_ledger,
    ),
    (
        "key",
        "show the store's signing key; rotate it (a new key, recorded with who and why)",
        _key_arguments,
        cmd_key,
    ),
    (
        "store",
        "what a store holds (releases per name, objects per stage); --prune-objects removes unreferenced objects",
        _store_arguments,
        cmd_store,
    ),
    (
        "notify",
        "POST to a webhook when a release's flow run fails (a Prefect automation; needs a server)",
        _notify_arguments,
        cmd_notify,
    ),
)


def build_parser(only: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The command-line parser. ``only``: the commands whose arguments to build (None: all). The others
    are listed (``--help``) but take no arguments (:func:`main` builds only the command given: each
    command's arguments import what they describe)."""
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
