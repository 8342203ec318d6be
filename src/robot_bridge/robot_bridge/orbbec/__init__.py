"""Orbbec RGB-D cameras: the camera node, the pyorbbecsdk device, frame conversion and the video-replay source."""
