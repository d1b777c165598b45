"""Progress a person can see: a computing stage says something at least every few seconds, repeating
the latest solver line, and a solve's progress artifact tracks components / iterations."""

from __future__ import annotations

import time

from tasks.common import Throttled
from tasks.progress import Heartbeat, ProgressArtifact, current


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, fmt: str, *args) -> None:
        self.lines.append(fmt % args)

    warning = info


def test_heartbeat_speaks_when_the_stage_is_silent_and_repeats_the_last_progress_line():
    log = _Log()
    with Heartbeat("solve", log, every=0.3) as hb:
        assert current() is hb
        Throttled("solve[lp]", every=100.0)("component 1/3: optimal")  # a solver line, noted by the heartbeat
        time.sleep(1.3)
    assert current() is None
    beats = [ln for ln in log.lines if ln.startswith("solve: running")]
    assert len(beats) >= 2, log.lines
    assert "s elapsed; last: component 1/3: optimal" in beats[-1]
    n = len(log.lines)
    time.sleep(0.5)
    assert len(log.lines) == n  # stopped with the stage


def test_progress_artifact_percent_from_components_and_iterations():
    bar = ProgressArtifact(None, "solve", max_iterations=50)  # no flow run: no artifact, still computes
    bar("component 2/4: 10 records")
    assert bar.percent == 50.0
    bar = ProgressArtifact(None, "solve", max_iterations=50)
    bar("benders iteration 10: LB=1 UB=2 gap=1")
    assert bar.percent == 20.0
    bar.done("optimal")
