"""Camera frames as sensor_msgs: images and CameraInfo on OrbbecSDK_ROS2's topics (the camera node, the twin)."""

from __future__ import annotations

import sys

import numpy as np
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header

from brace_common.validation import InvalidInput, shorten

from .frame_convert import Intrinsics, camera_info_data

IMAGE_QOS = qos_profile_sensor_data
"""Best effort, keep last 5: a lost image is superseded by the next (matches brace_common.qos.STATE readers)."""
MAX_IMAGE_PIXELS = 4096 * 4096


def image_msg(array: np.ndarray, encoding: str, header: Header) -> Image:
    """A sensor_msgs/Image of a C-contiguous (H, W[, C]) array."""
    array = np.ascontiguousarray(array)
    msg = Image(header=header, height=array.shape[0], width=array.shape[1], encoding=encoding,
                is_bigendian=int(sys.byteorder == "big" and array.itemsize > 1), step=array.strides[0])
    msg.data = array.tobytes()
    return msg


def camera_info_msg(intr: Intrinsics, header: Header) -> CameraInfo:
    """A sensor_msgs/CameraInfo of `intr`."""
    data = camera_info_data(intr)
    return CameraInfo(header=header, width=data.width, height=data.height, distortion_model=data.distortion_model,
                      d=list(data.d), k=list(data.k), r=list(data.r), p=list(data.p))


def image_to_array(msg: Image) -> np.ndarray:
    """An rgb8 / bgr8 sensor_msgs/Image as an (H, W, 3) uint8 RGB array (a view where possible); InvalidInput if not."""
    encoding = msg.encoding.lower()
    if encoding not in ("rgb8", "bgr8"):
        raise InvalidInput("encoding", f"image encoding '{shorten(msg.encoding, 24)}' is not rgb8 or bgr8")
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0 or height * width > MAX_IMAGE_PIXELS:
        raise InvalidInput("size", f"image size {width}x{height} is empty or too large")
    if step < 3 * width or len(msg.data) < step * (height - 1) + 3 * width:
        raise InvalidInput("size", f"image data ({len(msg.data)} bytes, step {step}) is short for {width}x{height} rgb")
    data = np.frombuffer(msg.data, dtype=np.uint8)
    rows = np.lib.stride_tricks.as_strided(data, shape=(height, width, 3), strides=(step, 3, 1), writeable=False)
    return rows[:, :, ::-1] if encoding == "bgr8" else rows


def depth_to_array(msg: Image) -> np.ndarray:
    """A 16UC1 sensor_msgs/Image (mm) as an (H, W) uint16 array in host byte order; InvalidInput if it is not one."""
    if msg.encoding.lower() not in ("16uc1", "mono16"):
        raise InvalidInput("encoding", f"depth encoding '{shorten(msg.encoding, 24)}' is not 16UC1")
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0 or height * width > MAX_IMAGE_PIXELS:
        raise InvalidInput("size", f"depth size {width}x{height} is empty or too large")
    if step < 2 * width or step % 2 or len(msg.data) < step * (height - 1) + 2 * width:
        raise InvalidInput("size", f"depth data ({len(msg.data)} bytes, step {step}) is short for {width}x{height}")
    dtype = np.dtype(">u2" if msg.is_bigendian else "<u2")
    data = np.frombuffer(msg.data, dtype=np.uint8)[:step * height] if len(msg.data) >= step * height else \
        np.concatenate([np.frombuffer(msg.data, dtype=np.uint8), np.zeros(step * height - len(msg.data), np.uint8)])
    rows = data.reshape(height, step)[:, :2 * width]
    return np.ascontiguousarray(rows).view(dtype).reshape(height, width).astype(np.uint16)
