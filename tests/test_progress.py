"""Long work is never silent: stages as they finish, a heartbeat that names what runs, a step
count that never goes backwards, time left where the number of steps is known, and work that
may take long announced before it starts."""

from __future__ import annotations

import io
import logging
import re
import time

import pytest

import pramopt
from pramopt._activity import Activity, Heartbeat, activity
from pramopt.cli._common import stage_log
from pramopt.households.kind import example_households
from pramopt.optimize.problem import Trace


def test_the_time_left_is_the_rate_so_far_times_the_steps_left():
    act = Activity("person LPs", total=4, done=1, started=100.0)
    # 30 s for 1 step: 3 steps left at 30 s each
    assert act.describe(130.0) == "person LPs for 30 s, step 1 of 4, about 90 s left"
    assert Activity("refine", done=7, started=0.0).describe(12.0) == "refine for 12 s, step 7"
    assert Activity("model", started=0.0).describe(3.0) == "model for 3 s"


def test_the_step_count_of_a_stage_never_goes_backwards():
    seen: list[tuple[str, int]] = []
    trace = Trace(progress=lambda stage, it, loss, worst: seen.append((stage, it)))
    for _round in range(3):  # a refinement in rounds, each counting from 1
        for it in (1, 2):
            trace.progress("refine", it, 1.0, 0.0)
    trace.progress("linear", 1, 1.0, 0.0)
    trace.progress("refine", 10, 1.0, 0.0)  # a strategy that jumps ahead keeps its number
    assert seen == [("refine", i) for i in range(1, 7)] + [("linear", 1), ("refine", 10)]


def test_a_silence_is_filled_by_what_is_running():
    buf = io.StringIO()
    with stage_log(False, stream=buf, after=0.0, heartbeat=0.3):
        with activity("the general design"), activity("refine") as act:
            act.advance(2)
            time.sleep(1.2)
    lines = [x for x in buf.getvalue().splitlines() if "still working" in x]
    assert lines, buf.getvalue()
    assert re.search(
        r"still working: the general design for \d+ s > refine for \d+ s, step 2", lines[0]
    )
    # one line per silence of 0.3 s at most, not a flood
    assert 1 <= len(lines) <= 5


def test_no_heartbeat_without_work_in_progress_or_once_quiet():
    buf = io.StringIO()
    with stage_log(False, stream=buf, after=0.0, heartbeat=0.2):
        time.sleep(0.6)
    assert "still working" not in buf.getvalue()
    buf = io.StringIO()
    with stage_log(True, stream=buf, heartbeat=0.2):
        with activity("x"):
            time.sleep(0.5)
    assert buf.getvalue() == ""


def test_heartbeat_alone_prints_nothing_to_stdout(capsys):
    with Heartbeat(every=0.1), activity("x"):
        time.sleep(0.4)
    assert capsys.readouterr().out == ""  # a library prints nothing unasked


def test_an_announcement_passes_the_quiet_first_seconds_and_a_stage_does_not():
    log = logging.getLogger("pramopt.design")
    buf = io.StringIO()
    with stage_log(False, stream=buf, after=3600.0):
        log.info("a stage: 0.1 s")
        log.info("this can take minutes", extra={"announce": True})
    assert "this can take minutes" in buf.getvalue()
    assert "a stage" not in buf.getvalue()


def test_the_household_design_is_announced_first_and_shows_its_stages():
    data, qi, options = example_households(60)
    buf = io.StringIO()
    with stage_log(False, stream=buf, after=0.0):
        res = pramopt.design(data, qi, **options)
    lines = buf.getvalue().splitlines()
    assert "the household design: up to" in lines[0] and "this can take minutes" in lines[0]
    for stage in res.stages:  # every stage of the household design's result was shown
        assert any(f"] {stage.name}: " in x for x in lines), stage.name


def test_a_design_of_many_cells_is_announced_before_its_first_stage():
    # 5 keys of the seeded example: more cells than the announcement's threshold
    from pramopt.optimize import designer

    data = pramopt.example_data(n=2000, seed=3)
    qi = list(data.columns[:5])
    cells = len(data[qi].drop_duplicates())
    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(designer, "ANNOUNCE_CELLS", cells - 1)
        with stage_log(False, stream=buf, after=3600.0):
            pramopt.design(data, qi, alpha=0.1, structure="replacement")
    assert f"{cells} cells and" in buf.getvalue() and "may take minutes" in buf.getvalue()
    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(designer, "ANNOUNCE_CELLS", cells)
        with stage_log(False, stream=buf, after=3600.0):
            pramopt.design(data, qi, alpha=0.1, structure="replacement")
    assert buf.getvalue() == ""
