"""What a person sees in the viewer, in a real browser: a short warehouse run's bag through `brace-audit view`'s
mapping, served by Rerun's web viewer on 127.0.0.1, opened in Debian's Chromium through Playwright, the time cursor
put on a known step once the whole recording is in (the viewer's own state says so), and the screenshot checked:
every agent in the scene in its colour, the SLO_t line in the latency plot, rows in the event log.

Without a browser this test fails naming the install command; BRACE_NO_BROWSER=1 opts out (README)."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from brace_audit.view_browser import BrowserMissing, find_browser
from brace_common.domain_leases import fresh_domain
from brace_system_tests.browser_opt_out import browser_opted_out
from brace_system_tests.viewer_path import WORLDS, look, record_world, what_a_person_sees
from erecap_planner.testing import saved_tiny_llama

STEP = 12
"""The step the time cursor is put on (the warehouse run has 24)."""


@pytest.fixture(autouse=True)
def domain(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(fresh_domain()))


def test_a_person_sees_the_scene_the_slo_line_and_the_events(tmp_path):
    if browser_opted_out():
        pytest.skip("BRACE_NO_BROWSER=1: the viewer's browser test was opted out of")
    try:
        find_browser()
    except BrowserMissing as exc:
        pytest.fail(f"the viewer's browser test needs Chromium: {exc}")
    model = saved_tiny_llama(tmp_path / "tiny_llama")
    folder = record_world("warehouse", tmp_path / "runs", (
        f"erecap_planner.model_path={model}", "erecap_planner.pruning_layers=[1, 3]",
        "erecap_planner.predictor_path=''", "erecap_planner.adapter_path=''"))
    seen = look(folder, STEP, tmp_path / "warehouse.png")
    assert seen.last_step >= STEP
    checked = what_a_person_sees(seen.png, WORLDS["warehouse"].agents)
    assert not checked.problems, f"{checked.problems} (screenshot: {tmp_path / 'warehouse.png'})"


def test_the_check_fails_on_a_page_without_the_data():
    """The pixel check itself: a blank page shows no agent, no SLO line and no event rows."""
    blank = io.BytesIO()
    Image.new("RGB", (1600, 900), (250, 250, 250)).save(blank, format="PNG")
    problems = what_a_person_sees(blank.getvalue(), 4).problems
    assert len(problems) == 6 and "SLO_t" in problems[4] and "event log" in problems[5]
