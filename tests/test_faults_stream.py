"""Fault injection for the SST streams (issue 19, items 3 and 9): contact files another user
could have written are refused, a reader that connects and never reads holds a lossless
writer and its ``close`` at most ``deadline`` seconds. Loopback only; every process a test
starts is ended by pid."""

import contextlib
import json
import os
import selectors
import signal
import time

import numpy as np
import pytest

from procs import folder, line_with, other_user, records, spawn, stop
from insitu.stream import (ContactFileError, FrameReader, FrameWriter, ReaderTimeoutError, SteeringReader,
                           SteeringWriter, sst_parameters, steering_name)

DEADLINE = 2.0
#: Scheduling slack on a loaded 2-core machine (the failure mode being fixed is "forever").
MARGIN = 20.0


STEER = """
import sys, time
from insitu.stream import SteeringWriter
w = SteeringWriter(sys.argv[1])
print("writing", flush=True)
for i in range(int(sys.argv[2])):  # a viewer's heartbeat: the whole state, again and again
    w.send({"stop": True, "camera": {"azimuth": 30.0}})
    time.sleep(0.05)
w.close()
"""


def poll_for(r: SteeringReader, seconds: float, until=None) -> list[dict]:
    got, end = [], time.monotonic() + seconds
    while time.monotonic() < end and not (until and until(got)):
        got += r.poll()
        time.sleep(0.02)
    return got


def test_a_steering_stream_written_by_another_user_is_refused():
    user = other_user()
    if user is None and os.geteuid() != 0:
        pytest.skip("needs root to have another user (nobody) write the contact file: setpriv/runuser or chown")
    with folder(0o1777) as d:  # like /tmp: anyone may create files, nobody may replace another's
        name = os.path.join(d, "frames.steer")
        r = SteeringReader(name)
        hostile = mine = None
        try:
            if user is not None:
                hostile = spawn(STEER, name, 80, user=user)
                line_with(hostile, "writing")
            else:  # no setpriv/runuser: the file is handed to nobody by root
                hostile = spawn(STEER, name, 80)
                line_with(hostile, "writing")
                os.chown(name + ".sst", 65534, 65534)
            got = poll_for(r, 30, until=lambda _: r.problems)
            got += poll_for(r, 1.0)
            assert got == [], "the simulation took steering from another user's stream"
            assert r.problems and f"{name}.sst" in r.problems[0] and "owned by uid 65534" in r.problems[0], r.problems
            assert hostile.wait(timeout=60) == 0
            # the user's own viewer in the same directory still steers
            mine = spawn(STEER, name, 400)
            got = poll_for(r, 60, until=bool)
            assert got and got[0] == {"stop": True, "camera": {"azimuth": 30.0}}
        finally:
            r.close()
            stop(hostile, mine)


def test_a_steering_stream_in_a_world_writable_directory_without_sticky_bit_is_refused():
    with folder(0o777) as d:  # anyone may replace any file here
        name = os.path.join(d, "frames.steer")
        r = SteeringReader(name)
        w = None
        try:
            w = spawn(STEER, name, 80)
            got = poll_for(r, 30, until=lambda _: r.problems)
            got += poll_for(r, 1.0)
            assert got == []
            assert r.problems and "world-writable without the sticky bit" in r.problems[0], r.problems
            assert f"{name}.sst" in r.problems[0]
        finally:
            r.close()
            stop(w)


def test_a_frame_reader_refuses_contact_files_others_could_have_written(tmp_path):
    def plant(path, *, owner=None, mode=0o644, target=None):
        if target is not None:
            os.symlink(target, path + ".sst")
            return
        with open(path + ".sst", "w") as f:
            f.write("#ADIOS2-SST v0\n0x1:AAAA\n")
        os.chmod(path + ".sst", mode)
        if owner is not None:
            os.chown(path + ".sst", owner, owner)

    plant(str(tmp_path / "shared"), mode=0o666)
    with pytest.raises(ContactFileError, match=r"shared\.sst: writable by others \(mode 666"):
        FrameReader(str(tmp_path / "shared"), "SST", timeout=5)
    plant(str(tmp_path / "linked"), target=str(tmp_path / "shared.sst"))
    with pytest.raises(ContactFileError, match=r"linked\.sst: a symbolic link"):
        FrameReader(str(tmp_path / "linked"), "SST", timeout=5)
    with folder(0o777) as d:
        plant(os.path.join(d, "open"))
        with pytest.raises(ContactFileError, match="world-writable without the sticky bit"):
            FrameReader(os.path.join(d, "open"), "SST", timeout=5)
    if os.geteuid() == 0:  # only root can give a file away
        plant(str(tmp_path / "planted"), owner=65534)
        with pytest.raises(ContactFileError, match=r"planted\.sst: owned by uid 65534"):
            FrameReader(str(tmp_path / "planted"), "SST", timeout=5)


