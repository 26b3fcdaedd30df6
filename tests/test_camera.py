"""Camera: rays, projection matrices and image positions agree; fitting frames the data."""

import math

import numpy as np
import pytest

from render.camera import Camera


def test_rays_and_matrices_agree_with_project():
    cam = Camera((3.0, 2.0, 5.0), (0.1, -0.2, 0.3), up=(0, 1, 0), fov=40)
    w, h = 64, 48
    rng = np.random.default_rng(0)
    pts = rng.uniform(-0.5, 0.5, (20, 3))
    pix, depth = cam.project(pts, w, h)
    # The OpenGL matrices put the points at the same pixel positions and depths.
    near, far = 0.5, 20.0
    clip = (cam.projection_matrix(w, h, near, far) @ cam.view_matrix() @ np.c_[pts, np.ones(20)].T).T
    ndc = clip[:, :3] / clip[:, 3:]
    np.testing.assert_allclose((ndc[:, 0] + 1) * w / 2, pix[:, 0], atol=1e-9)
    np.testing.assert_allclose((1 - ndc[:, 1]) * h / 2, pix[:, 1], atol=1e-9)
    np.testing.assert_allclose(clip[:, 3], depth, atol=1e-9)  # w_clip is the eye-space depth
    # The ray through a pixel centre passes through the points projected there.
    eye, d = cam.rays(w, h, np.float64)
    cam2 = Camera(cam.position, cam.look_at, cam.up, cam.fov)
    centre_pts = eye + d[10, 20] * 3.0
    p2, _ = cam2.project(centre_pts, w, h)
    np.testing.assert_allclose(p2[0], [20.5, 10.5], atol=1e-9)


def test_fit_frames_the_bounding_sphere_and_turns():
    b = (0, 2, 0, 1, 0, 4)
    cam = Camera.fit(b, fov=30)
    np.testing.assert_allclose(cam.look_at, (1, 0.5, 2))
    r = 0.5 * math.sqrt(4 + 1 + 16)
    assert np.linalg.norm(np.subtract(cam.position, cam.look_at)) == pytest.approx(r / math.sin(math.radians(15)))
    np.testing.assert_allclose(cam.forward, (0, 0, -1), atol=1e-12)  # from +z by default
    side = Camera.fit(b, azimuth=90)
    np.testing.assert_allclose(side.forward, (-1, 0, 0), atol=1e-12)  # turned about +y
    top = Camera.fit(b, elevation=90)
    np.testing.assert_allclose(top.forward, (0, -1, 0), atol=1e-12)  # looking down
    near = Camera.fit(b, zoom=2)
    assert np.linalg.norm(np.subtract(near.position, near.look_at)) == pytest.approx(r / math.sin(math.radians(15)) / 2)
    n, f = cam.clip_range(b)
    assert 0 < n < f


def test_bad_cameras_are_named():
    with pytest.raises(ValueError, match="camera position: expected 3 finite numbers"):
        Camera((0, 0, np.nan), (0, 0, 0))
    with pytest.raises(ValueError, match="position and look_at coincide"):
        Camera((1, 1, 1), (1, 1, 1))
    with pytest.raises(ValueError, match="up is parallel"):
        Camera((0, 0, 1), (0, 0, 0), up=(0, 0, 1))
    with pytest.raises(ValueError, match="fov"):
        Camera((0, 0, 1), (0, 0, 0), fov=0)
    with pytest.raises(ValueError, match="bounds"):
        Camera.fit((0, 1, 0, 1, 1, 0))
