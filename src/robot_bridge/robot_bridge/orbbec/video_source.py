"""A recorded video or an image folder as a camera: the FrameSource of the camera node's `source: video` mode.

`VideoConfig` says what is played and how (rate, loop, depth folder, intrinsics); the rules for each (pacing,
pairing depth with frames, the default pinhole) are in docs/orbbec_camera.md, "Video mode".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from .frame_convert import FrameError, Intrinsics, pinhole_intrinsics
from .orbbec_device import Frames, SourceError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
DEPTH_SUFFIXES = (".png",)


class VideoSourceError(SourceError):
    """The video or image folder cannot be read (missing, empty, not a video, depth folder mismatch)."""


def image_files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files of `folder` with one of `suffixes` (any case), sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)


def read_rgb_image(path: Path) -> np.ndarray:
    """An image file as an (H, W, 3) uint8 RGB array; FrameError when unreadable."""
    # optional: Pillow is needed only to decode or resize images (MJPG, PNG, VLA input)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB")).copy()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise FrameError(f"cannot read image {path}: {exc}") from None


def read_depth_png(path: Path) -> np.ndarray:
    """A 16-bit single-channel PNG as (H, W) uint16 millimetres; FrameError for anything else."""
    # optional: Pillow is needed only to decode or resize images (MJPG, PNG, VLA input)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            mode = image.mode
            array = np.asarray(image)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise FrameError(f"cannot read depth image {path}: {exc}") from None
    if mode not in ("I;16", "I;16B", "I;16L", "I") or array.ndim != 2:
        raise FrameError(f"depth image {path} is mode {mode}, not a 16-bit single-channel PNG")
    if array.dtype != np.uint16:
        if array.size and (array.min() < 0 or array.max() > 65535):
            raise FrameError(f"depth image {path} has values outside 0..65535")
        array = array.astype(np.uint16)
    return np.ascontiguousarray(array)


@dataclass(frozen=True)
class VideoConfig:
    """What a VideoSource plays and how."""

    path: str              # a video file (any container and codec PyAV's FFmpeg decodes) or a folder of PNG / JPG
    fps: float             # frames per second, paced on the steady clock (> 0)
    loop: bool = True      # start again after the last frame; False: the source is `finished` after it
    depth_path: str = ""   # a folder of 16-bit single-channel PNGs in mm, paired with the frames by order
    intrinsics: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # fx, fy, cx, cy (px; zeros: defaults)
    hfov_deg: float = 60.0  # fx 0: an undistorted pinhole of this horizontal field of view for the first frame


class VideoSource:
    """A FrameSource playing a video file or an image folder (with optional depth PNGs) at a fixed rate."""

    def __init__(self, config: VideoConfig, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not config.fps > 0:
            raise ValueError(f"fps {config.fps} is not positive")
        self.path = Path(config.path)
        self.fps = float(config.fps)
        self.loop = config.loop
        self.depth_path = Path(config.depth_path) if config.depth_path else None
        self.intrinsics_override = tuple(float(x) for x in config.intrinsics)
        self.hfov_deg = config.hfov_deg
        self.clock, self.sleep = clock, sleep
        self.description = ""
        self.finished = False
        self.passes = 0            # completed passes over the material
        self.index = 0             # the next frame's index within the current pass
        self._images: list[Path] = []
        self._depth_files: list[Path] = []
        self._container = None
        self._decoded: Optional[Iterator] = None
        self._due: Optional[float] = None
        self._color_intrinsics: Optional[Intrinsics] = None

    # ------------------------------------------------------------------ open / close

    def open(self) -> None:
        """Check the material and start at its first frame; VideoSourceError when it cannot be played."""
        self.close()
        if not self.path.exists():
            raise VideoSourceError(f"video_path {self.path} does not exist")
        if self.depth_path is not None:
            if not self.depth_path.is_dir():
                raise VideoSourceError(f"depth_path {self.depth_path} is not a folder")
            self._depth_files = image_files(self.depth_path, DEPTH_SUFFIXES)
            if not self._depth_files:
                raise VideoSourceError(f"depth_path {self.depth_path} holds no PNG images")
        if self.path.is_dir():
            self._images = image_files(self.path, IMAGE_SUFFIXES)
            if not self._images:
                raise VideoSourceError(f"video_path {self.path} holds no PNG or JPG images")
            if self._depth_files and len(self._depth_files) != len(self._images):
                raise VideoSourceError(f"depth_path {self.depth_path} holds {len(self._depth_files)} PNGs for "
                                       f"{len(self._images)} colour images in {self.path}")
            self.description = f"{len(self._images)} images in {self.path} at {self.fps:g} fps"
        else:
            self._open_video()
            self.description = f"video {self.path} at {self.fps:g} fps"
        if self._depth_files:
            self.description += f", depth from {len(self._depth_files)} PNGs"
        self.index, self.finished, self._due = 0, False, None

    def _open_video(self) -> None:
        # optional: PyAV is needed only to replay a video file
        import av

        try:
            container = av.open(str(self.path))
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise VideoSourceError(f"video_path {self.path} is not a readable video: {exc}") from None
        if not container.streams.video:
            container.close()
            raise VideoSourceError(f"video_path {self.path} has no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        self._container, self._decoded = container, container.decode(stream)

    def close(self) -> None:
        """Release the video decoder (an image folder holds nothing open)."""
        container, self._container, self._decoded = self._container, None, None
        if container is not None:
            container.close()

    # ------------------------------------------------------------------ frames

    def read(self, timeout_s: float) -> Optional[Frames]:
        """The next frame once it is due, None when it is not due within `timeout_s` or the material is finished."""
        if self.finished:
            return None
        if self._images == [] and self._decoded is None:
            raise VideoSourceError("the video source is not open")
        now = self.clock()
        if self._due is None:
            self._due = now
        wait = self._due - now
        if wait > timeout_s:
            self.sleep(timeout_s)
            return None
        if wait > 0:
            self.sleep(wait)
        period, now = 1.0 / self.fps, self.clock()
        self._due += period
        if self._due <= now:  # a whole period late (a stall): the next frame a period from now, no burst
            self._due = now + period
        index = self.index
        color = self._next_color()
        if color is None:
            if not self.loop:
                self.finished = True
                return None
            self._rewind()
            index = self.index
            color = self._next_color()
            if color is None:
                raise VideoSourceError(f"{self.path} yields no frames")
        return self._frames(color, index)

    def _next_color(self) -> Optional[np.ndarray]:
        """The next colour frame of this pass (None at its end); the index advances even past a bad frame."""
        if self._images:
            if self.index >= len(self._images):
                return None
            path = self._images[self.index]
            self.index += 1
            return read_rgb_image(path)
        # optional: PyAV is needed only to replay a video file
        import av

        try:
            frame = next(self._decoded)
        except StopIteration:
            return None
        except (av.FFmpegError, OSError, ValueError) as exc:
            self._decoded = iter(())  # a broken stream ends this pass; the next read loops or finishes
            raise FrameError(f"decoding {self.path} failed after {self.index} frames: {exc}") from None
        self.index += 1
        return frame.to_ndarray(format="rgb24")

    def _rewind(self) -> None:
        self.passes += 1
        self.index = 0
        if not self._images:
            self.close()
            self._open_video()

    def _frames(self, color: np.ndarray, index: int) -> Frames:
        height, width = color.shape[:2]
        intr = self._color_intrinsics
        if intr is None or (intr.width, intr.height) != (width, height):
            intr = self._color_intrinsics = self._intrinsics_for(width, height)
        depth = depth_intr = None
        if index < len(self._depth_files):
            depth = read_depth_png(self._depth_files[index])
            depth_intr = intr.scaled_to(depth.shape[1], depth.shape[0])
        return Frames(color, depth, intr, depth_intr)

    def _intrinsics_for(self, width: int, height: int) -> Intrinsics:
        fx, fy, cx, cy = self.intrinsics_override
        if fx > 0:
            return Intrinsics(width, height, fx, fy if fy > 0 else fx, cx if cx > 0 else width / 2.0,
                              cy if cy > 0 else height / 2.0)
        return pinhole_intrinsics(width, height, self.hfov_deg)
