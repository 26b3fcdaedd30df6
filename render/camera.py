"""A pinhole camera in Ascent's terms, shared by the rasterizer and the ray caster.

World coordinates are the data's (axis 0, axis 1, axis 2), as marching cubes writes
them. Images are (height, width) with row 0 at the top. Pixel (r, c) sees along the ray
through its centre; the rasterizer's projection matrix maps the same points to the same
pixel centres, so surfaces and volumes line up and composite.

Depth, everywhere in render/: the distance along the viewing direction (eye-space
``-z``), float32, ``inf`` where nothing was hit.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["Camera", "from_settings"]


def _unit(v) -> np.ndarray:
    v = np.asarray(v, np.float64)
    n = np.linalg.norm(v)
    if n == 0:
        raise ValueError(f"camera: direction {v.tolist()} has no length")
    if not np.isfinite(n):
        raise ValueError(f"camera: direction {v.tolist()} is not finite or too long to normalize")
    return v / n


def _rotate(v, axis, degrees) -> np.ndarray:
    """Rodrigues rotation of v about the unit `axis`."""
    a = math.radians(degrees)
    axis = _unit(axis)
    return v * math.cos(a) + np.cross(axis, v) * math.sin(a) + axis * np.dot(axis, v) * (1 - math.cos(a))


@dataclasses.dataclass(frozen=True)
class Camera:
    """Perspective camera.

    Parameters
    ----------
    position, look_at, up : (3,) floats
        Eye, the point at the image centre, and the direction that is up in the image.
    fov : float
        Vertical field of view in degrees.
    near, far : float, optional
        Clip distances; default fitted to the data bounds by the renderer.
    """

    position: tuple
    look_at: tuple
    up: tuple = (0.0, 1.0, 0.0)
    fov: float = 30.0
    near: float | None = None
    far: float | None = None

    def __post_init__(self):
        for name in ("position", "look_at", "up"):
            v = np.asarray(getattr(self, name), np.float64)
            if v.shape != (3,) or not np.isfinite(v).all():
                raise ValueError(f"camera {name}: expected 3 finite numbers, got {getattr(self, name)!r}")
            object.__setattr__(self, name, tuple(float(x) for x in v))
        if not 0 < self.fov < 180:
            raise ValueError(f"camera fov: expected degrees in (0, 180), got {self.fov}")
        if np.allclose(self.position, self.look_at):
            raise ValueError("camera: position and look_at coincide")
        if np.linalg.norm(np.cross(self.forward, _unit(self.up))) < 1e-9:
            raise ValueError("camera: up is parallel to the viewing direction")

    @classmethod
    def fit(cls, bounds: Sequence[float], *, azimuth: float = 0.0, elevation: float = 0.0, zoom: float = 1.0,
            fov: float = 30.0, direction: Sequence[float] = (0.0, 0.0, 1.0),
            up: Sequence[float] = (0.0, 1.0, 0.0)) -> "Camera":
        """Camera looking at the centre of `bounds` (xmin, xmax, ymin, ymax, zmin, zmax)
        from `direction`, turned by `azimuth` about `up` and `elevation` about the image's
        right axis (degrees), at the distance where the bounding sphere just fills the
        field of view, divided by `zoom` (as Ascent's default camera)."""
        b = np.asarray(bounds, np.float64).reshape(3, 2)
        if not np.isfinite(b).all() or (b[:, 1] < b[:, 0]).any():
            raise ValueError(f"camera bounds: expected finite (min, max) per axis, got {list(bounds)}")
        if zoom <= 0:
            raise ValueError(f"camera zoom: must be > 0, got {zoom}")
        centre = b.mean(axis=1)
        radius = max(0.5 * float(np.linalg.norm(b[:, 1] - b[:, 0])), 1e-12)
        d, u = _unit(direction), _unit(up)
        d = _rotate(d, u, azimuth)
        right = np.cross(u, d)
        if np.linalg.norm(right) < 1e-9:
            raise ValueError("camera: up is parallel to the viewing direction")
        d = _rotate(d, right, -elevation)
        u = _rotate(u, right, -elevation)
        dist = radius / math.sin(math.radians(fov) / 2) / zoom
        return cls(tuple(centre + d * dist), tuple(centre), tuple(u), fov)

    @property
    def forward(self) -> np.ndarray:
        """Unit viewing direction."""
        return _unit(np.subtract(self.look_at, self.position))

    def basis(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(right, up, forward) orthonormal, right-handed as OpenGL's eye space (x, y, -z)."""
        f = self.forward
        r = _unit(np.cross(f, self.up))
        return r, np.cross(r, f), f

    def clip_range(self, bounds: Sequence[float]) -> tuple[float, float]:
        """(near, far) enclosing `bounds` (the set ones win), near > 0."""
        b = np.asarray(bounds, np.float64).reshape(3, 2)
        corners = np.array(np.meshgrid(*b, indexing="ij")).reshape(3, -1).T
        z = (corners - np.asarray(self.position)) @ self.forward
        far = self.far if self.far is not None else float(z.max()) * 1.01 + 1e-9
        if self.near is not None and self.far is None and far <= self.near:
            far = 2 * self.near  # a near plane beyond the data: nothing is drawn, not an error
        near = self.near if self.near is not None else max(float(z.min()) * 0.99, far * 1e-4)
        if self.near is None and near >= far:
            near = far * 1e-4  # a far plane before the data: likewise
        if not 0 < near < far:
            raise ValueError(f"camera: bad clip range near={near}, far={far}")
        return near, far

    def view_matrix(self) -> np.ndarray:
        """4x4 world -> eye (OpenGL: the camera looks down -z)."""
        r, u, f = self.basis()
        m = np.eye(4)
        m[0, :3], m[1, :3], m[2, :3] = r, u, -f
        m[:3, 3] = -m[:3, :3] @ np.asarray(self.position)
        return m

    def projection_matrix(self, width: int, height: int, near: float, far: float) -> np.ndarray:
        """4x4 eye -> clip, OpenGL perspective with the vertical fov."""
        t = 1.0 / math.tan(math.radians(self.fov) / 2)
        m = np.zeros((4, 4))
        m[0, 0] = t * height / width
        m[1, 1] = t
        m[2, 2] = (far + near) / (near - far)
        m[2, 3] = 2 * far * near / (near - far)
        m[3, 2] = -1.0
        return m

    def rays(self, width: int, height: int, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
        """Eye position (3,) and unit ray directions (height, width, 3) through pixel centres."""
        r, u, f = self.basis()
        t = math.tan(math.radians(self.fov) / 2)
        x = (2 * (np.arange(width) + 0.5) / width - 1) * t * width / height
        y = (1 - 2 * (np.arange(height) + 0.5) / height) * t
        d = f[None, None, :] + x[None, :, None] * r[None, None, :] + y[:, None, None] * u[None, None, :]
        d /= np.linalg.norm(d, axis=2, keepdims=True)
        return np.asarray(self.position, dtype), d.astype(dtype)

    def project(self, points, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
        """Image positions (N, 2) as (column, row) in pixels (pixel centres at +0.5), and
        depths (N,), of world points (N, 3)."""
        p = np.asarray(points, np.float64).reshape(-1, 3) - np.asarray(self.position)
        r, u, f = self.basis()
        z = p @ f
        t = math.tan(math.radians(self.fov) / 2)
        x = (p @ r) / (z * t * width / height)
        y = (p @ u) / (z * t)
        return np.stack([(x + 1) * width / 2, (1 - y) * height / 2], axis=1), z


def from_settings(settings: Mapping[str, Any], bounds, *, aspect: float = 1.0) -> Camera:
    """The camera that Ascent-style settings describe, about the data `bounds`.

    Parameters
    ----------
    settings : mapping
        Either ``position`` (with optional ``look_at``, default the data's centre, ``up``
        and ``fov``), or an orbit about the data: ``azimuth``, ``elevation``, ``zoom``,
        ``fov``, ``up``. Both take Ascent's ``xpan``/``ypan`` (the view moved across the
        image plane by that fraction of the half-width/half-height at the look-at distance:
        1 moves the look-at point to the image's edge) and ``near_plane``/``far_plane``
        (clip distances). Missing or None values take their defaults.
    bounds : (6,) floats
        ``(x0, x1, y0, y1, z0, z1)``.
    aspect : float
        Image width / height (what ``xpan`` is a fraction of).

    Returns
    -------
    Camera
    """
    b = np.asarray(bounds, np.float64).reshape(3, 2)
    if settings.get("position") is not None:
        look = settings.get("look_at") or tuple(b.mean(axis=1))
        cam = Camera(tuple(settings["position"]), tuple(look), tuple(settings.get("up") or (0.0, 1.0, 0.0)),
                     float(settings.get("fov") or 30.0))
    else:
        kw: dict[str, Any] = {
            "azimuth": float(settings.get("azimuth") or 0.0), "elevation": float(settings.get("elevation") or 0.0),
            "zoom": float(settings.get("zoom") or 1.0), "fov": float(settings.get("fov") or 30.0)}
        if settings.get("up") is not None:
            kw["up"] = tuple(settings["up"])
        cam = Camera.fit(tuple(b.ravel()), **kw)
    xpan, ypan = float(settings.get("xpan") or 0.0), float(settings.get("ypan") or 0.0)
    if xpan or ypan:
        # VTK-m shifts the projection by (xpan, ypan) in normalized device coordinates; at
        # the look-at distance that is this sideways move of the eye and the look-at point
        # (the image content moves right and up for positive pans).
        r, u, f = cam.basis()
        half_h = float(np.linalg.norm(np.subtract(cam.look_at, cam.position))) * math.tan(math.radians(cam.fov) / 2)
        shift = -(xpan * half_h * float(aspect)) * r - (ypan * half_h) * u
        cam = dataclasses.replace(cam, position=tuple(np.add(cam.position, shift)),
                                  look_at=tuple(np.add(cam.look_at, shift)))
    near, far = settings.get("near_plane"), settings.get("far_plane")
    if near is not None or far is not None:
        cam = dataclasses.replace(cam, near=None if near is None else float(near),
                                  far=None if far is None else float(far))
    return cam
