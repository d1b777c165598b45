"""Progress a person can see: a computing stage says something at least every few seconds -- what
changed, else what the solver is doing and how long nothing changed -- and a solve's progress artifact
tracks components / iterations (bounds and gap: tests/test_interrupt.py)."""

from __future__ import annotations

import time

from mdp_core.runtime import control
from tasks.common import Throttled
from tasks.progress import Heartbeat, ProgressArtifact, current


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, fmt: str, *args) -> None:
        self.lines.append(fmt % args)

    warning = info


def test_heartbeat_speaks_when_the_stage_is_silent_and_says_what_changed():
    log = _Log()
    token = control.StopToken(label="solve")
    with Heartbeat("solve", log, every=0.3, token=token) as hb:
        assert current() is hb
        say = Throttled("solve[lp]", every=100.0)
        say.log = log
        say("component 1/3: optimal")  # logged by the throttle itself
        say("component 2/3: optimal")  # throttled away: the heartbeat says it
        time.sleep(0.9)
        token.set_activity("rowgen round 4 LP: HiGHS interior point iteration 12 (3 s into this LP)")
        time.sleep(1.0)
    assert current() is None
    assert log.lines[0] == "solve[lp]: component 1/3: optimal"
    assert log.lines[1].startswith("solve: component 2/3: optimal (") and log.lines[1].endswith("s elapsed)")
    beats = [ln for ln in log.lines if ln.startswith("solve: running")]
    assert len(beats) >= 2, log.lines
    assert "no new progress for" in beats[0] and beats[0].endswith("s; last: component 2/3: optimal")
    assert "now: rowgen round 4 LP: HiGHS interior point iteration 12" in beats[-1]
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


def test_the_progress_artifact_is_sent_in_percent(monkeypatch):
    """Prefect's progress artifact takes 0-100 (``prefect.artifacts.ProgressArtifact`` clamps to it and the
    UI shows the number as a percentage): the values a real solve sends through
    ``update_progress_artifact`` go above 1 (a fraction would read 0-1 %) and stay within 0-100, ending at 100."""
    import prefect.artifacts

    from mdp_core.problem.datasets import grid, synthetic
    from mdp_core.solvers.solve import solve

    sent: list[float] = []
    monkeypatch.setattr(
        prefect.artifacts, "update_progress_artifact", lambda _id, progress, **kw: sent.append(progress)
    )
    cases = [
        (grid(6, 8, n_outputs=20, epsilon=10.0), "rowgen"),  # rounds: the gap closing on a log scale
        (synthetic(n_records=40, n_outputs=8, dim=4, sigma=4.0, epsilon=10.0, seed=2), "lp"),  # components
    ]
    for inst, method in cases:
        sent.clear()
        bar = ProgressArtifact(None, f"solve[{method}]", every=0.0)
        bar.id = "artifact"  # as if created on a server (no flow run here)
        solve(inst, method, progress=bar)
        bar.done("optimal")
        assert all(0.0 <= p <= 100.0 for p in sent), sent
        assert max(sent[:-1]) > 1.0 and sent[-1] == 100.0, (method, sent)


def test_the_bar_moves_with_the_clock_where_nothing_better_measures_the_work():
    """Issue 52: a 3-minute Rome solve showed "Progress: 0%" for 4+ minutes (its first LP reported nothing the
    bar could read). Inside a round the bar now also moves with elapsed time against the round's expected
    time (a prediction, else FIRST_ROUND_SECONDS; later rounds: the previous one's length), never back, never
    to 100 before the solve returns; under a heartbeat it does so by itself, twice a second."""
    from tasks.progress import CEILING, FIRST_ROUND_SECONDS, FIRST_ROUND_SLOT, time_share

    assert time_share(0.0, 60.0) == 0.0 and time_share(60.0, 60.0) == 0.5 and time_share(1e9, 60.0) < 1.0
    bar = ProgressArtifact(None, "solve[rowgen]")
    t0 = bar.t0
    bar.tick(t0 + 20.0)  # a first round of 3 minutes, 20 s in: past 10 %
    assert 10.0 < bar.percent == FIRST_ROUND_SLOT * 20.0 / (20.0 + FIRST_ROUND_SECONDS) < FIRST_ROUND_SLOT
    bar.tick(t0 + 5.0)  # never back
    assert bar.percent > 10.0
    bar.tick(t0 + 1e6)
    assert bar.percent < FIRST_ROUND_SLOT and bar.percent <= CEILING
    predicted = ProgressArtifact(None, "solve[lp]", expected=600.0)  # check's prediction: a slower bar
    predicted.tick(predicted.t0 + 20.0)
    assert 0.0 < predicted.percent < 2.0
    with Heartbeat("solve", _Log(), every=100.0) as hb:  # the heartbeat drives it: no solver line at all
        live = ProgressArtifact(None, "solve[lp]", expected=0.5)
        assert current() is hb
        time.sleep(1.6)
    assert live.percent > 10.0, live.percent
