"""The viewer's pure core: the steering state a page edits, and the latest-frame buffer.

No I/O here: :class:`SteeringState` validates and merges updates (what the page POSTs)
into the whole state the viewer sends to the simulation; :class:`FrameBuffer` keeps the
frame shown, a short history of steps and the arrival rate; :class:`Series` keeps what
every frame received says of its step (the fields' reductions, the stage timings) for the
page's plot, and counts the frames lost on the way.
"""

from __future__ import annotations

import collections
import collections.abc
import itertools
import math
import re
import threading
import time
from typing import Any, Iterator, Mapping

from .. import plugins

__all__ = ["CAMERA_KEYS", "COLORMAPS", "COLORMAP_GROUP", "STEER_KEYS", "FrameBuffer", "Series", "SteeringState",
           "finite", "validate_update"]

#: Entry point group in which renderers declare the colormap names they know (each entry:
#: a sequence of names).
COLORMAP_GROUP = "insitu.colormaps"

# What a colormap name looks like when no renderer is installed to list them.
_COLORMAP_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]{0,63}")


class _Colormaps(collections.abc.Sequence):
    """The colormap names installed renderers declare (COLORMAP_GROUP), in declaration
    order without repeats; read on first use, so importing the viewer imports no renderer."""

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[str, ...]:
        with self._lock:
            if self._names is None:
                names: dict[str, None] = {}
                for ep in sorted(plugins.declared(COLORMAP_GROUP)):
                    names.update((str(n), None) for n in plugins.load(COLORMAP_GROUP, ep))
                self._names = tuple(names)
            return self._names

    def __getitem__(self, i):
        return self._load()[i]

    def __len__(self) -> int:
        return len(self._load())

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __contains__(self, name: object) -> bool:
        return name in self._load()

    def __repr__(self) -> str:
        return repr(self._load())


#: Colormap names the installed renderers know (entry point group ``insitu.colormaps``),
#: a sequence read on first use. Empty when none is installed: the viewer then passes on
#: any name of colormap form and the simulation's configuration schema judges it.
COLORMAPS = _Colormaps()

#: Steerable camera keys and what each takes (the adaptor's camera schema; kept in sync by a test).
CAMERA_KEYS = {
    "azimuth": "a number (degrees)",
    "elevation": "a number (degrees)",
    "zoom": "a positive number",
    "position": "a point [x, y, z]",
    "look_at": "a point [x, y, z]",
    "up": "a point [x, y, z]",
    "fov": "a number in (0, 180) (degrees)",
    "xpan": "a number (a fraction of the image's half-width)",
    "ypan": "a number (a fraction of the image's half-height)",
    "near_plane": "a positive number (clip distance)",
    "far_plane": "a positive number (clip distance)",
}

#: Keys a steering update may hold, and what each takes. The simulation rejects any other.
STEER_KEYS = {
    "camera": "an object with any of " + ", ".join(CAMERA_KEYS) + " (null: the simulation's own)",
    "iso_values": "a list of numbers (every contour), or {pipeline: [numbers]}",
    "colormap": "a colormap name (the viewer's status lists those the renderers know)",
    "transfer_function": "opacity control points [[value, alpha], ...], alpha in [0, 1]",
    "params": "an object {name: number}",
    "pause": "true or false",
    "stop": "true or false",
}


def _is_number(v: Any) -> bool:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond any float (JSON allows 400-digit numbers)
        return False


def _numbers(path: str, v: Any) -> list[float]:
    vals = [v] if _is_number(v) else v
    if not isinstance(vals, (list, tuple)) or not vals or not all(_is_number(x) for x in vals):
        raise ValueError(f"steer: {path}: expected a number or a non-empty list of numbers, got {v!r}")
    return [float(x) for x in vals]


