"""FrameWriter with CuPy frames: one counted device->host copy per variable, into page-locked
buffers reused while the frame size holds; every frame read back exactly.
(The same path on CPU, SST included: tests/test_frames_pinned.py.)"""

import numpy as np
import pytest

from insitu import arrays
from insitu.stream import FrameReader, FrameWriter

cp = pytest.importorskip("cupy", reason="needs CuPy")

#: (height, width) of successive frames: repeats (buffer reused), a change (re-allocated), back.
SIZES = [(1024, 1024), (1024, 1024), (768, 1280), (1024, 1024), (1024, 1024)]


def image(step: int, hw) -> np.ndarray:
    return np.random.default_rng(step).integers(0, 256, (*hw, 4), dtype=np.uint8)


def depth(step: int, hw) -> np.ndarray:
    return np.random.default_rng(1000 + step).random(hw, dtype=np.float32)


def page_locked(a: np.ndarray) -> bool:
    kind = cp.cuda.runtime.pointerGetAttributes(a.ctypes.data).type
    return kind == getattr(cp.cuda.runtime, "memoryTypeHost", 1)


@pytest.fixture
def taken(monkeypatch):
    """The buffers ``arrays.pinned_empty`` hands out, in order."""
    out = []
    pinned_empty = arrays.pinned_empty

    def spy(shape, dtype):
        out.append(pinned_empty(shape, dtype))
        return out[-1]

    monkeypatch.setattr(arrays, "pinned_empty", spy)
    return out


@pytest.mark.parametrize("with_depth", [False, True], ids=["image", "image+depth"])
def test_a_device_frame_crosses_once_into_reused_page_locked_memory(tmp_path, taken, with_depth):
    name = str(tmp_path / "frames.bp")
    counts = []
    with FrameWriter(name, "BP5") as w:
        for step, hw in enumerate(SIZES):
            img = cp.asarray(image(step, hw))
            # float64 on the device: the writer converts there, so float32 bytes cross
            dep = cp.asarray(depth(step, hw), dtype=cp.float64) if with_depth else None
            cp.cuda.Device().synchronize()
            with arrays.count_transfers() as c:
                w.write(img, step=step, time=float(step), depth=dep)
            counts.append((c.d2h_calls, c.d2h_bytes, c.h2d_calls))
            img.fill(0)  # the renderer's buffer is reused at once: what was sent is a copy
    px = [h * w_ for h, w_ in SIZES]
    # exactly one copy of the image bytes and their luminance (made on the device) per frame
    if with_depth:
        assert counts == [(2, 5 * n + 4 * n, 0) for n in px]
    else:
        assert counts == [(1, 5 * n, 0) for n in px]
    per_size = 2 if with_depth else 1
    assert len(taken) == 3 * per_size  # frames 0, 2 and 3 needed new buffers; 1 and 4 reused them
    assert all(page_locked(b) for b in taken)
    with FrameReader(name) as r:
        frames = list(r)
    assert [f.step for f in frames] == list(range(len(SIZES)))
    for f, hw in zip(frames, SIZES):
        np.testing.assert_array_equal(f.image, image(f.step, hw))
        if with_depth:
            np.testing.assert_array_equal(f.depth, depth(f.step, hw))


def test_a_strided_device_image_still_crosses_once(tmp_path, taken):
    ref = image(7, (256, 384))
    flipped = cp.asarray(ref)[::-1]  # rows bottom first, as a GL read-back is
    name = str(tmp_path / "frames.bp")
    with FrameWriter(name, "BP5") as w, arrays.count_transfers() as c:
        w.write(flipped, step=0, time=0.0)
    assert (c.d2h_calls, c.d2h_bytes) == (1, ref.nbytes * 5 // 4)
    with FrameReader(name) as r:
        np.testing.assert_array_equal(r.next().image, ref[::-1])
    import adios2

    with adios2.FileReader(name) as f:  # VTK's rows, bottom first: the reference's own order
        rgb = ref[:, :, :3].astype(np.int64)
        np.testing.assert_array_equal(f.read("luminance")[0],
                                      (77 * rgb[..., 0] + 150 * rgb[..., 1] + 29 * rgb[..., 2] + 128) >> 8)


def test_device_frame_bytes_are_the_rows_bottom_first_and_their_luminance():
    from insitu.stream.frames import device_frame_bytes

    ref = image(3, (37, 53))
    for src in (cp.asarray(ref), cp.asarray(ref[::-1].copy())[::-1]):  # contiguous and strided
        got = cp.asnumpy(device_frame_bytes(src))
        up = ref[::-1].astype(np.int64)
        lum = (77 * up[..., 0] + 150 * up[..., 1] + 29 * up[..., 2] + 128) >> 8
        np.testing.assert_array_equal(got[:ref.size], ref[::-1].ravel())
        np.testing.assert_array_equal(got[ref.size:], lum.ravel())
