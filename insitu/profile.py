"""Per-stage timing of a step: CUDA events on GPUs, the wall clock on the CPU.

    prof = StageTimer(enabled=True)
    with prof.stage("contour"):
        mesh = marching_cubes(...)
    with prof.stage("render"):
        ...
    prof.times()      # {"contour": 0.012, "render": 0.004} in seconds, then cleared

Disabled (the default), :meth:`StageTimer.stage` costs one attribute test. Enabled,
each stage records a CUDA event on the current stream at its start and end (when CuPy
has a device) and waits for its end event, so work launched in one stage is charged to
it rather than to a later one that happens to wait for it; stages of the same name add up.
A stage whose body raises is not charged.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

__all__ = ["StageTimer"]


class StageTimer:
    """Seconds spent per named stage since the last :meth:`times`.

    Parameters
    ----------
    enabled : bool
        False: :meth:`stage` does nothing and :meth:`times` returns ``{}``.
    device : bool or None
        Time with CUDA events (True), the wall clock (False), or CUDA events when CuPy
        sees a GPU (None).
    """

    def __init__(self, enabled: bool = False, *, device: bool | None = None) -> None:
        self.enabled = bool(enabled)
        self._cp = None
        if self.enabled and device is not False:
            from insitu import arrays

            if arrays.cuda_available():
                import cupy

                self._cp = cupy
            elif device:
                raise RuntimeError("StageTimer(device=True): no usable CUDA device")
        self._times: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Charge the time of the ``with`` body to `name`."""
        if not self.enabled:
            yield
            return
        if self._cp is None:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self._times[name] = self._times.get(name, 0.0) + time.perf_counter() - t0
            return
        cp = self._cp
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        # A body that raises is not timed: after a fault on the device the events would
        # raise too and hide the body's own error.
        yield
        end.record()
        end.synchronize()
        self._times[name] = self._times.get(name, 0.0) + cp.cuda.get_elapsed_time(start, end) / 1e3

    def add(self, name: str, seconds: float) -> None:
        """Charge `seconds` measured elsewhere (another process's work) to `name`."""
        if self.enabled:
            self._times[name] = self._times.get(name, 0.0) + float(seconds)

    def times(self) -> dict[str, float]:
        """The stages' seconds so far, and start again."""
        out, self._times = self._times, {}
        return out