def test_sst_advertises_the_loopback_interface_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("INSITU_SST_INTERFACE", raising=False)
    names = [n for _, n in __import__("socket").if_nameindex()]
    assert sst_parameters() == ({"NetworkInterface": "lo"} if "lo" in names else {})
    assert sst_parameters("") == {}
    monkeypatch.setenv("INSITU_SST_INTERFACE", "")
    assert sst_parameters() == {}
    monkeypatch.setenv("INSITU_SST_INTERFACE", names[0])
    assert sst_parameters() == {"NetworkInterface": names[0]}
    with pytest.raises(ValueError, match="'no-such-if0'.*no such interface"):
        sst_parameters("no-such-if0")


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

WRITER = """
import itertools, json, select, sys, time
import numpy as np
from insitu.stream import FrameWriter, ReaderTimeoutError
name, lossless, count, deadline = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), float(sys.argv[4])
w = FrameWriter(name, "SST", lossless=lossless, deadline=deadline)
print("ready", flush=True)
sys.stdin.readline()
for i in range(count) if count > 0 else itertools.count():  # count 0: until a line comes, then close
    if count <= 0 and select.select([sys.stdin], [], [], 0)[0]:
        break
    t0, error = time.monotonic(), None
    try:
        w.write(np.full((32, 32, 4), i % 256, np.uint8), step=i, time=0.1 * i, ranges={"T": (0.0, i)})
    except ReaderTimeoutError as e:
        error = str(e)
    print(json.dumps({"frame": i, "seconds": time.monotonic() - t0, "error": error}), flush=True)
    if error:
        sys.stdin.readline()  # the test connects a good reader meanwhile
    time.sleep(0.02)
t0, error = time.monotonic(), None
try:
    w.close()
except ReaderTimeoutError as e:
    error = str(e)
print(json.dumps({"close": time.monotonic() - t0, "error": error, "dropped": w.dropped}), flush=True)
"""


def test_a_lossless_writer_drops_a_reader_that_never_reads_and_goes_on(tmp_path):
    name, count = str(tmp_path / "frames"), 60
    w = idle = None
    try:
        w = spawn(WRITER, name, 1, count, DEADLINE)
        line_with(w, "ready")
        idle = spawn(IDLE_READER, name)
        line_with(idle, "reader connected")
        w.stdin.write("go\n")
        w.stdin.flush()
        before = records(w, "frame", DEADLINE + MARGIN + 30)
        stuck = before[-1]
        # the writer gave up on the reader after its deadline, saying which stream and which reader
        assert DEADLINE - 0.5 <= stuck["seconds"] < DEADLINE + MARGIN, stuck
        assert name in stuck["error"] and "127.0.0.1:" in stuck["error"], stuck
        assert f"uid {os.geteuid()}" in stuck["error"], stuck
        assert all(r["seconds"] < DEADLINE + MARGIN for r in before)
        # what it writes next reaches a reader that does read, in order and whole (lossless again)
        with FrameReader(name, "SST", timeout=60) as good:
            w.stdin.write("go\n")
            w.stdin.flush()
            steps = [f.step for f in good]
        after = records(w, "close", MARGIN + 60)
        assert w.wait(timeout=30) == 0
        assert steps and steps[-1] == count - 1, steps
        assert steps == list(range(steps[0], count)), steps
        assert steps[0] > stuck["frame"]
        assert after[-1]["error"] is None and after[-1]["close"] < DEADLINE + MARGIN
    finally:
        stop(w, idle)


