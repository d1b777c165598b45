"""The documents work as written: README.md and docs/*.md.

* Every shell command in a ```bash / ```sh / ```console block is tested as written. Either this file runs
  it -- the documents' ``mdp-release`` commands, in each document's order, from the repository root,
  with ``mdp-release`` this checkout's command line (``python -m flows.cli``), ``scratch/`` in a temporary
  folder, ``$MDP_RELEASE_STORE`` and ``$PREFECT_HOME`` temporary too; each must exit 0 -- or another test
  runs it, named in :data:`ELSEWHERE` / :func:`elsewhere` (the needle must be in that file). ``pip install
  -e SPEC`` must name extras pyproject.toml declares; ``python -m pytest ...`` must be CI's command or use
  declared markers and existing paths. A command none of these cover fails the test, named.
* The README is at most 250 lines; every relative link of README.md and docs/*.md resolves (file and,
  for ``#anchor``, a heading of that file); docs/configuration.md and docs/privacy.md's published-columns
  table are docs/gen_config.py's output (a stale page fails naming the command that regenerates it), and that
  table is the audit's allow-list, ``mdp_core.release.audit.COLUMNS``.

Documents whose commands run a flow are marked ``slow`` (and ``flow``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250
QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "MPLBACKEND": "Agg"}
QUIET |= {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
# Documents whose commands run a Prefect flow (the release): 20-60 s.
SLOW = {"README.md"}

# Commands another test runs: command -> (that file, a string in it that shows it).
ELSEWHERE: dict[str, tuple[str, str]] = {
    "mdp-release server stop": ("tests/test_operate.py", '"mdp-release server stop"'),
    # docs/reproduce.md: the quick experiments, run twice in one process (the second reuses every stage)
    "mdp-release reproduce --quick --out scratch/reproduce-out": (
        "tests/test_reproduce.py",
        'QUICK = "mdp-release reproduce --quick --out scratch/reproduce-out"',
    ),
    "python docs/gen_config.py > docs/configuration.md": (
        "tests/test_docs.py",
        "def test_configuration_reference_is_generated",
    ),
    "python docs/gen_config.py --privacy": ("tests/test_docs.py", "def test_published_columns_table_is_generated"),
    "ruff check .": (".ci/run", "check ruff check ."),
    "ruff format --check .": (".ci/run", "check ruff format --check ."),
    "mypy": (".ci/run", "check mypy"),
    # docs/operating.md "Being notified": a real server and a webhook receiver on 127.0.0.1 (the flow-marked notify test)
    'eval "$(mdp-release server start)"': ("tests/test_operate.py", "mdp-release server start"),
    "mdp-release notify --release grid-eps10-lp --webhook https://hooks.example.org/services/T0/B1/XXXX": (
        "tests/test_notify.py",
        '"notify", "--release", name, "--webhook", hook',
    ),
    # docs/operating.md "The officer's approval": decisions for a paused run (the ops-tier approval tests)
    'mdp-release approve 0190f3a2-5c1e-7d2a-9b4e-1f2a3b4c5d6e --by "A. Officer" --note "board minute 12"': (
        "tests/test_approval.py",
        '[MDP, "approve", run["id"], "--by", "A. Officer", "--note"',
    ),
    'mdp-release approve 0190f3a2-5c1e-7d2a-9b4e-1f2a3b4c5d6e --by "A. Officer" --plan 3f2a9c0d1e4b --note "minute 12"': (
        "tests/test_served_approval.py",
        '[MDP, "approve", first["id"], "--by", "A. Officer", "--plan", sha[:12], "--note"',
    ),
    'mdp-release approve 0190f3a2-5c1e-7d2a-9b4e-1f2a3b4c5d6e --by "A. Officer" --reject --note "wrong wave"': (
        "tests/test_approval.py",
        '[MDP, "approve", run["id"], "--by", "B. Officer", "--reject", "--note"',
    ),
}


def _section(text: str, heading: str) -> str:
    """The text of the ``## heading`` section (up to the next ``## ``)."""
    start = text.index(f"\n## {heading}\n") + 1
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start:end]


def shell_commands(text: str) -> list[str]:
    """The commands of the shell blocks of a Markdown text, in order: comments dropped, backslash
    continuations joined, a console block's ``$ `` lines only."""
    out: list[str] = []
    for lang, body in re.findall(r"^```(bash|sh|console)\n(.*?)^```", text, re.S | re.M):
        lines = body.splitlines()
        if lang == "console":
            lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
        joined: list[str] = []
        for ln in lines:
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1] + " " + ln.strip()
            else:
                joined.append(ln)
        for ln in joined:
            cmd = re.split(r"\s+#\s", " " + ln)[0].strip()
            if cmd and not cmd.startswith("#"):
                out.append(cmd)
    return out


