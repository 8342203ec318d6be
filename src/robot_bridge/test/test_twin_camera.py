"""The twin's camera without ROS: the calibration file, the ray-cast renderer and what PickFruit's scene shows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from brace_common.config import ConfigError, resolve_path
from brace_common.world_state import AgentActivity
from robot_bridge.orbbec.calibration import load_calibration
from robot_bridge.pickfruit.pickfruit_world import PickFruitConfig, PickFruitWorld, world_state
from robot_bridge.pickfruit.scene_render import OBJECT_COLORS, Box, Scene, SceneRenderer, Sphere
from robot_bridge.pickfruit.twin_camera import TABLE_TOP_M, pickfruit_scene

CALIBRATION = "package://robot_bridge/config/twin_front_camera.yaml"


@pytest.fixture(scope="module")
def camera():
    return load_calibration(CALIBRATION)


def test_calibration_projects_and_back_projects(camera):
    intr = camera.intrinsics
    uv, depths = camera.project(np.array([camera.look_at]))
    (u, v), depth = uv[0], depths[0]
    assert (u, v) == pytest.approx((intr.cx, intr.cy), abs=1e-6)
    assert depth == pytest.approx(math.dist(camera.position, camera.look_at))
    points = np.array([[0.25, -0.05, 0.12], [0.3, 0.1, 0.1], [0.2, 0.0, 0.2]])
    uv, depths = camera.project(points)
    assert camera.back_project(uv[:, 0], uv[:, 1], depths) == pytest.approx(points)
    rays = camera.pixel_rays()
    assert rays.shape == (intr.height, intr.width, 3)
    # one metre along a pixel's ray is one metre of optical depth
    assert (rays[0, 0] @ camera.rotation[:, 2]) == pytest.approx(1.0)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("pose_in_base_link"), "pose_in_base_link"),
    (lambda d: d["distortion_coefficients"].update(data=[0.1, 0, 0, 0, 0]), "distortion"),
    (lambda d: d["camera_matrix"].update(data=[1, 2, 3]), "camera_matrix"),
    (lambda d: d.update(image_width=0), "image_width"),
    (lambda d: d["pose_in_base_link"].update(look_at=d["pose_in_base_link"]["position"]), "look at"),
])
def test_a_bad_calibration_fails_naming_the_parameter(tmp_path, edit, message):
    doc = yaml.safe_load(open(resolve_path(CALIBRATION)))
    edit(doc)
    path = tmp_path / "cam.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=message) as err:
        load_calibration(str(path))
    assert err.value.parameter == "camera_calibration"
    with pytest.raises(ConfigError, match="camera_calibration"):
        load_calibration(str(tmp_path / "missing.yaml"))


def test_renderer_draws_nearest_surface_with_depth(camera):
    renderer = SceneRenderer(camera, color_noise=0.0, depth_noise_mm=0.0)
    ball = Sphere((0.26, 0.0, 0.12), 0.025, OBJECT_COLORS["apple"])
    scene = Scene(TABLE_TOP_M, (0.12, 0.42), (-0.2, 0.2), (ball,))
    rgb, depth = renderer.render(scene)
    assert rgb.dtype == np.uint8 and depth.dtype == np.uint16 and rgb.shape[:2] == depth.shape
    uv, depths = camera.project(np.array([ball.centre]))
    (u, v), d = uv[0], depths[0]
    r, g, b = rgb[int(v), int(u)]
    assert r > 3 * g and r > 3 * b, "the apple's red at its centre"
    assert (d - ball.radius) * 1000 - 2 <= depth[int(v), int(u)] <= d * 1000, "its front surface, not its centre"
    assert (depth > 0).all(), "the floor returns every ray that misses the table"
    # a box between the camera and the ball hides it
    shield = Box((0.35, 0.0, 0.2), (0.02, 0.05, 0.05), (0, 0, 255))
    rgb2, depth2 = renderer.render(Scene(TABLE_TOP_M, (0.12, 0.42), (-0.2, 0.2), (ball, shield)))
    hidden = (rgb2[..., 0] > 3 * rgb2[..., 1]) & (rgb2[..., 0] > 150)
    assert hidden.sum() < ((rgb[..., 0] > 3 * rgb[..., 1]) & (rgb[..., 0] > 150)).sum()
    noisy = SceneRenderer(camera, seed=1)
    a, b = noisy.render(scene)[1], noisy.render(scene)[1]
    assert not np.array_equal(a, b) and np.abs(a.astype(int) - b.astype(int)).mean() < 3, "sensor noise, mm-sized"


def test_pickfruit_scene_follows_the_world(camera):
    world = PickFruitWorld(PickFruitConfig(hand_probability=1.0))
    world.reset(3)
    renderer = SceneRenderer(camera, color_noise=0.0, depth_noise_mm=0.0)

    def pixels(name, rgb):
        ref = np.asarray(OBJECT_COLORS[name], dtype=float)
        chroma = rgb[..., :2] / np.maximum(rgb.sum(axis=-1), 1)[..., None]
        return int((np.abs(chroma - ref[:2] / ref.sum()).max(axis=-1) < 0.03).sum())

    far = (0.3, 0.15, 0.3)     # the gripper out of the way
    rgb, _ = renderer.render(pickfruit_scene(world, far, 0.07))
    assert all(pixels(f, rgb) > 100 for f in ("apple", "banana", "orange"))
    fruit = world.task[0]
    position = world.snapshot()[fruit].position
    world.grasp(position, 0.07)   # the tool comes near the task's fruit: the hand takes it
    assert world.counts.hands == 1 and world.snapshot()[fruit].removed
    assert not any(fruit in line for line in world.describe())
    state = world_state(world, 0, 1, AgentActivity("arm_0"), far, 0.07)   # the task still names the removed fruit
    assert next(e for e in state.entities if e.id == fruit).state == "removed"
    rgb, _ = renderer.render(pickfruit_scene(world, far, 0.07))
    assert pixels(fruit, rgb) == 0
    assert world.hand_in_view() is not None


def test_a_phantom_grasp_reports_the_width_and_leaves_the_fruit():
    world = PickFruitWorld(PickFruitConfig(phantom_probability=1.0, slip_probability=0.0))
    world.reset(0)
    fruit = world.snapshot()[world.task[0]]
    assert world.grasp(fruit.position, fruit.width_m) == fruit.width_m      # closed at its width ...
    lifted = (fruit.position[0], fruit.position[1], fruit.position[2] + 0.06)
    assert world.grasp(lifted, fruit.width_m) == fruit.width_m              # ... and stays there while carried
    after = world.snapshot()[fruit.name]
    assert not after.held and after.position == fruit.position and world.counts.phantoms == 1
    assert world.grasp(lifted, 0.07) is None                                # opening ends the pretence