@pytest.mark.parametrize("lossless", [False, True], ids=["default", "lossless"])
def test_close_with_a_reader_that_never_reads_returns_within_the_deadline(tmp_path, lossless):
    name = str(tmp_path / "frames")
    w = idle = None
    try:
        # lossless: fewer frames than the queue holds, so that only close waits. Default: frames
        # until the reader is in, then close (SST takes a late reader in only at a writer's
        # end_step, so the reader cannot connect before frames flow)
        w = spawn(WRITER, name, int(lossless), 3 if lossless else 0, DEADLINE)
        line_with(w, "ready")
        idle = spawn(IDLE_READER, name)
        if lossless:
            line_with(idle, "reader connected")
        w.stdin.write("go\n")
        w.stdin.flush()
        if not lossless:
            line_with(idle, "reader connected")
            time.sleep(0.5)  # a few frames the reader holds and never releases
            w.stdin.write("close\n")
            w.stdin.flush()
        out = records(w, "close", 60 + DEADLINE + MARGIN)
        assert all(r["error"] is None for r in out[:-1]), out
        closed = out[-1]
        assert DEADLINE - 0.5 <= closed["close"] < DEADLINE + MARGIN, closed
        assert name in closed["error"] and "127.0.0.1:" in closed["error"], closed
        assert w.wait(timeout=30) == 0
        assert not os.path.exists(name + ".sst")  # no stale contact file left for viewers
    finally:
        stop(w, idle)


def test_frames_still_flow_over_loopback(tmp_path):
    # writer and reader with the default interface ("lo" where there is one) still connect
    name = str(tmp_path / "frames")
    w = None
    try:
        w = spawn(WRITER, name, 1, 5, 30)
        line_with(w, "ready")
        w.stdin.write("go\n")
        w.stdin.flush()
        with FrameReader(name, "SST", timeout=60) as r:
            frames = list(r)
        assert [f.step for f in frames] == [0, 1, 2, 3, 4]
        np.testing.assert_array_equal(frames[3].image, np.full((32, 32, 4), 3, np.uint8))
        assert frames[4].ranges == {"T": (0.0, 4.0)}
        assert w.wait(timeout=60) == 0
    finally:
        stop(w)


def test_a_steering_writer_with_a_umask_of_002_still_steers(tmp_path):
    name = str(tmp_path / "frames.steer")
    old = os.umask(0o002)
    try:
        w = SteeringWriter(name)
    finally:
        os.umask(old)
    r = SteeringReader(name)
    try:
        assert os.stat(name + ".sst").st_mode & 0o022 == 0
        end = time.monotonic() + 60
        got = []
        while not got and time.monotonic() < end:
            w.send({"camera": {"azimuth": 10.0}})
            got = r.poll()
            time.sleep(0.05)
        assert got and got[0] == {"camera": {"azimuth": 10.0}} and r.problems == []
    finally:
        r.close()
        w.close()
    assert steering_name(name[:-6]) == name


def shared_memory() -> set[str]:
    """What this process holds of frame slots, and what /dev/shm holds of insitu's."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if "insitu-frames" in target:
                held.add(target)
    return held | {f"/dev/shm/{n}" for n in os.listdir("/dev/shm") if "insitu" in n}


READER = """
import json, sys
from insitu.stream import FrameReader
with FrameReader(sys.argv[1], "SST", timeout=60) as r:
    print("connected", flush=True)
    print(json.dumps([[f.step, int(f.image[0, 0, 0]), list(f.image.shape)] for f in r]), flush=True)
"""

#: As READER, and it says "drained" once it has read a frame of time 1: those queued for it
#: before are read then, and its queue has room (SST's Discard policy drops new frames while
#: a reader's queue is full; after it has, a reader's ``next(timeout=...)`` waits for the
#: writer's next frame whatever the timeout, so a quiet spell cannot tell it has read them).
DRAINING_READER = """
import json, sys
from insitu.stream import FrameReader
with FrameReader(sys.argv[1], "SST", timeout=60) as r:
    print("connected", flush=True)
    got = []
    while not got or got[-1].time != 1.0:
        got.append(r.next())
    print("drained", flush=True)
    got += list(r)
    print(json.dumps([[f.step, int(f.image[0, 0, 0]), list(f.image.shape)] for f in got]), flush=True)
