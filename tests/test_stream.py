"""Frames over ADIOS2 SST between processes: lossless delivery, discard without waiting,
late readers; steering back to the simulation."""

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import MPI_DIR, ROOT
from insitu.launch import mpiexec
from insitu.stream import FrameReader, FrameWriter, SteeringReader, steering_name

sys.path.insert(0, MPI_DIR)
from frames_writer import pattern

pytestmark = pytest.mark.mpi


def writer(tmp_path, name, count, size, *extra, ranks=2):
    cmd = [*mpiexec(), "-n", str(ranks), sys.executable, os.path.join(MPI_DIR, "frames_writer.py"),
           str(name), str(count), str(size), *map(str, extra)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": ROOT})


def finish(p, timeout=120) -> float:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out
    return float(re.search(r"wrote \d+ frames in ([\d.]+) s", out).group(1))


def pauses(released: list[float]) -> list[float]:
    """Seconds between a reader's releases of consecutive frames (`released`: when each was)."""
    return [b - a for a, b in zip(released, released[1:])]


def last_queued(count: int, period: float, released: list[float]) -> int:
    """The oldest frame that can be the last a default-mode SST reader gets from a writer of
    `count` frames, at most one every `period` seconds, when it released its frames at the
    times `released`. SST's Discard policy drops each new frame while the reader's queue is
    full, and the queue gets room only when the reader releases a frame: the last frame
    queued for it was written at most one of its pauses before the writer's last frame. So a
    reader that a loaded machine holds up longer than it meant to pause misses more frames
    at the end, as it should. Four frames of slack: the writer process hands frames to SST
    a little after the simulation wrote them."""
    return count - 1 - (int(max(pauses(released), default=0.0) / period) + 4)


def test_lossless_500_frames_arrive_whole_and_in_order(tmp_path):
    name = tmp_path / "frames"
    p = writer(tmp_path, name, 500, 512, "--lossless")
    steps = []
    with FrameReader(str(name), "SST", timeout=60) as r:
        for f in r:
            steps.append(f.step)
            assert f.image.shape == (512, 512, 4)
            if f.step % 25 == 0 or f.step >= 495:  # regenerating every frame would dominate the test
                np.testing.assert_array_equal(f.image, pattern(f.step, 512))
            assert f.ranges == {"T": (0.0, float(f.step))} and f.camera.tolist() == list(range(9))
    finish(p)
    assert steps == list(range(500))


def test_a_slow_reader_does_not_slow_the_writer_and_gets_the_newest_frames(tmp_path):
    count, work = 60, "30"
    alone = finish(writer(tmp_path, tmp_path / "alone", count, 256, "--work-ms", work))
    name = tmp_path / "watched"
    p = writer(tmp_path, name, count, 256, "--work-ms", work)
    got, numbers, released = [], [], []
    with FrameReader(str(name), "SST", timeout=60) as r:
        for f in r:
            released.append(time.monotonic())  # next() released the frame before it returned
            got.append(f.step)
            numbers.append(f.frame_number)
            time.sleep(0.25)  # a viewer far slower than the simulation
    watched = finish(p)
    assert watched < 1.1 * alone + 0.1, (watched, alone)
    assert got == sorted(got) and len(got) < count  # frames were dropped, not queued up
    assert numbers == got  # a frame a step: the gaps in the frames' numbers are the frames dropped
    # What it saw last is recent: at most one of its pauses' worth of writer steps (0.25 s /
    # 30 ms when the machine keeps up; a loaded one pauses it longer) behind the last step.
    assert got[-1] >= last_queued(count, 0.030, released), (got, pauses(released))


def test_a_late_reader_starts_with_a_recent_frame(tmp_path):
    name = tmp_path / "late"
    p = writer(tmp_path, name, 150, 64, "--work-ms", "20", ranks=1)
    end = time.monotonic() + 60
    while not os.path.exists(f"{name}.sst") and p.poll() is None and time.monotonic() < end:
        time.sleep(0.01)  # the stream is open (a loaded machine starts the job slowly) ...
    time.sleep(1.5)  # ... and the writer well under way
    with FrameReader(str(name), "SST", timeout=30) as r:
        first = r.next()
        released = [time.monotonic()]
        rest = []
        for f in r:
            released.append(time.monotonic())
            rest.append(f.step)
    finish(p)
    assert first is not None and first.step > 10
    # it follows the stream to its end: its last frame is at most one of its pauses' worth of
    # writer steps (20 ms each) behind the last one
    assert rest and rest[-1] >= last_queued(150, 0.020, released), (rest, pauses(released))


def test_frames_to_a_bp5_file_replay_with_depth(tmp_path):
    name = str(tmp_path / "frames.bp")
    with FrameWriter(name, "BP5") as w:
        for step in range(3):
            w.write(pattern(step, 8), step=step, time=0.5 * step, depth=np.full((8, 8), step, np.float32))
    with FrameReader(name) as r:
        frames = list(r)
    assert [f.step for f in frames] == [0, 1, 2] and frames[2].time == 1.0
    np.testing.assert_array_equal(frames[1].image, pattern(1, 8))
    assert (frames[2].depth == 2).all()
    with pytest.raises(ValueError, match=r"expected \(H, W, 4\) uint8"):
        FrameWriter(str(tmp_path / "x.bp"), "BP5").write(np.zeros((4, 4, 3)), step=0, time=0.0)
    with pytest.raises(ValueError, match="expected one of SST, BP5"):
        FrameWriter(str(tmp_path / "y"), "HDF5")


STEER_WRITER = """
import sys, time
from insitu.stream import SteeringWriter
w = SteeringWriter(sys.argv[1])
for i in range(40):  # the whole state, again and again (a viewer's heartbeat)
    w.send({"iso_values": [0.5], "camera": {"azimuth": 30.0}})
    time.sleep(0.2)
w.close()
"""


def test_steering_reaches_a_simulation_that_never_waits(tmp_path):
    name = str(tmp_path / "frames.steer")
    r = SteeringReader(name)
    try:
        t0 = time.perf_counter()
        assert r.poll() == [] and r.alive  # no viewer: nothing, at once
        # (a poll that waited would take an SST open's timeout, or the viewer's 0.2 s between
        # updates; 50 ms leaves room for a loaded machine's scheduling)
        assert time.perf_counter() - t0 < 0.05
        p = subprocess.Popen([sys.executable, "-c", STEER_WRITER, name], env={**os.environ, "PYTHONPATH": ROOT})
        got, slowest = [], 0.0
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            t0 = time.perf_counter()
            got = r.poll()
            slowest = max(slowest, time.perf_counter() - t0)
            time.sleep(0.02)
        assert p.wait(timeout=30) == 0
        assert got and got[0] == {"iso_values": [0.5], "camera": {"azimuth": 30.0}}
        assert slowest < 0.05  # polling never waited for the viewer
        assert steering_name("out/f") == "out/f.steer"
    finally:
        r.close()


def test_frame_records_carry_reductions_and_timings_readable_by_adios2(tmp_path):
    import adios2

    name = str(tmp_path / "frames.bp")
    with FrameWriter(name, "BP5") as w:
        for step in range(3):
            w.write(pattern(step, 8), step=step, time=0.5 * step, ranges={"speed": (0.5, 2.5), "rho": (0, step)},
                    stats={"T": {"min": -step, "max": 2.0 * step, "mean": 0.5}, "rho": {"min": 1.0}},
                    timings={"draw": 0.01 * step} if step else None)
        with pytest.raises(ValueError, match=r"stats/T: unknown key\(s\) 'median'; known: min, max, mean"):
            w.write(pattern(3, 8), step=3, time=1.5, stats={"T": {"median": 1.0}})
    with adios2.FileReader(name) as f:  # ADIOS2 alone: self-describing names, one value per step
        v = f.available_variables()
        assert {"stats/T/min", "stats/T/max", "stats/T/mean", "stats/rho/min", "timings/draw", "frame_number"} <= set(v)
        assert v["timings/draw"]["AvailableStepsCount"] == "2"
        assert f.read("stats/T/max", step_selection=[0, 3]).ravel().tolist() == [0.0, 2.0, 4.0]
        assert f.read("frame_number", step_selection=[0, 3]).ravel().tolist() == [0, 1, 2]
    with FrameReader(name) as r:
        frames = list(r)
    assert frames[2].stats == {"T": {"min": -2.0, "max": 4.0, "mean": 0.5}, "rho": {"min": 1.0}}
    assert (frames[0].timings, frames[2].timings) == ({}, {"draw": 0.02})
    assert [f.frame_number for f in frames] == [0, 1, 2]
    assert frames[2].ranges == {"speed": (0.5, 2.5), "rho": (0.0, 2.0)}  # names of more than one letter


def test_adaptor_frames_carry_the_fields_min_max_mean_and_stage_timings(tmp_path):
    """Min/max/mean over the real points of two domains with ghost layers holding outliers,
    against NumPy's; the stage timings of ``profile: true``; read with ADIOS2 alone."""
    import adios2

    import adaptors

    n, bp = 10, str(tmp_path / "frames.bp")
    rng = np.random.default_rng(7)
    meshes, real = [], []
    for step in range(2):
        doms = []
        for d in range(2):
            f = rng.normal(step, 1.0 + d, (n, n, n))
            real.append((step, f[1:-1, 1:-1, 1:-1].copy()))
            f[0], f[-1] = 1e6, -1e6  # on ghost nodes only: they must not count
            f[:, 0], f[:, :, -1] = 1e6, -1e6
            doms.append(adaptors.uniform({"T": f}, origin=(0, 0, 7.0 * d), ghost=1, domain_id=d))
        meshes.append(doms)
    cfg = {"profile": True,
           "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "field": "T"}},
                            "renders": {"r": {"image_width": 32, "image_height": 24}}}},
           "extracts": {"e": {"type": "adios2", "params": {"filename": bp}}}}
    with adaptors.Adaptor(cfg) as a:
        for step, doms in enumerate(meshes):
            assert a.execute(step, 0.1 * step, doms), a.results()["errors"]
    with adios2.FileReader(bp) as f:
        got = {k: f.read(f"stats/T/{k}", step_selection=[0, 2]).ravel() for k in ("min", "max", "mean")}
        ranges = f.read("ranges", step_selection=[0, 2]).reshape(2, 2)
        timings = {k for k in f.available_variables() if k.startswith("timings/")}
    for step in range(2):
        ref = np.concatenate([r.ravel() for s, r in real if s == step])
        assert (got["min"][step], got["max"][step]) == (ref.min(), ref.max())
        assert got["mean"][step] == pytest.approx(ref.mean(), rel=1e-12)
        assert ranges[step].tolist() == [ref.min(), ref.max()]  # the colour range: the data's here
    assert {"timings/mesh", "timings/ranges", "timings/composite"} <= timings, timings


