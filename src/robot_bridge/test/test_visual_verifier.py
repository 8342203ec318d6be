"""The visual verifier without ROS: the geometric perceiver's diff, the step check, and whole twin episodes.

Frames are rendered from the twin's PickFruit world at every control tick of its kinematic loop (the executor's
step monitor and the /act stand-in), as bench/visual_verifier.py does for OmniAct's Table 6.
"""

from __future__ import annotations

import pytest

from brace_common.action_schema import Step
from brace_common.config import ConfigError
from brace_common.vocabulary import Failure
from robot_bridge.orbbec.calibration import load_calibration
from robot_bridge.pickfruit.pickfruit_rollout import HOME_TOOL, PickFruitRollout
from robot_bridge.pickfruit.pickfruit_world import PickFruitConfig, PickFruitWorld
from robot_bridge.pickfruit.scene_render import SceneRenderer
from robot_bridge.pickfruit.twin_camera import pickfruit_scene
from robot_bridge.verifier.scene_diff import GONE, GRIPPER, HIDDEN, TABLE
from robot_bridge.verifier.verifier_config import VerifierConfig
from robot_bridge.verifier.visual_verifier import VisualVerifier


@pytest.fixture(scope="module")
def setup():
    cfg = VerifierConfig()
    camera = load_calibration(cfg.camera_calibration)
    return cfg, camera, SceneRenderer(camera, seed=3)


def perceiver_of(setup):
    cfg, camera, renderer = setup
    return cfg.perceiver(camera), renderer


def test_the_perceiver_finds_each_fruit_where_it_lies(setup):
    perceiver, renderer = perceiver_of(setup)
    world = PickFruitWorld()
    world.reset(5)
    seen = perceiver.perceive(*renderer.render(pickfruit_scene(world, HOME_TOOL, 0.07)))
    for name, fruit in world.snapshot().items():
        s = seen.sightings[name]
        assert s.place == TABLE and s.pixels > 100
        assert abs(s.position[0] - fruit.position[0]) < 0.03 and abs(s.position[1] - fruit.position[1]) < 0.02
    assert seen.sightings["t_block"].place == GONE, "catalogued but not on this table"


def test_the_diff_says_moved_removed_hidden_and_remaining(setup):
    perceiver, renderer = perceiver_of(setup)
    world = PickFruitWorld(PickFruitConfig(slip_probability=0.0))
    world.reset(5)
    before = perceiver.perceive(*renderer.render(pickfruit_scene(world, HOME_TOOL, 0.07)))
    a, b = sorted(world.fruits)[:2]
    world.fruits[a].held = True                     # a rides in the gripper, lifted
    tool = (0.3, 0.0, 0.2)
    world.fruits[b].removed = True                  # b is gone
    after = perceiver.perceive(*renderer.render(pickfruit_scene(world, tool, world.fruits[a].width_m)), before)
    diff = perceiver.diff(before, after)
    assert diff.moved[a] == (TABLE, GRIPPER) and diff.removed == (b,)
    assert diff.gripper_or_arm_state == "holding"
    assert any(f"{b}: from table" in m and "to unknown" in m for m in diff.objects_moved_or_removed)
    assert any(m.startswith(f"{a}: from table") and "to gripper" in m for m in diff.objects_moved_or_removed)
    remaining = set(world.fruits) - {a, b}
    assert len(diff.objects_remaining) == len(remaining) and "unchanged" in diff.state_update()
    # a hand over the last fruit: hidden (something in front of its spot), not gone
    (c,) = remaining
    world.hand = (world.fruits[c].position, world.clock())
    world.fruits[c].removed = True
    hidden = perceiver.perceive(*renderer.render(pickfruit_scene(world, tool, 0.03)), after)
    assert hidden.sightings[c].place == HIDDEN
    assert any(n.startswith(f"{c} hidden") for n in perceiver.diff(before, hidden).scene_change_notes)


def run(setup, fault: str, seed: int):
    """One pick-and-place episode with the verifier halting the running step, as the executor does."""
    cfg, camera, renderer = setup
    clock = {"t": 0.0}
    world = PickFruitWorld(PickFruitConfig(slip_probability=1.0 if fault == "slip" else 0.0, slip_after_m=(0.07, 0.1),
                                           hand_probability=1.0 if fault == "hand" else 0.0,
                                           phantom_probability=1.0 if fault == "phantom" else 0.0),
                           clock=lambda: clock["t"])
    rollout = PickFruitRollout(world)
    fruit = rollout.start(seed)[0]
    plan = [("pick", {"object": fruit}), ("place", {"object": fruit, "target": "bowl"})]
    verifier = VisualVerifier(cfg.perceiver(camera), cfg.confirm_frames)
    verifier.on_plan([Step(a, p) for a, p in plan])
    verdicts = []

    def frame() -> str:
        clock["t"] = rollout.t
        out = verifier.on_frame(*renderer.render(pickfruit_scene(world, rollout.tool, rollout.opening_m)))
        verdicts.extend(out)
        return next((v.detail for v in out if v.violation), "")

    frame()
    records = []
    for action, parameters in plan:
        records.append(rollout.step(action, parameters, halt=frame))
        verifier.on_outcome(records[-1].result.success)
        frame()
        if not records[-1].result.success:
            break
    return world, records, verdicts


def test_a_clean_episode_gives_no_violation_and_both_steps_achieved(setup):
    world, records, verdicts = run(setup, "", 1)
    assert world.success() and all(r.result.success for r in records)
    assert [v.step_ended for v in verdicts] == [True, True]
    assert all(v.expected_state_achieved and not v.violation for v in verdicts)
    assert verdicts[0].action.startswith("pick(") and verdicts[1].action.startswith("place(")
    assert all(v.confidence > 0.5 and v.compare_ms > 0 for v in verdicts)


def test_a_hand_taking_the_fruit_halts_the_pick(setup):
    world, records, verdicts = run(setup, "hand", 2)
    assert world.counts.hands == 1
    assert records[-1].result.failure == Failure.PREEMPTED, "halted by the verifier before the executor gave up"
    violation = next(v for v in verdicts if v.violation)
    assert not violation.step_ended and "removed" in violation.detail
    assert violation.diff.removed == (world.task[0],)


def test_a_phantom_grasp_is_a_contradicted_success(setup):
    world, records, verdicts = run(setup, "phantom", 3)
    assert records[0].result.success, "the executor believed the pick"
    violation = next(v for v in verdicts if v.violation)
    assert violation.step_ended and not violation.expected_state_achieved
    assert "reported success" in violation.detail and "unchanged at its source" in violation.detail
    assert records[-1].result.failure == Failure.PREEMPTED or len(records) == 2


def test_a_slip_is_a_step_whose_result_the_frames_do_not_show(setup):
    world, records, verdicts = run(setup, "slip", 4)
    assert world.counts.slips == 1 and not world.success()
    place_end = [v for v in verdicts if v.step_ended][-1]
    assert place_end.action.startswith("place(") and not place_end.expected_state_achieved


@pytest.mark.parametrize("name, value", [("object_colors", ["apple=1,2"]), ("object_colors", []),
                                         ("regions", ["bowl=0.1,0.1,-1"]), ("backend", "clip"),
                                         ("camera_calibration", ""), ("camera_name", "bad name"), ("camera_name", "front\n"),
                                         ("object_colors", ["coal=10,10,10"]), ("object_colors", ["mug=120,120,110"])])
def test_bad_parameters_fail_naming_them(name, value):
    with pytest.raises(ConfigError) as err:
        VerifierConfig(**{name: value}).validate()
    assert err.value.parameter == name
