"""vla_action: OpenVLA's token decoding and un-normalisation, and the scaling to the arm, against hand-computed values."""

import math

import numpy as np
import pytest

from robot_bridge.openvla.vla_action import (
    ActionError,
    ArmScaling,
    GripperMapping,
    anchored,
    bin_centers,
    bin_edges,
    check_action,
    to_arm,
    tokens_to_normalized,
    unnormalize,
)


def test_bins_and_centers():
    edges = bin_edges()
    assert edges.shape == (256,) and edges[0] == -1.0 and edges[-1] == 1.0
    assert edges[1] - edges[0] == pytest.approx(2 / 255)
    centers = bin_centers()
    assert centers.shape == (255,)
    # center i = -1 + (2 i + 1) / 255
    assert centers[0] == pytest.approx(-1 + 1 / 255)
    assert centers[127] == pytest.approx(0.0, abs=1e-12)
    assert centers[254] == pytest.approx(1 - 1 / 255)
    assert bin_centers(3).tolist() == [-0.5, 0.5]
    with pytest.raises(ValueError):
        bin_edges(1)


def test_token_ids_decode_to_bin_centers():
    # id = vocab_size - k -> center k - 1; k = 256 (the first action token) folds onto the last center
    ids = [31999, 31872, 31745, 31744, 31998]
    values = tokens_to_normalized(ids)
    assert values == pytest.approx([-1 + 1 / 255, 0.0, 1 - 1 / 255, 1 - 1 / 255, -1 + 3 / 255])
    # another vocabulary and bin count: vocab 100, 5 bins -> centers [-0.75, -0.25, 0.25, 0.75]
    assert tokens_to_normalized([99, 98, 97, 96, 95], vocab_size=100, n_bins=5).tolist() == \
        [-0.75, -0.25, 0.25, 0.75, 0.75]


def test_token_ids_outside_the_action_range():
    with pytest.raises(ActionError) as err:
        tokens_to_normalized([31999, 32000])
    assert err.value.reason == "not_action_tokens"
    with pytest.raises(ActionError):
        tokens_to_normalized([100])
    # non-strict clips as the model's decoder does: 32000 -> index -1 -> 0; 100 -> the last center
    assert tokens_to_normalized([32000, 100], strict=False) == pytest.approx([-1 + 1 / 255, 1 - 1 / 255])
    with pytest.raises(ActionError) as err:
        tokens_to_normalized([0.5, 1.0])
    assert err.value.reason == "bad_tokens"


def test_unnormalize_with_q01_q99_and_mask():
    q01 = [-0.02, -0.04, 0.0, -0.1, -0.2, -0.3, 0.0]
    q99 = [0.02, 0.04, 0.01, 0.1, 0.2, 0.3, 1.0]
    mask = [True] * 6 + [False]
    normalized = [-1.0, 1.0, 0.0, 0.5, -0.5, 0.0, 0.7]
    out = unnormalize(normalized, q01, q99, mask)
    # 0.5 (n + 1) (q99 - q01) + q01
    assert out == pytest.approx([-0.02, 0.04, 0.005, 0.05, -0.1, 0.0, 0.7])
    # without a mask every dimension is mapped: 0.7 -> 0.85 on [0, 1]
    assert unnormalize(normalized, q01, q99)[6] == pytest.approx(0.85)
    with pytest.raises(ActionError) as err:
        unnormalize([0.0, 0.0], q01, q99)
    assert err.value.reason == "bad_statistics"


def test_tokens_to_arm_end_to_end():
    # k = 128 decodes to 0.0 -> the middle of [q01, q99]
    normalized = tokens_to_normalized([32000 - 128] * 7)
    action = unnormalize(normalized, [-0.01] * 7, [0.03] * 7, [True] * 6 + [False])
    assert action == pytest.approx([0.01] * 6 + [0.0])


def test_scaling_and_per_axis_limits():
    scaling = ArmScaling(translation_scale=2.0, rotation_scale=0.5, max_translation_m=(0.01, 0.02, 0.05),
                         max_rotation_rad=(0.1, 0.1, 0.0))
    arm = to_arm([0.004, -0.02, 0.01, 0.3, -0.1, 0.2, 1.0], scaling, GripperMapping())
    assert arm.translation_m == pytest.approx((0.008, -0.02, 0.02))   # y: -0.04 cut to -0.02
    assert arm.rotation_rad == pytest.approx((0.1, -0.05, 0.0))       # roll 0.15 cut to 0.1, yaw limit 0
    assert arm.clipped
    arm = to_arm([0.001, 0, 0, 0, 0, 0, 1.0], ArmScaling(), GripperMapping())
    assert arm.translation_m == (0.001, 0.0, 0.0) and not arm.clipped


