"""One rank alone passes a bad mesh through the C ABI: every rank gets an error code, no hang.

tests/capi/bad_mesh_client.c runs under ``mpiexec -n 2``; at step 1 one rank passes a
mesh the C layer (adaptors/src/insitu_adaptor.c, adaptors/capi.py) rejects before the
adaptor sees it, the other rank a good one. Before the fix the rejected rank returned at
once without joining the step: the healthy rank paired its step 1 with the other's step 2,
returned OK for a frame drawn from two steps' slabs, then waited forever in step 2.
Now both ranks fail step 1, step 2 runs on both, and its frame is the one a run without
faults draws. Each job is bounded in time and killed by its process group when it overruns.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from insitu.launch import mpiexec

CAPI_DIR = os.path.join(ROOT, "tests", "capi")
sys.path.insert(0, CAPI_DIR)
import capi_build  # noqa: E402

pytestmark = pytest.mark.mpi

#: Seconds the adaptor waits for a peer in one collective (a hang would show as this).
TIMEOUT = 5
#: Seconds one job may take before it counts as a hang (start-up of two embedded Pythons
#: on a loaded machine included).
JOB_LIMIT = 150


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> str:
    """bad_mesh_client built against the installed library (built once for this module)."""
    missing = capi_build.missing_tools()
    if missing:
        pytest.fail("the C API needs " + ", ".join(missing) + " (scripts/ensure-system.sh installs them as root)")
    top = tmp_path_factory.mktemp("capi_faults")
    ns = capi_build.build(top, consumers=False, fortran=False)
    out = top / "client"
    capi_build.run(["cmake", "-S", CAPI_DIR, "-B", out, f"-Dinsitu_DIR={ns.prefix}/lib/cmake/insitu",
                    "-DCAPI_HEADER_ONLY=ON", "-DCMAKE_BUILD_TYPE=Release"], top)
    capi_build.run(["cmake", "--build", out, "--target", "bad_mesh_client"], top)
    return str(out / "bad_mesh_client")


def run_client(client: str, cwd, kind: str, bad_rank: int = 1) -> tuple[subprocess.CompletedProcess, dict, float]:
    """The client on two ranks; (process, {(rank, step): (status name, message)}, seconds)."""
    frames = cwd / "frames"
    cfg = cwd / "insitu.json"
    cfg.write_text(json.dumps({
        "timeout": TIMEOUT,
        "pipelines": {"p1": {"f1": {"type": "contour", "params": {"field": "T", "iso_values": [0.06]}}}},
        "scenes": {"s1": {"plots": {"p1": {"type": "pseudocolor", "pipeline": "p1", "field": "T"}},
                          "renders": {"r1": {"image_width": 48, "image_height": 40,
                                             "image_prefix": f"{frames}/f_%04d",
                                             "camera": {"azimuth": 30, "elevation": 25}}}}}}))
    cmd = [*mpiexec(), "-n", "2", client, str(cfg), kind, str(bad_rank)]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=capi_build.env(NUMBA_NUM_THREADS="1"), start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=JOB_LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        pytest.fail(f"bad_mesh_client {kind} still ran after {JOB_LIMIT} s (a hang):\n{stdout[-3000:]}\n"
                    f"{stderr[-3000:]}")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    seconds = time.monotonic() - t0
    done = subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr)
    calls = {}
    for m in re.finditer(r"^rank (\d) (?:step (\d)|(initialize|finalize)) (?:status )?(INSITU_\w+)"
                         r"(?: message (.*))?$", stdout, re.M):
        rank, step, other, name, message = m.groups()
        calls[(int(rank), int(step) if step else other)] = (name, message or "")
    return done, calls, seconds


@pytest.fixture(scope="module")
def clean(client, tmp_path_factory):
    """A run where every rank passes good meshes: its frames are what each step draws."""
    cwd = tmp_path_factory.mktemp("clean")
    p, calls, _ = run_client(client, cwd, "none")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert all(calls[(r, s)] == ("INSITU_OK", "") for r in (0, 1) for s in (0, 1, 2)), p.stdout + p.stderr
    frames = {s: (cwd / "frames" / f"f_{s:04d}.png").read_bytes() for s in (0, 1, 2)}
    # The field moves with the step, so a frame drawn from two steps' slabs differs from both.
    assert len(set(frames.values())) == 3
    return frames


def _bad_status(kind: str) -> str:
    if kind == "null-mesh":
        return "INSITU_ERR_ARGUMENT"
    if kind == "cuda":
        from insitu.arrays import cuda_available

        # Host memory flagged as CUDA memory: without a GPU the device is missing; with one
        # the pointer is found not to be device memory.
        return "INSITU_ERR_MESH" if cuda_available() else "INSITU_ERR_DEVICE_UNAVAILABLE"
    return "INSITU_ERR_MESH"


@pytest.mark.parametrize("kind,bad_rank,says", [
    ("null-mesh", 1, "mesh is NULL"),
    ("null-mesh", 0, "mesh is NULL"),
    ("null-data", 1, "data is NULL"),
    ("zero-dims", 1, "dims"),
    ("cuda", 1, "INSITU_MEMORY_CUDA"),
])
def test_one_rank_with_a_bad_mesh_fails_the_step_on_both_and_the_next_step_runs(client, clean, tmp_path,
                                                                              kind, bad_rank, says):
    p, calls, seconds = run_client(client, tmp_path, kind, bad_rank)
    out = p.stdout[-3000:] + p.stderr[-3000:]
    assert p.returncode == 0, out
    good = 1 - bad_rank
    for rank in (0, 1):
        assert calls[(rank, "initialize")] == ("INSITU_OK", ""), out
        assert calls[(rank, 0)] == ("INSITU_OK", ""), out
        assert calls[(rank, 2)] == ("INSITU_OK", ""), out  # the next step runs on both
        assert calls[(rank, "finalize")] == ("INSITU_OK", ""), out
    status, message = calls[(bad_rank, 1)]
    assert status == _bad_status(kind) and says in message, out
    # The healthy rank hears of it for the same step, naming the rank at fault: a mesh error
    # when the other's mesh was invalid, an execute error when its device was missing.
    peer = "INSITU_ERR_EXECUTE" if status == "INSITU_ERR_DEVICE_UNAVAILABLE" else "INSITU_ERR_MESH"
    status, message = calls[(good, 1)]
    assert status == peer and f"step 1: rank {bad_rank}: " in message and says in message, out
    # Nobody waited for a deadline: the failure was agreed, not timed out.
    assert "did not answer" not in p.stdout + p.stderr, out
    assert seconds < JOB_LIMIT
    frames = tmp_path / "frames"
    assert not (frames / "f_0001.png").exists(), out  # no frame for the failed step
    # Steps 0 and 2 drew exactly what a run without faults draws (no frame of mixed steps).
    for s in (0, 2):
        assert (frames / f"f_{s:04d}.png").read_bytes() == clean[s], f"step {s}"
