"""Recording received frames: PNG files and an MP4 movie.

:func:`encode_png` is what the HTTP server serves; :class:`PngDirectory` writes every
frame as ``DIR/frame_STEP.png`` (RGBA, exactly the pixels received); :class:`Mp4Writer`
pipes frames to ffmpeg (the binary shipped in the ``imageio-ffmpeg`` wheel, else
``ffmpeg`` on PATH) as they arrive and finishes the file on :meth:`Mp4Writer.close`.
A movie has no alpha: frames are composited over black and padded to even sizes (H.264
with yuv420p needs them); a frame whose size differs from the first one's is padded or
cropped to it.

:class:`FrameStore` keeps the frames of a BP5 replay for the page's timeline: compressed
into a temporary file no other user can open (removed when the viewer closes or dies),
so seeking costs the disk, not the viewer's memory.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import subprocess
import tempfile
import threading
import zlib

import numpy as np

__all__ = ["FrameStore", "Mp4Writer", "PngDirectory", "encode_png", "ffmpeg_exe"]


def encode_png(image: np.ndarray, *, compress_level: int = 1) -> bytes:
    """``(H, W, 4) uint8`` straight-alpha RGBA -> PNG bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image), "RGBA").save(buf, "PNG", compress_level=compress_level)
    return buf.getvalue()


class PngDirectory:
    """Writes each frame as ``DIR/frame_STEP.png`` (step zero-padded to 6 digits)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.written = 0

    def path(self, step: int) -> str:
        return os.path.join(self.directory, f"frame_{step:06d}.png")

    def write(self, frame) -> None:
        p = self.path(frame.step)
        tmp = p + ".part"
        with open(tmp, "wb") as f:
            f.write(encode_png(frame.image, compress_level=3))
        os.replace(tmp, p)  # a reader never sees half a file
        self.written += 1


def ffmpeg_exe() -> str:
    """The ffmpeg binary: imageio-ffmpeg's, else ``ffmpeg`` on PATH."""
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except Exception:
        exe = shutil.which("ffmpeg")
        if exe:
            return exe
        raise RuntimeError("--mp4 needs ffmpeg: pip install 'insitu[viewer]' (imageio-ffmpeg), "
                           "or install ffmpeg") from None


def to_rgb(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Straight-alpha RGBA over black, padded (bottom/right) or cropped to ``size = (H, W)``."""
    a = image[..., 3:4].astype(np.uint16)
    rgb = ((image[..., :3].astype(np.uint16) * a + 127) // 255).astype(np.uint8)
    h, w = size
    out = np.zeros((h, w, 3), np.uint8)
    hh, ww = min(h, rgb.shape[0]), min(w, rgb.shape[1])
    out[:hh, :ww] = rgb[:hh, :ww]
    return out


class Mp4Writer:
    """An H.264 MP4 of frames, written as they come (``fps`` frames per second)."""

    def __init__(self, path: str, *, fps: float = 10.0) -> None:
        self.path = path
        self.fps = float(fps)
        self.size: tuple[int, int] | None = None
        self.written = 0
        self._proc: subprocess.Popen | None = None
        self._exe = ffmpeg_exe()  # fail early, before any frame
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)

    def _start(self, h: int, w: int) -> None:
        self.size = (h + h % 2, w + w % 2)
        cmd = [self._exe, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{self.size[1]}x{self.size[0]}", "-r", f"{self.fps:g}", "-i", "-", "-an",
               "-c:v", "libx264", "-pix_fmt", "yuv420p", "-preset", "veryfast", "-crf", "18",
               "-movflags", "+faststart", self.path]
        # its own session: a Ctrl-C at the terminal reaches the viewer, which then finishes the file
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, start_new_session=True)

    def write(self, frame) -> None:
        if self._proc is None:
            self._start(*frame.image.shape[:2])
        self._proc.stdin.write(to_rgb(frame.image, self.size).tobytes())
        self.written += 1

    def close(self, timeout: float = 60.0) -> None:
        """Finish the file (nothing is written when no frame came)."""
        p, self._proc = self._proc, None
        if p is None:
            return
        try:
            err = p.communicate(timeout=timeout)[1]  # closes ffmpeg's input: it finishes the file
        except subprocess.TimeoutExpired:
            p.kill()
            err = p.communicate()[1]
        if p.returncode != 0:
            raise RuntimeError(f"ffmpeg failed writing {self.path} (exit {p.returncode}): "
                               f"{err.decode(errors='replace').strip()[-500:]}")


class FrameStore:
    """Frames by position (0, 1, ... in arrival order), their images zlib-compressed (level
    1: a fraction of a frame's interval) in an anonymous temporary file; thread-safe.

    :meth:`add` keeps a frame, :meth:`get` gives it back (image read and inflated; no
    depth), :meth:`find` the position of a step, :meth:`close` removes the file.
    """

    def __init__(self, directory: str | None = None) -> None:
        self._file = tempfile.TemporaryFile(prefix="insitu-view-", dir=directory)  # unlinked at once, mode 0600
        self._lock = threading.Lock()
        self._index: list[tuple[int, int, tuple, object]] = []  # (offset, bytes, shape, frame without image)
        self._end = 0

    def __len__(self) -> int:
        return len(self._index)

    def add(self, frame) -> int:
        """Keep `frame` (an :class:`insitu.stream.Frame`); returns its position."""
        img = np.ascontiguousarray(frame.image, np.uint8)
        data = zlib.compress(memoryview(img).cast("B"), 1)
        meta = dataclasses.replace(frame, image=np.zeros((0, 0, 4), np.uint8), depth=None)
        with self._lock:
            os.pwrite(self._file.fileno(), data, self._end)
            self._index.append((self._end, len(data), img.shape, meta))
            self._end += len(data)
            return len(self._index) - 1

    def get(self, i: int):
        """The frame at position `i` (IndexError outside ``0 .. len - 1``)."""
        with self._lock:
            if not 0 <= i < len(self._index):
                raise IndexError(f"frame position {i}: expected 0 .. {len(self._index) - 1}")
            off, n, shape, meta = self._index[i]
        data = zlib.decompress(os.pread(self._file.fileno(), n, off))
        return dataclasses.replace(meta, image=np.frombuffer(data, np.uint8).reshape(shape))

    def steps(self) -> list[int]:
        """Each position's step."""
        with self._lock:
            return [m.step for _, _, _, m in self._index]

    def find(self, step: int) -> int:
        """The position of the first frame of `step`, else of the nearest step before it
        (the first frame when none is before); ValueError when empty."""
        steps = self.steps()
        if not steps:
            raise ValueError("no frame yet")
        exact = [i for i, s in enumerate(steps) if s == step]
        if exact:
            return exact[0]
        before = [s for s in steps if s < step]
        return steps.index(max(before)) if before else 0

    def close(self) -> None:
        self._file.close()
