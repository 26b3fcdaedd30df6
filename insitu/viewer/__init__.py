"""A local web viewer for frame streams, with steering back to the simulation.

    >>> v = serve("out/frames")            # a live SST stream (a BP5 directory is replayed)
    >>> print(v.url)                       # open it in a browser: http://127.0.0.1:PORT/?token=...
    >>> v.steer({"iso_values": [0.4]})     # what the page's controls do
    >>> v.close()

Command line: ``insitu view STREAM`` (see :mod:`insitu.cli`). The page shows the newest
frame with its step, time and frames/s, a plot over the steps of what the frames carry
(the fields' min, mean and max, the stage timings), the frames dropped on the way (live)
or a timeline (replays: play/pause, slider, jump to a step, frame by frame), and has
controls for the camera (orbit, zoom),
iso values, colormap, volume opacity, simulation parameters, pause and stop; each
control POSTs a steering update, the viewer merges it into its state and sends the whole
state on ``<stream>.steer`` (and again every second), which the simulation's adaptor
applies. Every request needs the viewer's per-run token (in ``Viewer.url``) and a
``Host`` naming the viewer: other local users and web pages can neither watch nor steer.
Needs only :mod:`insitu.stream`, NumPy and Pillow (and ffmpeg for ``mp4=``).
"""

from __future__ import annotations

from .server import Handler, Viewer
from .state import CAMERA_KEYS, COLORMAPS, STEER_KEYS, FrameBuffer, Series, SteeringState, validate_update

__all__ = ["CAMERA_KEYS", "COLORMAPS", "FrameBuffer", "Handler", "STEER_KEYS", "Series", "SteeringState", "Viewer",
           "serve", "validate_update"]


def serve(stream: str, *, engine: str | None = None, host: str = "127.0.0.1", port: int = 0,
          png: str | None = None, mp4: str | None = None, steer: bool | None = None,
          timeout: float = 30.0, rate: float = 10.0, heartbeat: float = 1.0) -> Viewer:
    """Start viewing `stream` and serving it over HTTP; returns at once.

    Parameters
    ----------
    stream : str
        A live SST stream name (the writer's ``FrameWriter`` name) or a BP5 directory.
    engine : {"SST", "BP5"}, optional
        Default: BP5 when `stream` is a directory, else SST.
    host, port : str, int
        Where to serve; port 0 picks a free one (``Viewer.url`` tells which). A host other
        than loopback serves plain HTTP to the network: the token then travels unencrypted.
    png : str, optional
        Directory: every received frame is written there as ``frame_STEP.png`` (6 digits).
    mp4 : str, optional
        A movie of the received frames (H.264, ``rate`` frames/s), finished when the
        stream ends or the viewer closes. Needs ffmpeg (the ``imageio-ffmpeg`` wheel).
    steer : bool, optional
        Forward steering on ``<stream>.steer``. Default: for SST streams. BP5 replays have none.
    timeout : float
        Seconds to wait for a live stream's writer.
    rate : float
        Frames per second of a BP5 replay and of the movie.
    heartbeat : float
        Seconds between re-sends of the whole steering state.

    Returns
    -------
    Viewer
        ``.url`` (with the secret ``.token``: only requests carrying it are answered),
        ``.status()``, ``.steer(update)``, ``.wait(timeout)`` (for the end of the stream),
        ``.close()``; also a context manager.

    Notes
    -----
    With steering, the steering stream's SST writer opens before this returns; the first
    SST writer of a process makes ADIOS2 install a SIGINT handler that exits at once
    (status 1). A program that wants Ctrl-C to close the viewer cleanly installs its own
    handler after this call (``insitu view`` does).
    """
    return Viewer(stream, engine=engine, host=host, port=port, png=png, mp4=mp4, steer=steer,
                  timeout=timeout, rate=rate, heartbeat=heartbeat)
