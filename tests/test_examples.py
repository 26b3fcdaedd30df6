"""Every program under examples/ runs as a user would start it."""

import os

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT

pytestmark = pytest.mark.mpi


def test_halo_demo_matches_single_block_run_and_writes_png(mpi, tmp_path):
    out = tmp_path / "demo.png"
    p = mpi(4, os.path.join(ROOT, "examples", "halo_demo.py"), "--shape", 24, 20, 22, "--steps", 10,
            "--out", out)
    assert p.returncode == 0, p.stdout + p.stderr
    # The demo itself compares the decomposed run with a one-array run of the same steps.
    assert "max|decomposed - single-block|=0.000e+00" in p.stdout
    assert "blocks=8 split=(2, 2, 2)" in p.stdout
    img = np.asarray(Image.open(out))
    assert img.shape == (24 * 8, 20 * 8, 3)
    # Block boundaries are drawn white at the split rows/columns (12 and 10, scaled by 8).
    assert (img[12 * 8 + 3, :, :] == 255).all() and (img[:, 10 * 8 + 3, :] == 255).all()


def test_mandelbulb_example_writes_a_closed_mesh(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "bulb.npz"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "mandelbulb.py"), "--n", "40",
                        "--out", str(out)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stdout + p.stderr
    m = np.load(out)
    faces = m["faces"]
    assert len(faces) > 1000 and f"{len(faces)} faces" in p.stdout
    # The set lies inside the box, so its isosurface is closed: every edge in two triangles.
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    assert (np.unique(e, axis=0, return_counts=True)[1] == 2).all()


