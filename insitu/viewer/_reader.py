"""``python -m insitu.viewer._reader STREAM ENGINE TIMEOUT``: the viewer's frame-reading process.

ADIOS2's Python calls hold the GIL while they block, and an SST open blocks until the
writer's contact file exists and the writer next calls into ADIOS2 (for a paused
simulation: until the open times out). In a thread that would freeze the viewer's web
server and its steering heartbeat, so the frames are read here, in a process of its
own, and piped to the viewer: first ``{"connected": true}``, then per frame one JSON
header line (step, time, shape, camera, ranges) and the image bytes (the depth, which
the viewer does not show, stays behind). The last line is ``{"end": true}`` or
``{"error": "..."}``. It exits at the end of the stream, and is ended by SIGTERM
(also sent when the viewer dies).

An SST step is awaited without a timeout: ADIOS2's SST ``BeginStep`` with a finite
timeout can crash or hang when a step arrives as the timeout expires (ADIOS2 issue
#1862; seen here with 2.12 as a segfault within a minute of steps arriving about once a
second). Without one, ``FrameReader.next`` returns None only at the end of the stream.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from typing import BinaryIO

import numpy as np

def write_frame(out: BinaryIO, f) -> None:
    img = np.ascontiguousarray(f.image, np.uint8)
    head = {"step": int(f.step), "time": float(f.time), "shape": list(img.shape),
            "camera": None if f.camera is None else [float(x) for x in f.camera],
            "ranges": {k: [float(a), float(b)] for k, (a, b) in f.ranges.items()},
            "stats": f.stats, "timings": f.timings, "frame_number": f.frame_number}
    out.write(json.dumps(head).encode() + b"\n")
    out.write(memoryview(img).cast("B"))
    out.flush()


def read_frame(inp: BinaryIO):
    """The next frame from a reader process, or its last message (``{"end": True}`` /
    ``{"error": ...}``; ``{"error": ...}`` too when it died without one)."""
    from ..stream import Frame

    line = inp.readline()
    if not line:
        return {"error": "the frame reader process exited", "crashed": True}
    head = json.loads(line)
    if "step" not in head:
        return head
    shape = tuple(head["shape"])
    n = int(np.prod(shape))
    img = np.frombuffer(_read_exact(inp, n), np.uint8).reshape(shape)
    camera = None if head["camera"] is None else np.asarray(head["camera"], np.float64)
    return Frame(head["step"], head["time"], img, camera, None, {k: tuple(v) for k, v in head["ranges"].items()},
                 head.get("stats", {}), head.get("timings", {}), head.get("frame_number"))


def _read_exact(inp: BinaryIO, n: int) -> bytes:
    data = inp.read(n)
    if data is None or len(data) != n:
        raise EOFError("the frame reader process exited in the middle of a frame")
    return data


def _die_with_parent() -> None:
    try:  # Linux: SIGTERM when the viewer dies, even by SIGKILL
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def main(argv: list[str]) -> int:
    stream, engine, timeout = argv[0], argv[1], float(argv[2])
    _die_with_parent()
    out = sys.stdout.buffer

    def message(obj) -> None:
        try:
            out.write(json.dumps(obj).encode() + b"\n")
            out.flush()
        except (BrokenPipeError, ValueError):
            pass

    from ..stream import FrameReader

    reader = None
    try:
        reader = FrameReader(stream, engine, timeout=timeout)
        message({"connected": True})
        # SST: wait as long as it takes (see above); BP5: a file still being written gets
        # `timeout` seconds for each next step
        wait = -1.0 if engine == "SST" else timeout
        while True:
            f = reader.next(timeout=wait)
            if f is None:
                message({"end": True})
                return 0
            write_frame(out, f)
    except BrokenPipeError:  # the viewer is gone
        return 0
    except Exception as exc:
        message({"error": re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip(), "connected": reader is not None})
        return 1
    finally:
        if reader is not None:
            try:
                reader.close()
            except Exception:
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
