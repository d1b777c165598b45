"""A note of the solve is not the end of a round (issue 52): a 3-minute Rome solve's progress artifact crept to
4.6 % through its 74 s first round, because the method's choice (``auto: rowgen (...)``, 3 s in) was taken for the
end of a round and made the first round's slot the share the clock had given its first 3 s. Measured on
/work/shared/data Rome, N = K = 350 (docs/operating.md, "Finding a release in the UI")."""

from __future__ import annotations

from mdp_core.runtime import control
from tasks.progress import FIRST_ROUND_SLOT, ProgressArtifact

CHOICE = "auto: rowgen (the loss is the metric distance (mean degree 57.097, full LP 6,994,400 privacy rows): ...)"


def test_the_methods_choice_does_not_end_the_first_round():
    bar = ProgressArtifact(None, "solve[auto] N=350 K=350")  # no flow run: no artifact, the percentage is computed
    t0 = bar.t0
    bar.tick(t0 + 3.0)
    bar(CHOICE)
    assert bar.latest == CHOICE and bar.last_increment is None  # described; still the first round
    bar.tick(t0 + 20.0)
    assert bar.percent > 10.0, bar.percent  # 20 s into a first round of 74 s: past 10 %
    bar.activity("rowgen round 1 LP (95436 rows): HiGHS interior point iteration 26 (47 s into this LP)")
    within = bar.percent
    assert 10.0 < within < FIRST_ROUND_SLOT
    bar(control.Progress("rowgen", "round 1", lower=0.0823, upper=0.1115, gap_rel=1e-2, elapsed=74.0))
    assert bar.last_increment == within  # the round's end: what the first round moved is the next one's slot


def test_lines_that_measure_the_work_still_end_a_round():
    bar = ProgressArtifact(None, "solve", max_iterations=50)
    assert bar.ends_a_round("component 2/4: 10 records") and bar.ends_a_round("benders iteration 10: gap 1")
    assert bar.ends_a_round(control.Progress("rowgen", "round 1", lower=1.0, upper=2.0, gap_rel=1e-3))
    assert not ProgressArtifact(None, "solve").ends_a_round("benders iteration 10: gap 1")  # no count to read
    assert not bar.ends_a_round("lp: fallback to simplex after an interior point failure")