def elsewhere() -> dict[str, tuple[str, str]]:
    """:data:`ELSEWHERE` and the scheduled-release commands, which tests/test_operate.py runs as written
    (it reads them from docs/operating.md's "Scheduled releases")."""
    scheduled = shell_commands(_section((REPO / "docs" / "operating.md").read_text(), "Scheduled releases"))
    return ELSEWHERE | {c: ("tests/test_operate.py", '"operating.md"') for c in scheduled}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def static_check(part: str) -> str | None:
    """For a command this test does not run: "" when it is covered (checked here), else None."""
    covered = elsewhere()
    if part in covered:
        where, needle = covered[part]
        assert needle in (REPO / where).read_text(), f"{part!r}: {where} does not contain {needle!r}"
        return ""
    words = shlex.split(part)
    if words[:3] == ["pip", "install", "-e"] and len(words) == 4:
        m = re.fullmatch(r"\.(?:\[([a-z0-9,_-]+)\])?", words[3])
        assert m, f"{part!r}: not an install of this checkout"
        extras = set(_pyproject()["project"].get("optional-dependencies", {}))
        missing = set((m.group(1) or "").split(",")) - {""} - extras
        assert not missing, f"{part!r}: extras {sorted(missing)} are not declared in pyproject.toml"
        return ""
    if words[:3] == [sys.executable, "-m", "pytest"] or words[:3] == ["python", "-m", "pytest"]:
        if len(words) == 3:
            assert "python -m pytest" in (REPO / ".ci" / "run").read_text(), "CI does not run `python -m pytest`"
            return ""
        rest = words[3:]
        markers = {m.split(":")[0] for m in _pyproject()["tool"]["pytest"]["ini_options"]["markers"]}
        while rest:
            arg = rest.pop(0)
            if arg == "-m":
                expr = rest.pop(0)
                names = set(re.findall(r"[a-z_]+", expr)) - {"not", "and", "or"}
                assert names <= markers, f"{part!r}: markers {sorted(names - markers)} are not declared"
            else:
                assert (REPO / arg).exists(), f"{part!r}: {arg} does not exist"
        return ""
    return None


def _env(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "mdp-release"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m flows.cli "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | QUIET
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "MDP_RELEASE_STORE": str(tmp / "store"),
        "PREFECT_HOME": str(tmp / "prefect-home"),
        "MDP_RELEASE_HOME": str(tmp / "mdp-home"),
    }
    return env


def _doc_params() -> list:
    out = []
    for path in DOCS:
        marks = [pytest.mark.slow, pytest.mark.flow] if path.name in SLOW else []
        out.append(pytest.param(path, id=str(path.relative_to(REPO)), marks=marks))
    return out


@pytest.mark.parametrize("doc", _doc_params())
def test_every_shell_command_works_as_written(doc: Path, tmp_path: Path) -> None:
    """Each command of ``doc``'s shell blocks, in order: run here (exit 0) or covered elsewhere."""
    env = _env(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for command in shell_commands(doc.read_text()):
        parts = [p.strip() for p in command.split("&&")]
        to_run = []
        for part in parts:
            checked = static_check(part)
            if checked is None:
                assert part.startswith("mdp-release "), f"{doc.name}: {part!r} is neither run nor tested elsewhere"
                to_run.append(part)
        if not to_run:
            continue
        text = " && ".join(to_run).replace("scratch/", f"{scratch}/")
        proc = subprocess.run(
            ["bash", "-c", text], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert proc.returncode == 0, f"{doc.name}: {command!r} exited {proc.returncode}:\n{proc.stderr[-3000:]}"


def test_readme_fits_in_ten_minutes() -> None:
    n = len((REPO / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES})"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_relative_link_resolves() -> None:
    broken = []
    for doc in DOCS:
        text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            if not dest.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert not broken, broken


def test_configuration_reference_is_generated() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "docs" / "gen_config.py")],
        cwd=REPO,
        env=os.environ | {"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    current = (REPO / "docs" / "configuration.md").read_text()
    assert proc.stdout == current, "docs/configuration.md is stale: python docs/gen_config.py > docs/configuration.md"


def _gen_config():
    """docs/gen_config.py as a module (its ``privacy_page``, ``PRIVACY_COMMAND``)."""
    spec = importlib.util.spec_from_file_location("gen_config", REPO / "docs" / "gen_config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_published_columns_table_is_generated() -> None:
    gen = _gen_config()
    current = (REPO / "docs" / "privacy.md").read_text()
    assert gen.privacy_page(current) == current, (
        f"docs/privacy.md's published-columns table is stale: {gen.PRIVACY_COMMAND}"
    )


def test_published_columns_table_is_the_audit_allow_list() -> None:
    """The generated table says what the audit allows: each file, its coordinates mark, its columns."""
    from mdp_core.release.audit_common import COLUMNS, WITH_COORDINATES

    section = _section((REPO / "docs" / "privacy.md").read_text(), "What is published")
    table = {}
    for name, coords, cols in re.findall(r"^\| `([^`]+)`( \(coordinates\))? \| (.+?) \|[^|]*\|$", section, re.M):
        table[name] = (bool(coords), frozenset(re.findall(r"`([^`]+)`", cols)))
    want = {name: (name in WITH_COORDINATES, cols) for name, cols in COLUMNS.items()}
    assert table == want


def test_commands_neither_run_nor_covered_are_named() -> None:
    """The classification itself: a command nobody runs is reported (not silently skipped)."""
    assert static_check("pip install -e .[test]") == ""
    assert static_check("python -m pytest") == ""
    assert static_check("prefect work-pool create x") is None
    with pytest.raises(AssertionError, match="not declared"):
        static_check('pip install -e ".[nosuchextra]"'.replace('"', ""))
    assert shell_commands("```bash\nmdp-release a \\\n  --b  # c\n# d\n```\n") == ["mdp-release a  --b"]