def test_render_demo_writes_composited_images(mpi, tmp_path):
    out = tmp_path / "rd"
    p = mpi(3, os.path.join(ROOT, "examples", "render_demo.py"), "--shape", 28, 26, 24, "--steps", 4,
            "--size", 96, 72, "--out", out, env={"NUMBA_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ranks=3" in p.stdout
    for kind in ("surface", "volume"):
        img = np.asarray(Image.open(f"{out}_{kind}.png"))
        assert img.shape == (72, 96, 4)
        assert 0.005 < (img[..., 3] > 0).mean() < 0.9  # something drawn, not everything


def test_eikonal_insitu_writes_a_frame_per_step_and_steering_shows_next_frame(mpi, tmp_path):
    import adios2

    common = ["--shape", 24, 22, 20, "--steps", 6, "--size", 96, 72]
    script = os.path.join(ROOT, "examples", "eikonal_insitu.py")
    steered = mpi(2, script, *common, "--steer-at", 4, "--steer-iso", 0.15, "--out", tmp_path / "a")
    assert steered.returncode == 0, steered.stdout + steered.stderr
    fixed = mpi(2, script, *common, "--iso", 0.15, "--out", tmp_path / "b")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "failed_steps=0" in steered.stdout and "step   4 change" in steered.stdout

    def frame(run, step):
        return np.asarray(Image.open(tmp_path / run / f"frame_{step:04d}.png"))

    for step in range(6):
        assert frame("a", step).shape == (72, 96, 4)
    # From the steered step on, the frames are those of a run with that iso value from the start.
    for step in (4, 5):
        np.testing.assert_array_equal(frame("a", step), frame("b", step))
    assert not np.array_equal(frame("a", 3), frame("b", 3))
    with adios2.FileReader(str(tmp_path / "a" / "frames.bp")) as f:
        steps = f.read("step", step_selection=[0, 6]).ravel()
        img = f.read("rgba", step_selection=[5, 1]).reshape(72, 96, 4)  # image data: rows bottom first
    assert list(steps) == list(range(6))
    np.testing.assert_array_equal(img[::-1], frame("a", 5))


def test_eikonal_insitu_on_the_spark_engine_draws_the_embedded_frames(mpi, tmp_path):
    # --engine local[2]: the frames are drawn by Spark tasks on the worker daemons.
    common = ["--shape", 24, 22, 20, "--steps", 3, "--size", 96, 72]
    script = os.path.join(ROOT, "examples", "eikonal_insitu.py")
    runs = {}
    for name, engine in (("spark", "local[2]"), ("embedded", "embedded")):
        p = runs[name] = mpi(2, script, *common, "--engine", engine, "--out", tmp_path / name,
                             env={"NUMBA_NUM_THREADS": "1"})
        assert p.returncode == 0, p.stdout + p.stderr[-4000:]
        assert "failed_steps=0" in p.stdout
    for step in range(3):
        a = np.asarray(Image.open(tmp_path / "spark" / f"frame_{step:04d}.png")).astype(int)
        b = np.asarray(Image.open(tmp_path / "embedded" / f"frame_{step:04d}.png")).astype(int)
        assert (np.abs(a - b) <= 1).all(axis=2).mean() > 0.999
    assert a[..., :3].std() > 5


def test_mpmd_in_transit_job_draws_the_in_situ_frames(mpi, tmp_path):
    import subprocess
    import sys

    import yaml

    from insitu.launch import mpiexec

    with open(os.path.join(ROOT, "examples", "intransit_analysis.yaml")) as f:
        analysis = yaml.safe_load(f)
    analysis["scenes"]["view"]["renders"]["frame"]["image_prefix"] = str(tmp_path / "transit" / "frame_%04d")
    (tmp_path / "analysis.yaml").write_text(yaml.safe_dump(analysis))
    script = os.path.join(ROOT, "examples", "eikonal_insitu.py")
    sim = ["--shape", 24, 22, 20, "--steps", 4]
    env = {**os.environ, "PYTHONPATH": ROOT, "NUMBA_NUM_THREADS": "1"}
    cmd = [*mpiexec(), "-n", "2", sys.executable, script, *map(str, sim), "--out", str(tmp_path / "sim"),
           "--config", os.path.join(ROOT, "examples", "intransit_sim.yaml"), ":",
           "-n", "1", sys.executable, "-m", "adaptors.intransit", "--writers", "2",
           "--stream", str(tmp_path / "sim" / "mesh"), "--config", str(tmp_path / "analysis.yaml")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "in transit: 4 steps from 2 writer(s) on 1 analysis rank(s), failed_steps=0" in p.stdout
    # The same scene drawn in situ by the 2 simulation ranks themselves.
    q = mpi(2, script, *sim, "--out", tmp_path / "situ", "--config", tmp_path / "analysis.yaml",
            env={"NUMBA_NUM_THREADS": "1"})
    assert q.returncode == 0, q.stdout + q.stderr
    for step in range(4):
        a = np.asarray(Image.open(tmp_path / "transit" / f"frame_{step:04d}.png")).astype(int)
        b = np.asarray(Image.open(tmp_path / "situ" / f"frame_{step:04d}.png")).astype(int)
        # The mesh stream holds each node once (a seam node: the lower block's copy, there a ghost
        # from before the last sweep) and the analysis reads its ghosts back from the neighbours'
        # real values, while in situ each block draws the seam with its own copies: the frames
        # differ along the seam only.
        same = (np.abs(a - b) <= 1).all(axis=2).mean()
        assert same > (0.999 if step == 0 else 0.95), (step, same)
    assert a[..., :3].std() > 5  # the last frame shows the front, not only the background


def _table_rows(md: str, first: str) -> list[list[str]]:
    """Rows (cells) of the markdown tables in `md` whose first cell starts with `first`."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in md.splitlines()
            if line.startswith("| " + first)]


def test_end_to_end_benchmark_runs_and_its_meshes_do_not_depend_on_the_ranks(mpi, tmp_path):
    # examples/bench_insitu.py on the CPU path, small: the in-situ iteration (eikonal sweep,
    # hand-off, contour, render, composite, SST frames) and the Mandelbulb table on 1 and 2
    # ranks. Block Jacobi with a halo exchange before every sweep is decomposition
    # independent, so the surfaces have the same triangles on 1 and 2 ranks.
    script = os.path.join(ROOT, "examples", "bench_insitu.py")
    faces = {}
    for n in (1, 2):
        md = tmp_path / f"r{n}.md"
        p = mpi(n, script, "insitu", "--n", 20, "--size", 48, 40, "--iters", 2, "--warmup", 1,
                "--hand-off", "float64", "float32", "fused", "--slowness", "float32", "--at", "start", "end",
                "--tmp", tmp_path, "--md", md, env={"NUMBA_NUM_THREADS": "1"})
        assert p.returncode == 0, p.stdout + p.stderr[-3000:]
        q = mpi(n, script, "mandelbulb", "--n", 24, "--reps", 1, "--md", md, env={"NUMBA_NUM_THREADS": "1"})
        assert q.returncode == 0, q.stdout + q.stderr[-3000:]
        text = md.read_text()
        rows = _table_rows(text, "20^3 | ")
        stage_rows = [r for r in rows if len(r) == 17]
        assert [(r[2], r[3], r[4]) for r in stage_rows] == [("float64, float32", m, at) for at in ("start", "end")
                                                           for m in ("float64", "float32", "fused")]
        assert all(float(c) >= 0 for r in stage_rows for c in r[6:])
        tris = [int(r[5]) for r in stage_rows]
        assert len(set(tris[:3])) == 1 and len(set(tris[3:])) == 1  # the hand-offs show the same surface
        assert tris[3] > tris[0]  # the median travel time's surface, once the box is filled, is the larger
        faces[n] = (tris, [int(r[2]) for r in _table_rows(text, "24^3 | ")])
        assert len({r[3] for r in rows if len(r) == 8}) == 9  # every stage set against its floor
    assert faces[1] == faces[2] and min(faces[1][0]) > 0 and faces[1][1][0] > 0