def test_a_fixed_colour_range_costs_no_reductions_of_the_field(tmp_path, monkeypatch):
    """A pseudocolor plot with min_value and max_value set draws with that range and reads
    the field no further (in situ a reduction reads the whole volume every step): its
    frames carry no stats for it, a plot whose range comes from the data does."""
    import adios2

    import adaptors
    from adaptors.context import Context

    calls = []
    reduce_field = Context.reduce_field

    def counted(self, domains, name, op):
        calls.append((name, op))
        return reduce_field(self, domains, name, op)

    monkeypatch.setattr(Context, "reduce_field", counted)
    f = np.random.default_rng(3).normal(0.0, 1.0, (10, 10, 10))
    bp = str(tmp_path / "frames.bp")
    render = {"r": {"image_width": 32, "image_height": 24}}
    cfg = {"scenes": {"s": {"plots": {"fixed": {"type": "pseudocolor", "field": "T", "min_value": -2.0,
                                                "max_value": 3.0},
                                      "data": {"type": "pseudocolor", "field": "U", "min_value": -2.0}},
                            "renders": render}},
           "extracts": {"e": {"type": "adios2", "params": {"filename": bp}}}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, adaptors.uniform({"T": f, "U": 2 * f})), a.results()["errors"]
    assert {name for name, _ in calls} == {"U"}
    with adios2.FileReader(bp) as r:
        names = set(r.available_variables())
        umax = r.read("stats/U/max").ravel()[0]
        ranges = r.read("ranges").ravel().tolist()
    assert not any(k.startswith("stats/T/") for k in names) and umax == 2 * f.max()
    assert ranges == [-2.0, 3.0, -2.0, umax]  # T's from the configuration, U's top from the data
