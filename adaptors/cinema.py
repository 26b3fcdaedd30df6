"""Ascent's Cinema renders (``type: cinema``): a Cinema database, specification A.

Each executed step adds a time directory ``cinema_databases/<db_name>/<n>.0/`` (n counts the
steps the database has seen, as Ascent's does) holding one image per camera,
``<phi>_<theta>_<db_name>.png``, and rewrites ``info.json`` (the parametric image stack:
time, phi, theta), ``info.js`` (the same for viewers reading it without AJAX) and
``data.csv`` (``phi,theta,time,FILE``). The cameras are Ascent's: phi = -180 + 360 i / P
degrees about z, theta = 180 j / T degrees about x, applied to the eye direction +z and up
+y, the eye at 1.25 bounding-box diagonals from the data's centre (divided by ``zoom``).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

import numpy as np

from render.camera import Camera

__all__ = ["CinemaDatabase", "cameras"]

ROOT = "cinema_databases"


def _f(v: float) -> str:
    return f"{v:.1f}"


def cameras(bounds, phi: int, theta: int, *, fov: float = 60.0, zoom: float = 1.0) -> list[tuple[float, float,
                                                                                                    Camera]]:
    """``(phi, theta, Camera)`` for each of the phi x theta views about `bounds` (x0, x1, y0, y1, z0, z1)."""
    b = np.asarray(bounds, np.float64).reshape(3, 2)
    centre = b.mean(axis=1)
    radius = max(float(np.linalg.norm(b[:, 1] - b[:, 0])) * 2.5 / 2.0, 1e-12) / zoom
    out = []
    for i in range(phi):
        p = -180.0 + 360.0 / phi * i
        for j in range(theta):
            t = 180.0 / theta * j
            sp, cp = math.sin(math.radians(p)), math.cos(math.radians(p))
            st, ct = math.sin(math.radians(t)), math.cos(math.radians(t))
            eye = np.array([st * sp, -st * cp, ct])  # Rz(phi) Rx(theta) (0, 0, 1)
            up = np.array([-ct * sp, ct * cp, st])  # Rz(phi) Rx(theta) (0, 1, 0)
            out.append((p, t, Camera(tuple(centre + radius * eye), tuple(centre), tuple(up), fov)))
    return out


class CinemaDatabase:
    """One database's time steps and metadata files (written by rank 0)."""

    def __init__(self, name: str, phi: int, theta: int, root: str = ROOT) -> None:
        self.name, self.phi, self.theta = name, phi, theta
        self.path = os.path.join(root, name)
        self.times: list[float] = []
        self._csv = "phi,theta,time,FILE\n"

    def add_step(self) -> str:
        """A new time directory (created); its name."""
        t = float(len(self.times))
        self.times.append(t)
        os.makedirs(os.path.join(self.path, _f(t)), exist_ok=True)
        return _f(t)

    def image(self, time: str, phi: float, theta: float) -> str:
        return os.path.join(self.path, time, f"{_f(phi)}_{_f(theta)}_{self.name}.png")

    def write_metadata(self, views: list[tuple[float, float, Any]]) -> None:
        phis = sorted({p for p, _, _ in views}, key=[p for p, _, _ in views].index)
        thetas = sorted({t for _, t, _ in views}, key=[t for _, t, _ in views].index)

        def arg(label: str, values: list[float]) -> dict:
            return {"default": _f(values[0]), "label": label, "type": "range", "values": [_f(v) for v in values]}

        meta: Mapping[str, Any] = {
            "type": "simple", "version": "1.1", "metadata": {"type": "parametric-image-stack"},
            "name_pattern": "{time}/{phi}_{theta}_" + self.name + ".png",
            "arguments": {"time": arg("time", self.times), "phi": arg("phi", phis), "theta": arg("theta", thetas)}}
        with open(os.path.join(self.path, "info.json"), "w") as f:
            json.dump(meta, f, indent=1)
        with open(os.path.join(self.path, "info.js"), "w") as f:
            f.write("var info =" + json.dumps(meta))
        now = _f(self.times[-1])
        for p in phis:
            for t in thetas:
                self._csv += f"{_f(p)},{_f(t)},{now},{now}/{_f(p)}_{_f(t)}_{self.name}.png\n"
        with open(os.path.join(self.path, "data.csv"), "w") as f:
            f.write(self._csv)
