"""Fault injection for the in-transit mesh streams (issue 19, items 3 and 9): the analysis
side refuses contact files another user could have written, contact files name the
loopback interface, and an analysis reader that connects and never reads holds a
lossless simulation writer (each step and its ``close``) at most ``deadline`` seconds.
Loopback only; every process a test starts is ended by pid."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from adaptors.intransit import MeshStream, read_steps
from adaptors.mesh import parse, uniform
from conftest import ROOT
from procs import ENV, folder, line_with, other_user, records, spawn, stop, tell
from insitu.stream import DEADLINE as STREAM_DEADLINE
from insitu.stream import ContactFileError

DEADLINE = 2.0
#: Scheduling slack on a loaded 2-core machine (the failure mode being fixed is "forever").
MARGIN = 20.0


def domains(step: int) -> list:
    """Two domains of a simulation rank at `step` tiling one 9x5x4-node grid (their values
    tell the step; the node plane they share holds the same values in both)."""
    g = np.arange(9 * 5 * 4, dtype=np.float64).reshape(9, 5, 4) + 1000 * step
    return parse([uniform({"T": g[:6].copy()}, domain_id=2),
                  uniform({"T": g[5:].copy()}, origin=(5.0, 0, 0), domain_id=7)])


#: A simulation rank writing its domains in transit (argv: name, steps, deadline, lossless).
WRITER = """
import json, sys, time
from adaptors.intransit import MeshStream
from insitu.stream import ReaderTimeoutError
from test_faults_intransit import domains
name, count, deadline, lossless = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
w = MeshStream(name, "SST", lossless=lossless, deadline=deadline)
print("ready", flush=True)
sys.stdin.readline()
for i in range(count):
    t0, error, sent = time.monotonic(), None, None
    try:
        sent = w.write(domains(i), None, step=i, time=0.5 * i)
    except ReaderTimeoutError as e:
        error = str(e)
    print(json.dumps({"step": i, "seconds": time.monotonic() - t0, "error": error, "sent": sent}), flush=True)
    if error:
        sys.stdin.readline()  # the test connects a good reader meanwhile
    time.sleep(float(sys.argv[5]) if len(sys.argv) > 5 else 0.02)
t0, error = time.monotonic(), None
try:
    w.close()
except ReaderTimeoutError as e:
    error = str(e)
print(json.dumps({"close": time.monotonic() - t0, "error": error, "dropped": w.dropped}), flush=True)
"""

#: An analysis rank that connects to a mesh stream and never reads.
IDLE_READER = """
import sys, time, adios2
ad = adios2.Adios()
io = ad.declare_io("idle")
io.set_engine("SST")
io.set_parameters({"OpenTimeoutSecs": "60"})
s = adios2.Stream(io, sys.argv[1], "r")
print("reader connected", flush=True)
time.sleep(600)  # connected, never reading
"""


def writer(*args) -> subprocess.Popen:
    """:data:`WRITER` started with `args`, once its stream is open."""
    p = subprocess.Popen([sys.executable, "-c", WRITER, *map(str, args)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                         env={**ENV, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])})
    try:
        line_with(p, "ready")
    except AssertionError:
        stop(p)
        raise
    return p


def test_a_lossless_mesh_stream_drops_an_analysis_reader_that_never_reads_and_goes_on(tmp_path):
    name, count = str(tmp_path / "mesh"), 60
    w = idle = None
    try:
        w = writer(name, count, DEADLINE, 1, 0.1)
        idle = spawn(IDLE_READER, name)
        line_with(idle, "reader connected")
        tell(w)
        before = records(w, "step", DEADLINE + MARGIN + 30)
        stuck = before[-1]
        # the simulation gave up on the reader after its deadline, naming the stream and the reader,
        # which came over loopback (the contact file named "lo")
        assert DEADLINE - 0.5 <= stuck["seconds"] < DEADLINE + MARGIN, stuck
        assert f"SST stream {name}:" in stuck["error"] and "127.0.0.1:" in stuck["error"], stuck
        assert f"uid {os.geteuid()}" in stuck["error"], stuck
        assert all(r["seconds"] < DEADLINE + MARGIN for r in before)
        assert all(r["sent"] for r in before[:-1]), before
        # what it writes next reaches an analysis rank that does read: in order and whole
        tell(w)
        got = list(read_steps(name, timeout=60, ghost=0))
        after = records(w, "close", MARGIN + 60)
        assert w.wait(timeout=30) == 0
        steps = [s for s, _, _ in got]
        assert steps and steps[-1] == count - 1 and steps == list(range(steps[0], count)), steps
        assert steps[0] > stuck["step"]
        assert after[-1]["error"] is None and after[-1]["close"] < DEADLINE + MARGIN, after[-1]
        assert after[-1]["dropped"] == steps[0] - stuck["step"] - 1  # until the good reader came
        step, t, mesh = got[-1]
        assert t == 0.5 * step and [m["state"]["domain_id"] for m in mesh] == [2, 7]
        for sent, back in zip(domains(step), mesh):  # real nodes: the shared plane from either side
            np.testing.assert_array_equal(back["fields"]["T"]["values"], sent.fields["T"].values)
    finally:
        stop(w, idle)


def test_close_with_an_analysis_reader_that_never_reads_returns_within_the_deadline(tmp_path):
    name = str(tmp_path / "mesh")
    w = idle = None
    try:
        w = writer(name, 1, DEADLINE, 1)  # one step: the queue holds it, so only close waits
        idle = spawn(IDLE_READER, name)
        line_with(idle, "reader connected")
        tell(w)
        out = records(w, "close", 60 + DEADLINE + MARGIN)
        assert out[0]["error"] is None and out[0]["sent"], out
        closed = out[-1]
        assert DEADLINE - 0.5 <= closed["close"] < DEADLINE + MARGIN, closed
        assert f"SST stream {name}:" in closed["error"] and "127.0.0.1:" in closed["error"], closed
        assert w.wait(timeout=30) == 0
        assert not os.path.exists(name + ".sst")  # no stale contact file for the next analysis
    finally:
        stop(w, idle)


def test_mesh_steps_flow_whole_and_in_order_over_loopback(tmp_path):
    name = str(tmp_path / "sim" / "mesh")
    w = None
    try:
        w = writer(name, 3, 30, 1)
        tell(w)
        got = list(read_steps(name, timeout=60, ghost=0))
        assert json.loads(line_with(w, "close"))["error"] is None
        assert w.wait(timeout=60) == 0
    finally:
        stop(w)
    assert [(s, t) for s, t, _ in got] == [(0, 0.0), (1, 0.5), (2, 1.0)]
    for step, _, mesh in got:
        for sent, back in zip(domains(step), mesh):
            assert back["state"]["domain_id"] == sent.domain_id
            assert back["coordsets"]["coords"]["origin"] == dict(zip("xyz", map(float, sent.origin)))
            np.testing.assert_array_equal(back["fields"]["T"]["values"], sent.fields["T"].values)
            assert back["fields"]["T"]["values"].dtype == sent.fields["T"].values.dtype


def test_bp5_mesh_files_still_round_trip(tmp_path):
    name = str(tmp_path / "mesh")
    w = MeshStream(name, "BP5")
    for i in range(2):
        assert w.write(domains(i), ["T"], step=i, time=0.5 * i)
    w.close()
    got = list(read_steps(name, engine="BP5", timeout=10, ghost=0))
    assert [(s, t) for s, t, _ in got] == [(0, 0.0), (1, 0.5)]
    np.testing.assert_array_equal(got[1][2][1]["fields"]["T"]["values"], domains(1)[1].fields["T"].values)


def test_a_mesh_stream_deadline_defaults_to_the_streams_and_is_checked(tmp_path):
    w = MeshStream(str(tmp_path / "mesh"), "BP5")
    assert w._writer.deadline == STREAM_DEADLINE
    w.close()
    for bad in (0, -1.0, float("inf"), "30"):
        with pytest.raises(ValueError, match=r"deadline: expected seconds > 0 or None, got"):
            MeshStream(str(tmp_path / "bad"), "SST", deadline=bad)


def plant(path: str, *, owner: int | None = None, mode: int = 0o644, target: str | None = None) -> None:
    """A contact file for stream `path` that no writer of the user's wrote."""
    if target is not None:
        os.symlink(target, path + ".sst")
        return
    with open(path + ".sst", "w") as f:
        f.write("#ADIOS2-SST v0\n0x1:AAAA\n")
    os.chmod(path + ".sst", mode)
    if owner is not None:
        os.chown(path + ".sst", owner, owner)