def test_a_step_is_anchored_to_the_pose_it_was_computed_from():
    # the VLA saw the tool at z 0.135 and asked for -0.015 (to 0.12); the previous step took it to 0.12 meanwhile
    arm = to_arm([0.0, 0.0, -0.015, 0.0, 0.0, 0.05, 0.0], ArmScaling(), GripperMapping())
    now = anchored(arm, (0.3, 0.0, 0.135), (0.3, 0.0, 0.12), ArmScaling())
    assert now.translation_m == pytest.approx((0.0, 0.0, 0.0)) and now.rotation_rad == arm.rotation_rad
    assert now.gripper_m == arm.gripper_m and not now.clipped
    far = anchored(arm, (0.3, 0.0, 0.135), (0.26, 0.0, 0.08), ArmScaling())   # it moved on a lot: cut to the limit
    assert far.translation_m == pytest.approx((0.02, 0.0, 0.02)) and far.clipped


def test_gripper_threshold_and_continuous():
    bridge = GripperMapping(mode="threshold", open_value=1.0, closed_value=0.0, threshold=0.5, open_m=0.07)
    assert bridge.opening_m(1.0) == 0.07 and bridge.opening_m(0.5) == 0.07
    assert bridge.opening_m(0.49) == 0.0 and bridge.opening_m(-3.0) == 0.0
    inverted = GripperMapping(mode="threshold", open_value=-1.0, closed_value=1.0, open_m=0.06)
    assert inverted.opening_m(-1.0) == 0.06 and inverted.opening_m(1.0) == 0.0
    assert inverted.openness(0.0) == 0.5 and inverted.opening_m(0.1) == 0.0
    continuous = GripperMapping(mode="continuous", open_m=0.08, closed_m=0.01)
    assert continuous.opening_m(0.25) == pytest.approx(0.01 + 0.25 * 0.07)
    assert continuous.opening_m(2.0) == pytest.approx(0.08) and continuous.opening_m(-1.0) == pytest.approx(0.01)


def test_config_validation():
    for bad in (GripperMapping(mode="binary"), GripperMapping(open_value=0.0), GripperMapping(threshold=1.5),
                GripperMapping(open_m=0.0), GripperMapping(closed_m=math.nan)):
        with pytest.raises(ValueError):
            bad.validate()
    GripperMapping().validate()
    for bad in (ArmScaling(translation_scale=0.0), ArmScaling(max_translation_m=(0.1, 0.1)),
                ArmScaling(max_rotation_rad=(0.1, -0.1, 0.1)), ArmScaling(rotation_scale=math.inf)):
        with pytest.raises(ValueError):
            bad.validate()
    ArmScaling().validate()


def test_malformed_actions():
    for bad, reason in (([0.0] * 6, "bad_shape"), (np.zeros((1, 7)), "bad_shape"), ([0.0] * 6 + [math.nan], "non_finite"),
                        (["a"] * 7, "not_numeric"), (None, "bad_shape")):
        with pytest.raises(ActionError) as err:
            check_action(bad)
        assert err.value.reason == reason, bad
    with pytest.raises(ActionError):
        to_arm([0.0] * 6 + [math.inf], ArmScaling(), GripperMapping())


@pytest.mark.parametrize("bad, reason", [
    (np.array([0.01] * 6 + [1 + 0j]), "not_real"),                  # a cast would drop the imaginary part silently
    (np.full(7, 1j, dtype=np.complex64), "not_real"),
    ([0.0] * 6 + [1j], "not_real"),
    (np.array([0.0] * 6 + [2j], dtype=object), "not_real"),
    ([True] * 7, "not_numeric"),                                   # booleans are not numbers here
    (np.ones(7, dtype=bool), "not_numeric"),
    ([0.0] * 6 + [np.True_], "not_numeric"),
    (["0.1"] * 7, "not_numeric"),                                  # numpy would parse these strings
    (np.array(["0.1"] * 7), "not_numeric"),
    (np.zeros(7, dtype="datetime64[s]"), "not_numeric"),           # numpy would cast these to 0.0
    ([0.0] * 6 + [None], "not_numeric"),
    (np.array([0.0] * 6 + [np.nan]), "non_finite"),
    ([0.0] * 6 + [-math.inf], "non_finite"),
    ([0] * 6 + [10 ** 400], "non_finite"),
    ([[0.0] * 7], "bad_shape"),
    (np.zeros(8), "bad_shape"),
    ({"x": 1.0}, "bad_shape"),
    ("0,0,0,0,0,0,1", "bad_shape"),
])
def test_non_real_actions_are_refused(bad, reason):
    with pytest.raises(ActionError) as err:
        check_action(bad)
    assert err.value.reason == reason, (bad, err.value)
    with pytest.raises(ActionError):
        to_arm(bad, ArmScaling(), GripperMapping())


def test_real_actions_of_any_real_type_are_taken():
    for good in ([0, 0, 0, 0, 0, 0, 1], np.arange(7, dtype=np.uint8), np.zeros(7, np.float16), np.zeros(7, np.int64),
                 np.array([0.5] * 7, dtype=object), tuple(np.float32(0.25) for _ in range(7))):
        values = check_action(good)
        assert values.dtype == np.float64 and values.shape == (7,)
