"""FrameWriter's staging of device frames: one counted copy into a host buffer reused from
frame to frame, and no frame overwritten by the next before it was sent (BP5 and SST).

Device frames are stood in for on CPU by :class:`FakeDevice`, an array over host memory
that the gateway (:mod:`insitu.arrays`) takes for a CuPy array; ``tests/gpu/test_frames_gpu.py``
runs the same path with CuPy.
"""

import os
import select
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import ROOT
from insitu import arrays
from insitu.stream import FrameReader, FrameWriter
from insitu.stream.frames import Frame

#: (height, width) of successive frames: repeats (buffer reused), changes (re-allocated), returns.
SIZES = [(24, 40), (24, 40), (48, 16), (48, 16), (8, 8), (24, 40), (24, 40)]


class FakeDevice:
    """A "device" array over host memory, copied out as CuPy's ``get(out=)`` does."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        self.shape, self.dtype, self.ndim, self.nbytes = a.shape, a.dtype, a.ndim, a.nbytes
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                         "data": (a.ctypes.data, False), "version": 3}

    def get(self, out=None):
        if out is None:
            return self._a.copy()
        out[...] = self._a
        return out

    def astype(self, dtype):
        return FakeDevice(self._a.astype(dtype))


@pytest.fixture
def fake_device(monkeypatch):
    """Makes the gateway take :class:`FakeDevice` for a CuPy array; yields the buffers
    ``arrays.pinned_empty`` handed out, in order."""
    cupy_like = arrays._is_cupy_ndarray
    monkeypatch.setattr(arrays, "_is_cupy_ndarray", lambda x: isinstance(x, FakeDevice) or cupy_like(x))
    taken = []
    pinned_empty = arrays.pinned_empty

    def spy(shape, dtype):
        taken.append(pinned_empty(shape, dtype))
        return taken[-1]

    monkeypatch.setattr(arrays, "pinned_empty", spy)
    return taken


def image(step: int, hw) -> np.ndarray:
    """The pixels of frame `step`: different every step (a stale buffer cannot pass)."""
    return np.random.default_rng(step).integers(0, 256, (*hw, 4), dtype=np.uint8)


def depth(step: int, hw) -> np.ndarray:
    return np.random.default_rng(1000 + step).random(hw, dtype=np.float32)


def write_frames(w: FrameWriter, device: bool) -> list:
    """Writes a frame of each of SIZES (image and depth) from one reused source, as a
    renderer's output buffer is; returns the transfers each write counted."""
    counts = []
    for step, hw in enumerate(SIZES):
        img, dep = image(step, hw), depth(step, hw).astype(np.float64)  # depth converted by the writer
        with arrays.count_transfers() as c:
            w.write(FakeDevice(img) if device else img, step=step, time=0.5 * step,
                    depth=FakeDevice(dep) if device else dep)
        img[...] = 0  # the source is rewritten at once: what was sent must be a copy
        counts.append((c.d2h_calls, c.d2h_bytes))
    return counts


def check(frames: list) -> None:
    """Each frame read back is exactly the one written at its step (steps in order, none twice)."""
    steps = [f.step for f in frames]
    assert steps == sorted(set(steps)) and set(steps) <= set(range(len(SIZES))), steps
    for f in frames:
        np.testing.assert_array_equal(f.image, image(f.step, SIZES[f.step]))
        assert f.depth.dtype == np.float32
        np.testing.assert_array_equal(f.depth, depth(f.step, SIZES[f.step]))
        assert f.time == 0.5 * f.step


def test_device_frames_cross_once_into_buffers_reused_while_the_size_holds(tmp_path, fake_device):
    name = str(tmp_path / "frames.bp")
    with FrameWriter(name, "BP5") as w:
        counts = write_frames(w, device=True)
    assert counts == [(2, h * w * 4 + h * w * 4) for h, w in SIZES]  # image uint8 + depth float32
    # a buffer per variable, new only when the size changes (frames 0, 2, 4, 5), each of its frame's size
    assert [(b.shape, b.dtype) for b in fake_device] == [
        (s, t) for i in (0, 2, 4, 5) for s, t in (((*SIZES[i], 4), np.uint8), (SIZES[i], np.float32))]
    with FrameReader(name) as r:
        frames = list(r)
    assert len(frames) == len(SIZES)
    check(frames)


def test_host_frames_are_sent_as_they_are(tmp_path, fake_device):
    w = FrameWriter(str(tmp_path / "frames.bp"), "BP5")
    sent = []
    w.write_variables = lambda variables, **kw: sent.append({v[0]: v[1] for v in variables})
    img = image(0, (8, 12))
    with arrays.no_host_transfers():
        w.write(img, step=0, time=0.0, depth=depth(0, (8, 12)))
        w.write(img[:, ::2], step=1, time=0.0)  # not contiguous: copied, as before
    w.close()
    # rows bottom first (VTK's y up) as a view of the caller's image: no copy before the write's own
    assert np.shares_memory(sent[0]["rgba"], img) and np.array_equal(sent[0]["rgba"], img[::-1]) and not fake_device
    assert np.array_equal(sent[1]["rgba"], img[::-1, ::2])


