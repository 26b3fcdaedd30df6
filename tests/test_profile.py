"""insitu.profile.StageTimer: stages add up and clear; a failing stage keeps its own error."""

import time
import types

import pytest

from insitu.profile import StageTimer


def test_wall_clock_stages_add_up_and_clear():
    t = StageTimer(True, device=False)
    for _ in range(2):
        with t.stage("a"):
            time.sleep(0.01)
    with t.stage("b"):
        pass
    got = t.times()
    assert set(got) == {"a", "b"} and got["a"] >= 0.02 and got["b"] < got["a"]
    assert t.times() == {}


def test_disabled_timer_records_nothing():
    t = StageTimer()
    with t.stage("a"):
        pass
    assert t.times() == {}


class _Event:
    """A CUDA event of a device that faults once `broken` is set (CUDA errors are sticky:
    every later call fails)."""

    broken = False

    def record(self):
        if _Event.broken:
            raise RuntimeError("cudaErrorIllegalAddress (sticky)")

    def synchronize(self):
        if _Event.broken:
            raise RuntimeError("cudaErrorIllegalAddress (sticky)")


def test_a_stage_whose_body_faults_raises_the_body_error_not_the_events():
    """A kernel that faults inside a stage leaves the device broken, so the stage's end
    event fails too; the error raised must be the body's (it names the kernel), and the
    stage is not charged."""
    t = StageTimer(True, device=False)
    t._cp = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=_Event, get_elapsed_time=lambda a, b: 2.0))
    _Event.broken = False
    with t.stage("fine"):
        pass
    with pytest.raises(ValueError, match="launch of mc_vertex failed") as info:
        with t.stage("contour"):
            _Event.broken = True
            raise ValueError("launch of mc_vertex failed")
    assert info.value.__context__ is None
    _Event.broken = False
    assert t.times() == {"fine": 0.002}