def _camera(v: Any) -> dict:
    if not isinstance(v, Mapping):
        raise ValueError(f"steer: camera: expected {STEER_KEYS['camera']}, got {v!r}")
    unknown = [k for k in v if k not in CAMERA_KEYS]
    if unknown:
        raise ValueError(f"steer: camera: unknown key(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(CAMERA_KEYS)}")
    out = {}
    for k, x in v.items():
        if x is None:  # back to the simulation's own setting
            out[k] = None
            continue
        if k in ("position", "look_at", "up"):
            ok = isinstance(x, (list, tuple)) and len(x) == 3 and all(_is_number(c) for c in x)
            x = [float(c) for c in x] if ok else x
        elif k == "zoom":
            ok = _is_number(x) and x > 0
        elif k == "fov":
            ok = _is_number(x) and 0 < x < 180
        elif k in ("near_plane", "far_plane"):
            ok = _is_number(x) and x > 0
        else:
            ok = _is_number(x)
        if not ok:
            raise ValueError(f"steer: camera/{k}: expected {CAMERA_KEYS[k]}, got {x!r}")
        out[k] = float(x) if _is_number(x) else x
    return out


def _colormap(v: Any) -> str:
    known = tuple(COLORMAPS)
    if known:
        if v not in known:
            raise ValueError(f"steer: colormap: expected one of {', '.join(known)}, got {v!r}")
    elif not (isinstance(v, str) and _COLORMAP_NAME.fullmatch(v)):
        raise ValueError(f"steer: colormap: expected a colormap name (letters, digits, '_.+-', at most 64), got {v!r}")
    return v


def validate_update(update: Any) -> dict:
    """Check a steering update and return it normalized (numbers as floats).

    Raises
    ------
    ValueError
        Naming the key, the value and what is accepted.
    """
    if not isinstance(update, Mapping):
        raise ValueError(f"steer: expected a JSON object with keys among {', '.join(STEER_KEYS)}, got {update!r}")
    unknown = [k for k in update if k not in STEER_KEYS]
    if unknown:
        raise ValueError(f"steer: unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(STEER_KEYS)}")
    out: dict[str, Any] = {}
    for k, v in update.items():
        if k == "camera":
            out[k] = _camera(v)
        elif k == "iso_values":
            if isinstance(v, Mapping):
                if not v or not all(isinstance(p, str) and p for p in v):
                    raise ValueError(f"steer: iso_values: expected {STEER_KEYS[k]}, got {v!r}")
                out[k] = {p: _numbers(f"iso_values/{p}", x) for p, x in v.items()}
            else:
                out[k] = _numbers("iso_values", v)
        elif k == "colormap":
            out[k] = _colormap(v)
        elif k == "transfer_function":
            ok = isinstance(v, (list, tuple)) and len(v) > 0 and all(
                isinstance(p, (list, tuple)) and len(p) == 2 and _is_number(p[0]) and _is_number(p[1])
                and 0 <= p[1] <= 1 for p in v)
            if not ok:
                raise ValueError(f"steer: transfer_function: expected {STEER_KEYS[k]}, got {v!r}")
            out[k] = sorted([float(a), float(b)] for a, b in v)
        elif k == "params":
            if not isinstance(v, Mapping) or not all(isinstance(n, str) and n for n in v):
                raise ValueError(f"steer: params: expected {STEER_KEYS[k]}, got {v!r}")
            bad = [n for n, x in v.items() if not _is_number(x)]
            if bad:
                raise ValueError(f"steer: params/{bad[0]}: expected a number, got {v[bad[0]]!r}")
            out[k] = {n: float(x) for n, x in v.items()}
        else:  # pause, stop
            if not isinstance(v, bool):
                raise ValueError(f"steer: {k}: expected {STEER_KEYS[k]}, got {v!r}")
            out[k] = v
    return out


