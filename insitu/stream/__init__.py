"""Frames out, steering back, over ADIOS2.

:class:`FrameWriter` / :class:`FrameReader`: composited frames (8-bit RGBA, optional
depth, step, time, camera, field ranges) as ADIOS2 steps, SST for live viewers and
BP5 for files. :class:`SteeringWriter` / :class:`SteeringReader`: updates (camera, iso
values, colormap, transfer function, pause...) from a viewer back to the simulation on
a second stream, ``<frames>.steer``. Defaults never make a simulation wait for a viewer.
"""

from .frames import LOSSLESS, SST_DEFAULTS, Frame, FrameReader, FrameWriter
from .steering import SteeringReader, SteeringWriter, steering_name

__all__ = ["Frame", "FrameReader", "FrameWriter", "LOSSLESS", "SST_DEFAULTS", "SteeringReader", "SteeringWriter",
           "steering_name"]
