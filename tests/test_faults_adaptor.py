"""Faults inside adaptor steps on mpirun jobs: no hang, every rank hears of them, the next step runs.

Each case runs tests/mpi/adaptor_faults.py under ``mpiexec`` in its own session, bounded in
time and killed by its process group when it overruns (a hang fails the test instead of
holding the suite). Full disks are simulated without privileges: a PNG or ADIOS2 file that
is a link to ``/dev/full`` fails every write with ENOSPC, exactly as a full file system
does (a tmpfs of fixed size would need root). An unwritable output directory is a regular
file where the directory should be (permissions do not stop root, which CI may be).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import MPI_DIR, ROOT
from insitu.launch import mpiexec

pytestmark = pytest.mark.mpi


def run_job(n: int, mode: str, out, *, timeout: float = 240) -> tuple[subprocess.CompletedProcess, dict]:
    """adaptor_faults.py MODE on `n` ranks; (process, {rank: its result file}). A job still running
    after `timeout` seconds is killed (its whole process group) and fails the test."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "NUMBA_NUM_THREADS": "1"}
    cmd = [*mpiexec(), "-n", str(n), sys.executable, os.path.join(MPI_DIR, "adaptor_faults.py"), str(out), mode]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        pytest.fail(f"mpiexec -n {n} adaptor_faults.py {mode} still ran after {timeout} s (a hang):\n"
                    f"{stdout[-3000:]}\n{stderr[-3000:]}")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    done = subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr)
    results = {}
    for rank in range(n):
        path = os.path.join(out, f"result.{rank}.json")
        if os.path.exists(path):
            with open(path) as f:
                results[rank] = json.load(f)
    return done, results


@pytest.mark.parametrize("nranks", [2, 3])
def test_a_png_that_cannot_be_written_fails_the_step_on_every_rank_and_the_next_step_runs(tmp_path, nranks):
    # Two scenes; only rank 0 writes PNGs. Step 1: scene s1's PNG hits a full disk; step 3:
    # scene s2's directory cannot be created. Before the fix, rank 0 left the step while
    # the other ranks waited in scene s2's bounds reduction: the job hung.
    p, res = run_job(nranks, "png", tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert sorted(res) == list(range(nranks)), p.stdout[-3000:] + p.stderr[-3000:]
    full = f"step 1: rank 0: OSError: [Errno 28] No space left on device [writing {tmp_path}/a/s1_0001.png"
    blocked = f"step 3: rank 0: FileExistsError: [Errno 17] File exists: '{tmp_path}/b'"
    for rank, r in res.items():
        assert [r["steps"][str(s)]["ok"] for s in range(5)] == [True, False, True, False, True], (rank, r)
        errors = r["errors"]
        assert len(errors) == 2, (rank, errors)
        assert errors[0].startswith(full), (rank, errors)
        assert errors[1].startswith(blocked) and "scenes/s2/renders/r" in errors[1], (rank, errors)
    frames = res[0]
    # The other scene's image of a failed step is still written ...
    assert frames["steps"]["1"]["frames"] == [f"{tmp_path}/b/s2_0001.png"]
    assert frames["steps"]["3"]["frames"] == [f"{tmp_path}/a/s1_0003.png"]
    for s in (0, 2, 4):
        assert len(frames["steps"][str(s)]["frames"]) == 2
    # ... and so is the BP5 frame of the scene whose PNG failed.
    assert frames["bp5_steps"] == [0, 1, 2, 3, 4]


def test_a_rank_that_stops_answering_is_named_on_the_others_and_the_job_goes_on(tmp_path):
    # timeout: 4. Rank 1 sleeps 6 s inside step 1; ranks 0 and 2 fail step 1 with a
    # PeerTimeoutError naming rank 1 after about 4 s (not after rank 1's 6 s), rank 1
    # catches up, and step 2 runs everywhere.
    p, res = run_job(3, "stall", tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert sorted(res) == [0, 1, 2], p.stdout[-3000:] + p.stderr[-3000:]
    for rank, r in res.items():
        assert [r["steps"][str(s)]["ok"] for s in range(3)] == [True, False, True], (rank, r)
        assert len(r["errors"]) == 1, (rank, r["errors"])
        err = r["errors"][0]
        assert err.startswith("step 1: rank 0: PeerTimeoutError: data bounds: rank(s) [1] did not answer "
                              "within 4 s"), (rank, err)
    for rank in (0, 2):
        # Bounded by the timeout, not by the stalled rank (generous margin for a loaded machine).
        assert 3.9 < res[rank]["steps"]["1"]["seconds"] < 5.9, res[rank]["steps"]


def test_a_rank_that_skips_a_collective_is_a_timeout_naming_it(tmp_path):
    p, res = run_job(3, "skip", tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for rank in (0, 2):
        assert res[rank]["second"].startswith("PeerTimeoutError: second: rank(s) [1] did not answer within 2 s"), \
            res[rank]
        assert res[rank]["seconds"] < 2 * 2 + 1.5, res[rank]
    assert res[1]["skipped"]


def test_finalize_closes_every_stream_and_relay_when_one_stream_fails(tmp_path):
    # Rank 0: a BP5 extract on a "full disk" (its close fails), a healthy BP5 extract and an
    # SST extract with a steering relay. Before the fix finalize raised at the first stream,
    # left the others and the relay open, and the process aborted in ADIOS2's destructor
    # (exit 134).
    p, res = run_job(2, "finalize", tmp_path)
    relays = res.get(0, {}).get("relay_pids", [])
    try:
        assert p.returncode == 0, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
        r = res[0]
        assert r["finalize"].startswith("AdaptorError: finalize on rank 0: extracts/full: RuntimeError:"), r
        assert "No space left on device" in r["finalize"]
        assert "extracts/frames" not in r["finalize"] and "extracts/live" not in r["finalize"]
        assert r["errors"][-1].startswith("finalize: extracts/full: RuntimeError:"), r["errors"]
        assert r["bp5_steps"] == [0, 1]  # the healthy file was closed: both steps are readable
        assert len(relays) == 1 and r["relays_running_after_finalize"] == [False]
        assert res[1]["finalize"] == "returned"
        # Every step failed on both ranks (the full extract), agreed.
        for rank in (0, 1):
            assert [res[rank]["steps"][str(s)]["ok"] for s in range(2)] == [False, False]
    finally:
        for pid in relays:  # a relay left running (before the fix) is ended by its pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