def test_a_device_frame_is_checked_before_it_is_copied(tmp_path, fake_device):
    with FrameWriter(str(tmp_path / "frames.bp"), "BP5") as w, arrays.no_host_transfers():
        with pytest.raises(ValueError, match=r"frame image: expected \(H, W, 4\) uint8, got \(4, 4, 4\) float32"):
            w.write(FakeDevice(np.zeros((4, 4, 4), np.float32)), step=0, time=0.0)
        with pytest.raises(ValueError, match=r"frame depth: expected \(4, 4\), got \(4, 5\)"):
            w.write(FakeDevice(image(0, (4, 4))), step=0, time=0.0, depth=FakeDevice(np.zeros((4, 5), np.float32)))
    assert not fake_device


READER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from insitu.stream import FrameReader
    got = {}
    with FrameReader(sys.argv[1], "SST", timeout=60) as r:
        print("ready", flush=True)  # connected: frames written from now on are queued for this reader
        for f in r:
            if f.step < 0:  # placeholders; markers (time 1) are reported: see connect()
                if f.time == 1.0:
                    print(f"got {f.step}", flush=True)
                continue
            got[f"image{f.step}"], got[f"depth{f.step}"], got[f"time{f.step}"] = f.image, f.depth, f.time
            time.sleep(0.05)  # slower than the writer: frames are still in flight while the next is staged
    np.savez(sys.argv[2], **got)
""")


def said(reader: subprocess.Popen, timeout: float) -> str | None:
    """The next line `reader` printed within `timeout` seconds, or None."""
    if not select.select([reader.stdout], [], [], max(timeout, 0.0))[0]:
        return None
    return reader.stdout.readline().strip()


def connect(w: FrameWriter, reader: subprocess.Popen, limit: float = 60.0) -> int:
    """Writes placeholder frames (steps < 0) until `reader` says it is connected (an SST
    reader's open completes only in one of the writer's steps), then markers until it
    reports having read the last or the one before (a reader sees a step once the next
    one is written, or the stream closes): at most one is left in its queue, where SST
    drops new frames while it is full (a drain by timeouts cannot tell: once SST dropped
    frames for a reader, its next step waits for the writer's, whatever the timeout).
    Returns how many frames were written."""
    end, k = time.monotonic() + limit, 0
    while (line := said(reader, 0.1)) is None:
        assert time.monotonic() < end, f"the reader did not connect within {limit} s"
        k += 1
        w.write(np.zeros((2, 2, 4), np.uint8), step=-k, time=0.0)
    assert line == "ready", line + reader.stdout.read()
    while time.monotonic() < end:
        k += 1
        w.write(np.zeros((2, 2, 4), np.uint8), step=-k, time=1.0)
        wait = time.monotonic() + 0.5
        while (line := said(reader, wait - time.monotonic())) is not None:
            assert line.startswith("got "), line + reader.stdout.read()
            if -int(line[4:]) >= k - 1:
                return k
    raise AssertionError(f"the reader did not read a marker within {limit} s")


@pytest.mark.parametrize("lossless", [True, False], ids=["lossless", "discard"])
@pytest.mark.parametrize("device", [True, False], ids=["device", "host"])
def test_sst_frames_of_changing_content_and_size_arrive_exactly(tmp_path, fake_device, device, lossless):
    name, dump = str(tmp_path / "frames"), str(tmp_path / "got.npz")
    reader = subprocess.Popen([sys.executable, "-c", READER, name, dump], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        with FrameWriter(name, "SST", lossless=lossless) as w:
            warm = connect(w, reader)
            write_frames(w, device)
        out, _ = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert reader.returncode == 0, out
    got = np.load(dump)
    frames = [Frame(s, float(got[f"time{s}"]), got[f"image{s}"], depth=got[f"depth{s}"])
              for s in sorted(int(k[5:]) for k in got.files if k.startswith("image")) if s >= 0]
    assert w.steps + w.dropped == warm + len(SIZES)
    if lossless:
        assert w.dropped == 0 and len(frames) == len(SIZES)
    else:  # frames may be dropped (replaced while the writer process was busy, or by SST's full queue), never
        # mixed up; the first one SST gets comes to a queue the reader emptied
        assert 1 <= len(frames) <= w.steps, [f.step for f in frames]
    check(frames)
    assert len(fake_device) == (8 if device else 0)