"""


def write_until_said(w: FrameWriter, reader, step: int, t: float, period: float, limit: float = 60.0) -> int:
    """Writes frames of time `t` from `step` on, one every `period` seconds, until `reader`
    printed something (at most `limit` seconds); returns the next step."""
    end = time.monotonic() + limit
    with selectors.DefaultSelector() as sel:
        sel.register(reader.stdout, selectors.EVENT_READ)
        while not sel.select(timeout=0) and time.monotonic() < end:
            w.write(np.full((64, 64, 4), step % 256, np.uint8), step=step, time=t)
            step += 1
            time.sleep(period)
    return step


def test_the_default_writer_never_waits_for_its_process_and_delivers_the_newest_frame(tmp_path):
    name = str(tmp_path / "frames")
    before = shared_memory()
    w = FrameWriter(name, "SST", deadline=10.0)
    reader = None
    try:
        reader = spawn(DRAINING_READER, name)
        step = write_until_said(w, reader, 0, 0.0, 0.05)  # frames flow until the reader is in
        assert "connected" in reader.stdout.readline()
        # its queue emptied first: a reader that a loaded machine held up while it connected
        # would otherwise still hold a full queue when the newest frame comes, and SST drops that
        step = write_until_said(w, reader, step, 1.0, 0.2)  # frames of time 1 until it has one
        assert "drained" in reader.stdout.readline()
        os.kill(w._relay.proc.pid, signal.SIGSTOP)  # the writer process busy (stopped) in the middle of frames
        try:
            for _ in range(10):
                t0 = time.monotonic()
                w.write(np.full((64, 64, 4), step % 256, np.uint8), step=step, time=0.0)
                step += 1
                # the old writer waited here for the process, up to the deadline (10 s)
                assert time.monotonic() - t0 < 3.0
        finally:
            os.kill(w._relay.proc.pid, signal.SIGCONT)
        assert w.steps + w.dropped == step and w.dropped >= 8, (w.steps, w.dropped)
        w.close()
        got = json.loads(line_with(reader, "[", 60))
        assert reader.wait(timeout=30) == 0
        steps = [s for s, _, _ in got]
        assert steps == sorted(steps) and steps[-1] == step - 1, steps  # the newest frame arrived
        assert all(v == s % 256 for s, v, _ in got), got  # and whole: no slot written over in flight
    finally:
        w.close()
        stop(reader)
    assert shared_memory() == before


def test_frames_that_grow_arrive_whole_through_the_slots(tmp_path):
    name = str(tmp_path / "frames")
    sizes = [16, 700, 16, 1100, 1100, 8, 1300]  # 1.9 MiB, 4.6 MiB, 6.4 MiB: the slots grow twice
    before = shared_memory()
    w = FrameWriter(name, "SST", lossless=True, deadline=60.0)
    reader = None
    try:
        reader = spawn(READER, name)
        for i, n in enumerate(sizes):
            w.write(np.full((n, n, 4), i + 1, np.uint8), step=i, time=0.0)
        w.close()
        got = json.loads(line_with(reader, "[", 60))
        assert got == [[i, i + 1, [n, n, 4]] for i, n in enumerate(sizes)]
    finally:
        w.close()
        stop(reader)
    assert shared_memory() == before


def test_no_shared_memory_is_left_after_close_or_a_dropped_reader(tmp_path):
    name = str(tmp_path / "frames")
    before = shared_memory()
    w = FrameWriter(name, "SST", lossless=True, deadline=DEADLINE)
    idle = None
    try:
        idle = spawn(IDLE_READER, name)
        process = w._relay.proc
        with pytest.raises(ReaderTimeoutError, match="took no frame"):
            for i in range(60):
                w.write(np.full((256, 256, 4), i, np.uint8), step=i, time=0.0)
        assert process.poll() is not None  # the process that held the reader was killed
        assert shared_memory() - before  # the slots stay for the next process
        w.close()
    finally:
        w.close()
        stop(idle)
    assert shared_memory() == before
    # a simulation killed while writing leaves nothing either (the slots have no name)
    p = spawn(WRITER, str(tmp_path / "killed"), 0, 0, DEADLINE)
    try:
        line_with(p, "ready")
        p.stdin.write("go\n")
        p.stdin.flush()
        line_with(p, '"frame": 5')
    finally:
        stop(p)
    assert {n for n in os.listdir("/dev/shm") if "insitu" in n} == {n[len("/dev/shm/"):] for n in before
                                                                    if n.startswith("/dev/shm/")}