class SteeringState:
    """The whole steering state, merged from updates; thread-safe.

    ``camera`` and ``params`` merge key by key, ``iso_values`` given per pipeline merge
    by pipeline (a list replaces everything), other keys replace. Only keys that were
    set are part of the state, so the simulation's own settings stand until a viewer
    changes them. Every change bumps :attr:`version`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {}
        self.version = 0

    def update(self, update: Any) -> dict:
        """Validate `update` (see :func:`validate_update`), merge it, return the new state."""
        u = validate_update(update)
        with self._lock:
            s = self._state
            for k, v in u.items():
                if k in ("camera", "params") or (k == "iso_values" and isinstance(v, dict)
                                                 and isinstance(s.get(k), dict)):
                    s[k] = {**s.get(k, {}), **v}
                else:
                    s[k] = v
            self.version += 1
            return self._copy()

    def snapshot(self) -> dict:
        with self._lock:
            return self._copy()

    def _copy(self) -> dict:
        import copy

        return copy.deepcopy(self._state)


class FrameBuffer:
    """The newest frame, a count, the last `history` steps and the arrival rate; thread-safe.

    Consumers wait for a newer frame with :meth:`wait` (by sequence number: the count of
    frames received so far, which keeps growing when a simulation restarts its steps).
    """

    def __init__(self, history: int = 100) -> None:
        self._cond = threading.Condition()
        self.frame = None
        self.seq = 0
        self.first_step: int | None = None
        self.steps: collections.deque = collections.deque(maxlen=history)
        self._arrivals: collections.deque = collections.deque(maxlen=64)
        self.ended = False

    def put(self, frame) -> int:
        with self._cond:
            self.frame = frame
            self.seq += 1
            if self.first_step is None:
                self.first_step = frame.step
            self.steps.append(frame.step)
            self._arrivals.append(time.monotonic())
            self._cond.notify_all()
            return self.seq

    def end(self) -> None:
        with self._cond:
            self.ended = True
            self._cond.notify_all()

    def latest(self):
        """``(seq, frame)`` of the newest frame (``(0, None)`` before the first)."""
        with self._cond:
            return self.seq, self.frame

    def wait(self, after: int, timeout: float | None = None) -> bool:
        """Wait until a frame newer than sequence number `after` arrived (or the stream ended)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.seq > after or self.ended, timeout)

    def fps(self, window: float = 2.0) -> float:
        """Frames per second over the last `window` seconds (0 when none came in it)."""
        now = time.monotonic()
        with self._cond:
            recent = [t for t in self._arrivals if now - t <= window]
            span = min(window, now - self._arrivals[0]) if self._arrivals else 0.0
        if len(recent) < 2 or span <= 0:
            return 0.0
        return len(recent) / span


def finite(x: Any) -> Any:
    """`x` (numbers, dicts, lists) with every float that is not finite as None: JSON has no
    NaN or infinity, and a browser's ``JSON.parse`` refuses Python's ``NaN``."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


class Series:
    """What each frame received tells of its step, in arrival order, for the page's plot;
    thread-safe.

    A point is ``{"step", "time", "stats": {field: {"min", "max", "mean"}}, "timings":
    {stage: seconds}}`` (non-finite numbers as None). Points are numbered from 0 in arrival
    order; the oldest go once more than `history` came (:meth:`since` says from where).

    :attr:`dropped` counts the frames lost between the writer and here: the gaps in the
    frames' ``frame_number`` (a number lower than the last one is a new writer, not a gap).
    """

    def __init__(self, history: int = 10000) -> None:
        self._lock = threading.Lock()
        self._points: collections.deque = collections.deque(maxlen=history)
        self.count = 0
        self.dropped = 0
        self._last: int | None = None

    def add(self, frame) -> int:
        """Record `frame` (an :class:`insitu.stream.Frame`); returns its point's number."""
        point = finite({"step": int(frame.step), "time": float(frame.time),
                        "stats": {k: {s: float(v) for s, v in d.items()} for k, d in frame.stats.items()},
                        "timings": {k: float(v) for k, v in frame.timings.items()}})
        n = getattr(frame, "frame_number", None)
        with self._lock:
            if n is not None:
                if self._last is not None and n > self._last:
                    self.dropped += n - self._last - 1
                self._last = n
            self._points.append(point)
            self.count += 1
            return self.count - 1

    def since(self, first: int, limit: int = 2000) -> dict:
        """``{"start": s, "points": [...], "count": n}``: at most `limit` points from number
        `first` on (from the oldest kept, `s`, when those are gone); `n` points came in all."""
        with self._lock:
            oldest = self.count - len(self._points)
            start = min(max(int(first), oldest), self.count)
            pts = list(itertools.islice(self._points, start - oldest, min(self.count, start + int(limit)) - oldest))
            return {"start": start, "points": pts, "count": self.count}
