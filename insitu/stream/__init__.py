"""Frames out, steering back, over ADIOS2.

:class:`FrameWriter` / :class:`FrameReader`: composited frames (8-bit RGBA, optional
depth, step, time, camera, field ranges) as ADIOS2 steps, SST for live viewers and
BP5 for files. :class:`SteeringWriter` / :class:`SteeringReader`: updates (camera, iso
values, colormap, transfer function, pause...) from a viewer back to the simulation on
a second stream, ``<frames>.steer``. Defaults never make a simulation wait for a viewer,
and a lossless writer waits for one at most ``deadline`` seconds (:class:`ReaderTimeoutError`).
SST has no authentication: readers open only contact files of the user's own
(:class:`ContactFileError`), and contact files name the loopback interface unless told
otherwise (:func:`sst_parameters`, ``$INSITU_SST_INTERFACE``).
"""

from ._sst import ContactFileError, ReaderTimeoutError, open_contact, read_contact, sst_parameters
from .frames import DEADLINE, LOSSLESS, SST_DEFAULTS, Frame, FrameReader, FrameWriter
from .steering import SteeringReader, SteeringWriter, steering_name

__all__ = ["ContactFileError", "DEADLINE", "Frame", "FrameReader", "FrameWriter", "LOSSLESS", "ReaderTimeoutError",
           "SST_DEFAULTS", "SteeringReader", "SteeringWriter", "open_contact", "read_contact", "sst_parameters",
           "steering_name"]