def test_the_analysis_refuses_mesh_streams_others_could_have_written(tmp_path):
    shared = str(tmp_path / "shared")
    plant(shared, mode=0o666)
    with pytest.raises(ContactFileError, match=r"shared\.sst: writable by others \(mode 666"):
        next(read_steps(shared, timeout=5))
    linked = str(tmp_path / "linked")
    plant(linked, target=shared + ".sst")
    with pytest.raises(ContactFileError, match=r"linked\.sst: a symbolic link"):
        next(read_steps(linked, timeout=5))
    with folder(0o777) as d:
        plant(os.path.join(d, "open"))
        with pytest.raises(ContactFileError, match=r"open\.sst.*world-writable without the sticky bit"):
            next(read_steps(os.path.join(d, "open"), timeout=5))
    if os.geteuid() == 0:  # only root can give a file away
        planted = str(tmp_path / "planted")
        plant(planted, owner=65534)
        with pytest.raises(ContactFileError, match=r"planted\.sst: owned by uid 65534"):
            next(read_steps(planted, timeout=5))


#: Another user's SST writer under a simulation rank's stream name (plain ADIOS2: the
#: interpreter it would start for a relay may be out of that user's reach).
HOSTILE = """
import os, sys, time, adios2
import numpy as np
os.umask(0o022)
ad = adios2.Adios()
io = ad.declare_io("hostile")
io.set_engine("SST")
io.set_parameters({"RendezvousReaderCount": "0", "QueueLimit": "1", "QueueFullPolicy": "Discard"})
s = adios2.Stream(io, sys.argv[1], "w")
print("writing", flush=True)
for i in range(3000):
    s.begin_step()
    s.write("step", np.array([i], np.int64), [1], [0], [1])
    s.end_step()
    time.sleep(0.02)
s.close()
"""


def test_a_mesh_stream_written_by_another_user_is_refused():
    user = other_user()
    if user is None:
        pytest.skip("needs root and setpriv or runuser to run a writer as user nobody")
    with folder(0o1777) as d:  # like /tmp: anyone may create files, nobody may replace another's
        name = os.path.join(d, "mesh")
        hostile = None
        try:
            hostile = spawn(HOSTILE, name, user=user)
            line_with(hostile, "writing")
            with pytest.raises(ContactFileError, match=r"mesh\.sst: owned by uid 65534"):
                next(read_steps(name, timeout=30))
        finally:
            stop(hostile)
