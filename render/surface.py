"""Rasterized triangle meshes (marching-cubes output): Phong shading, colour by a scalar
through a colormap, Ascent-style camera; colour and view depth out for compositing.

Two rasterizers draw the same image: OpenGL (NumPy meshes are uploaded to GL buffers,
CuPy meshes shared through CUDA-GL interop, render/interop.py) and the software
rasterizer of render/raster (CUDA kernels for CuPy meshes, Numba for NumPy ones). By
default (``rasterizer="auto"``) CuPy meshes take the software path, which is several
times faster on compute GPUs, and NumPy meshes take OpenGL. Either way a device mesh
never visits the host.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from insitu import arrays

from .camera import Camera
from .gl import Framebuffer, GLContext, get_context

if TYPE_CHECKING:  # the module imports the CUDA bindings: only where interop is used
    from .interop import GLBuffer, GLTexture

__all__ = ["RASTERIZERS", "Material", "SurfaceRenderer", "render_mesh"]

#: ``"auto"``: software for CuPy meshes, OpenGL for NumPy ones; ``"gl"``; ``"software"``.
RASTERIZERS = ("auto", "gl", "software")

_VERTEX = """
#version 330 core
layout(location = 0) in vec3 pos;
layout(location = 1) in vec3 nrm;
layout(location = 2) in float val;
uniform mat4 view;
uniform mat4 proj;
out vec3 v_eye;
out vec3 v_n;
out float v_val;
void main() {
    vec4 e = view * vec4(pos, 1.0);
    v_eye = e.xyz;
    v_n = mat3(view) * nrm;  // the view matrix is a rigid motion
    v_val = val;
    gl_Position = proj * e;
}
"""

_FRAGMENT = """
#version 330 core
in vec3 v_eye;
in vec3 v_n;
in float v_val;
uniform sampler2D cmap;   // 1 x N colormap
uniform int use_cmap;
uniform float cmap_n;
uniform vec4 color;
uniform vec2 vrange;
uniform vec3 light;       // towards the light, eye space, unit
uniform vec4 k;           // ambient, diffuse, specular, shininess
layout(location = 0) out vec4 frag;
layout(location = 1) out float depth;
void main() {
    vec3 n = normalize(v_n);
    vec3 v = normalize(-v_eye);
    if (dot(n, v) < 0.0) n = -n;  // two-sided: marching-cubes normals point to lower values
    vec3 base = color.rgb;
    if (use_cmap == 1) {
        float t = clamp((v_val - vrange.x) / (vrange.y - vrange.x), 0.0, 1.0);
        base = texture(cmap, vec2((t * (cmap_n - 1.0) + 0.5) / cmap_n, 0.5)).rgb;  // texel centres at the ends
    }
    float d = max(dot(n, light), 0.0);
    float s = d > 0.0 ? pow(max(dot(n, normalize(light + v)), 0.0), k.w) : 0.0;
    frag = vec4(clamp(base * (k.x + k.y * d) + vec3(k.z * s), 0.0, 1.0), 1.0);
    depth = -v_eye.z;
}
"""


class Material:
    """Phong coefficients: ``ambient + diffuse * max(n.l, 0)`` times the base colour, plus
    ``specular * max(n.h, 0) ** shininess`` in white."""

    def __init__(self, ambient: float = 0.2, diffuse: float = 0.7, specular: float = 0.2,
                 shininess: float = 32.0) -> None:
        for name, v in (("ambient", ambient), ("diffuse", diffuse), ("specular", specular), ("shininess", shininess)):
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"material {name}: expected a finite value >= 0, got {v}")
        self.ambient, self.diffuse, self.specular, self.shininess = ambient, diffuse, specular, shininess


def _raw_attrib_pointer(*args):
    from OpenGL.raw.GL.VERSION.GL_2_0 import glVertexAttribPointer

    glVertexAttribPointer(*args)


def _raw_draw_elements(*args):
    from OpenGL.raw.GL.VERSION.GL_1_1 import glDrawElements

    glDrawElements(*args)


def _compile(GL, source: str, kind) -> int:
    sh = GL.glCreateShader(kind)
    GL.glShaderSource(sh, source)
    GL.glCompileShader(sh)
    if not GL.glGetShaderiv(sh, GL.GL_COMPILE_STATUS):
        raise RuntimeError(f"shader compile failed: {GL.glGetShaderInfoLog(sh).decode()}")
    return sh


def _program(GL) -> int:
    prog = GL.glCreateProgram()
    for src, kind in ((_VERTEX, GL.GL_VERTEX_SHADER), (_FRAGMENT, GL.GL_FRAGMENT_SHADER)):
        GL.glAttachShader(prog, _compile(GL, src, kind))
    GL.glLinkProgram(prog)
    if not GL.glGetProgramiv(prog, GL.GL_LINK_STATUS):
        raise RuntimeError(f"shader link failed: {GL.glGetProgramInfoLog(prog).decode()}")
    return prog


def _bounds(verts) -> tuple | None:
    xp = arrays.get_array_module(verts)
    if len(verts) == 0:
        return None
    lo, hi = xp.min(verts, axis=0), xp.max(verts, axis=0)
    lo = [arrays.scalar_to_host(lo[a]) for a in range(3)]
    hi = [arrays.scalar_to_host(hi[a]) for a in range(3)]
    return (lo[0], hi[0], lo[1], hi[1], lo[2], hi[2])


def _check_mesh(verts, faces, normals, values):
    v = arrays.asarray(verts, name="verts")
    f = arrays.asarray(faces, name="faces")
    if v.ndim != 2 or v.shape[1] != 3:
        raise ValueError(f"verts: expected shape (V, 3), got {tuple(v.shape)}")
    if f.ndim != 2 or f.shape[1] != 3 or f.dtype.kind not in "iu":
        raise ValueError(f"faces: expected integer indices of shape (F, 3), got {f.dtype} {tuple(f.shape)}")
    xp = arrays.get_array_module(v)
    if xp is np and len(f) and (f.min() < 0 or f.max() >= len(v)):  # device meshes: not read back to check
        raise ValueError(f"faces: indices must lie in [0, {len(v)}), got {f.min()}..{f.max()}")
    if f.dtype.kind == "u" or f.dtype.itemsize != 4:
        f = f.astype(xp.int32)
    if normals is None:
        raise ValueError("normals: required (marching_cubes returns them)")
    n = arrays.asarray(normals, name="normals")
    if n.shape != v.shape:
        raise ValueError(f"normals: shape {tuple(n.shape)} differs from verts {tuple(v.shape)}")
    s = None
    if values is not None:
        s = arrays.asarray(values, name="values")
        if s.shape != (v.shape[0],):
            raise ValueError(f"values: expected shape ({v.shape[0]},), got {tuple(s.shape)}")
        s = xp.ascontiguousarray(s, dtype=xp.float32)
    f32 = lambda a: xp.ascontiguousarray(a, dtype=xp.float32)  # noqa: E731
    return f32(v), xp.ascontiguousarray(f), f32(n), s  # int32 indices, drawn as GL_UNSIGNED_INT


def _frame_params(cam: Camera, width: int, height: int, near: float, far: float, *, values: bool, colormap: str,
                  vmin, vmax, color, material: Material, light, background) -> dict:
    """Everything a frame's shading needs, for the GL uniforms and the software
    rasterizer alike (names of render/raster/_params.FIELDS)."""
    from .colormap import index

    view = cam.view_matrix()
    to_light = np.asarray(light if light is not None else -cam.forward, np.float64)  # default: headlight
    if to_light.shape != (3,) or not np.isfinite(to_light).all() or not to_light.any():
        raise ValueError(f"light: expected a non-zero direction (3 values), got {light}")
    if len(background) != 4:
        raise ValueError(f"background: expected premultiplied RGBA (4 values), got {list(background)}")
    vmin = 0.0 if vmin is None else float(vmin)
    vmax = vmin + 1.0 if vmax is None or not vmax > vmin else float(vmax)  # constant: first colour
    t = math.tan(math.radians(cam.fov) / 2)
    return dict(rot=view[:3, :3].ravel(), shift=view[:3, 3], tanx=t * width / height, tany=t, near=near, far=far,
                ambient=material.ambient, diffuse=material.diffuse, specular=material.specular,
                shininess=material.shininess, color=list(color)[:3],
                light=view[:3, :3] @ (to_light / np.linalg.norm(to_light)), vmin=vmin, vscale=1.0 / (vmax - vmin),
                bg=np.round(np.clip(np.asarray(background, np.float64), 0, 1) * 255) / 255,  # as RGBA8 stores it
                cmap=index(colormap), use_cmap=int(values))  # index: a clear error for an unknown name


class SurfaceRenderer:
    """Draws meshes into an offscreen framebuffer of `width` x `height`.

    Keeps its GL objects between frames (a time loop renders the same size again); they
    are made at the first frame that needs OpenGL, so device meshes under ``"auto"`` and
    everything under ``"software"`` run without an EGL context. `rasterizer` is one of
    :data:`RASTERIZERS`.
    """

    def __init__(self, width: int, height: int, rasterizer: str = "auto") -> None:
        if rasterizer not in RASTERIZERS:
            raise ValueError(f"rasterizer: expected one of {', '.join(RASTERIZERS)}, got {rasterizer!r}")
        if int(width) != width or int(height) != height or width < 1 or height < 1:
            raise ValueError(f"image size: expected positive integers, got {width}x{height}")
        self.rasterizer = rasterizer
        self.width, self.height = int(width), int(height)
        # (verts, faces, normals, values or None): device arrays handed out by mesh_buffers on the software path
        self._soft_mesh: tuple[Any, Any, Any, Any] | None = None
        self.ctx: GLContext | None = None  # set up when first needed: device meshes under "auto" never need it
        self._cmap_name: str | None = None
        self._sizes = [0, 0, 0, 0]
        self._registered: list[GLBuffer | None] = [None, None, None, None]  # CUDA registrations of the buffers
        self._textures: tuple[GLTexture, GLTexture] | None = None
        self._interop: bool | None = None
        if rasterizer == "gl":
            self._gl()  # the context and the size check now, not at the first frame

    def _gl(self):
        """The GL module with this renderer's context current (made on first use)."""
        from OpenGL import GL

        if self.ctx is None:
            ctx = get_context()
            self.fb = Framebuffer(ctx, self.width, self.height)
            self.ctx = ctx
            self.program = _program(GL)
            self.vao = GL.glGenVertexArrays(1)
            self.buffers = GL.glGenBuffers(4)  # positions, normals, values, indices
            self.cmap_texture = GL.glGenTextures(1)
        self.ctx.make_current()
        return GL

    def _upload(self, GL, slot: int, target, data: np.ndarray) -> None:
        reg = self._registered[slot]
        if reg is not None:  # host data into a buffer CUDA shares: drop the share
            reg.close()
            self._registered[slot] = None
            self._sizes[slot] = 0
        GL.glBindBuffer(target, self.buffers[slot])
        if data.nbytes > self._sizes[slot]:
            GL.glBufferData(target, data.nbytes, data, GL.GL_DYNAMIC_DRAW)
            self._sizes[slot] = data.nbytes
        else:
            GL.glBufferSubData(target, 0, data.nbytes, data)

    def _colormap(self, GL, name: str) -> int:
        from .colormap import colormap
        from .colormap import table as samples

        table = colormap(name, np.linspace(0.0, 1.0, len(samples(name))), 0.0, 1.0)
        if name != self._cmap_name:
            GL.glBindTexture(GL.GL_TEXTURE_2D, self.cmap_texture)
            for p in (GL.GL_TEXTURE_MIN_FILTER, GL.GL_TEXTURE_MAG_FILTER):
                GL.glTexParameteri(GL.GL_TEXTURE_2D, p, GL.GL_LINEAR)
            for p in (GL.GL_TEXTURE_WRAP_S, GL.GL_TEXTURE_WRAP_T):
                GL.glTexParameteri(GL.GL_TEXTURE_2D, p, GL.GL_CLAMP_TO_EDGE)
            GL.glTexImage2D(GL.GL_TEXTURE_2D, 0, GL.GL_RGBA32F, len(table), 1, 0, GL.GL_RGBA, GL.GL_FLOAT,
                            np.ascontiguousarray(table, np.float32))
            self._cmap_name = name
        return len(table)

    def render(self, verts, faces, normals, values=None, *, camera: Camera | None = None,
               colormap: str = "viridis", vmin: float | None = None, vmax: float | None = None,
               color: Sequence[float] = (0.8, 0.8, 0.8), material: Material | None = None,
               light: Sequence[float] | None = None, background: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
               bounds: Sequence[float] | None = None):
        """Render one mesh; returns ``(rgba, depth)`` as :func:`render_mesh`."""
        v, f, n, s = _check_mesh(verts, faces, normals, values)
        if vmin is None and s is not None and len(s):
            vmin = arrays.scalar_to_host(s.min())
        if vmax is None and s is not None and len(s):
            vmax = arrays.scalar_to_host(s.max())
        kw: dict[str, Any] = dict(
            values=s is not None, camera=camera, bounds=bounds if bounds is not None else _bounds(v),
            colormap=colormap, vmin=vmin, vmax=vmax, color=color, material=material, light=light,
            background=background)
        if self._software(arrays.is_device_array(v)):
            return self._raster((v, f, n, s), len(f), **kw)
        GL = self._gl()
        on_device = arrays.is_device_array(v) and self.interop
        if arrays.is_device_array(v) and not on_device:  # no interop here: staged (counted)
            v, f, n = arrays.to_host(v), arrays.to_host(f), arrays.to_host(n)
            s = None if s is None else arrays.to_host(s)
        if len(f):
            if on_device:
                with self.mesh_buffers(len(v), len(f), s is not None) as (bv, bf, bn, bs):
                    bv[...], bf[...], bn[...] = v, f.view(bf.dtype), n
                    if s is not None:
                        bs[...] = s
            else:
                for slot, data in ((0, v), (1, n), (2, s)):
                    if data is not None:
                        self._upload(GL, slot, GL.GL_ARRAY_BUFFER, data)
                self._upload(GL, 3, GL.GL_ELEMENT_ARRAY_BUFFER, f)
        return self.draw(len(f), device=on_device, **kw)

    def _software(self, device: bool) -> bool:
        return self.rasterizer == "software" or (self.rasterizer == "auto" and device)

    def _raster(self, mesh, nfaces: int, *, values: bool, camera, bounds, colormap, vmin, vmax, color, material,
                light, background):
        from .raster import rasterize

        v, f, n, s = mesh
        material = material or Material()
        cam = camera
        if cam is None:
            cam = Camera.fit(bounds) if bounds is not None else Camera((0.0, 0.0, 1.0), (0.0, 0.0, 0.0))
        near, far = cam.clip_range(bounds) if bounds is not None else (1.0, 2.0)
        params = _frame_params(cam, self.width, self.height, near, far, values=values, colormap=colormap, vmin=vmin,
                               vmax=vmax, color=color, material=material, light=light, background=background)
        if bounds is None:  # nothing to draw: the background
            nfaces = 0
        return rasterize(v, f[:nfaces], n, s if values else None, params, self.width, self.height)

    @property
    def interop(self) -> bool:
        """Whether meshes and frames can stay on the GPU through CUDA-GL interop."""
        if self.rasterizer == "software":
            return False
        self._gl()
        if self._interop is None:
            from .interop import interop_available

            self._interop = interop_available(self.ctx)
        return self._interop

    def _capacity(self, GL, slot: int, target, nbytes: int) -> GLBuffer:
        """Grow buffer `slot` to hold `nbytes` (by half again, so a growing mesh reallocates
        seldom) and keep it registered with CUDA; returns its registration."""
        from .interop import GLBuffer

        reg = self._registered[slot]
        if nbytes <= self._sizes[slot] and reg is not None:
            return reg
        size = max(nbytes, int(self._sizes[slot] * 1.5), 1024)
        if reg is not None:
            reg.close()
        GL.glBindBuffer(target, self.buffers[slot])
        GL.glBufferData(target, size, None, GL.GL_DYNAMIC_DRAW)
        self._sizes[slot] = size
        reg = self._registered[slot] = GLBuffer(self.buffers[slot])
        return reg

    @contextlib.contextmanager
    def mesh_buffers(self, nverts: int, nfaces: int, values: bool = False):
        """CuPy views of the GL vertex and index buffers, for a mesh of `nverts` / `nfaces`
        (marching cubes can write into them: ``marching_cubes(..., out=views)``).

        Yields ``(verts (nverts, 3) float32, faces (nfaces, 3) int32, normals, values
        (nverts,) float32 or None)``; draw them afterwards with :meth:`draw`. On the
        software path they are plain CuPy arrays (kept for the next frames); with
        ``rasterizer="gl"`` they are GL buffers and need CUDA-GL interop.
        """
        if self.rasterizer != "gl":
            yield self._soft_buffers(nverts, nfaces, values)
            return
        GL = self._gl()
        assert self.ctx is not None  # made by _gl()
        if not self.interop:
            raise RuntimeError(f"mesh_buffers: no CUDA-GL interop with this context ({self.ctx.renderer})")
        specs = [(0, GL.GL_ARRAY_BUFFER, (nverts, 3), np.float32), (1, GL.GL_ARRAY_BUFFER, (nverts, 3), np.float32),
                 (2, GL.GL_ARRAY_BUFFER, (nverts,), np.float32), (3, GL.GL_ELEMENT_ARRAY_BUFFER, (nfaces, 3), np.int32)]
        if not values:
            specs.pop(2)
        bufs = {slot: self._capacity(GL, slot, target, int(np.prod(shape)) * 4) for slot, target, shape, _ in specs}
        with contextlib.ExitStack() as stack:
            views = {slot: stack.enter_context(bufs[slot].map(shape, dt)) for slot, _, shape, dt in specs}
            yield views[0], views[3], views[1], views.get(2)

    def _soft_buffers(self, nverts: int, nfaces: int, values: bool):
        cp = arrays.cupy_or_none()
        if cp is None:
            raise RuntimeError("mesh_buffers: needs CuPy (device meshes)")
        mesh = self._soft_mesh
        if mesh is None or len(mesh[0]) < nverts or len(mesh[1]) < nfaces or (values and mesh[3] is None):
            grow = lambda n, have: max(n, int(have * 1.5))  # noqa: E731 - by half again, as the GL buffers
            nv = grow(nverts, 0 if mesh is None else len(mesh[0]))
            nf = grow(nfaces, 0 if mesh is None else len(mesh[1]))
            mesh = self._soft_mesh = (cp.empty((nv, 3), cp.float32), cp.empty((nf, 3), cp.int32),
                               cp.empty((nv, 3), cp.float32), cp.empty(nv, cp.float32) if values else None)
        v, f, n, s = mesh
        return v[:nverts], f[:nfaces], n[:nverts], (s[:nverts] if values else None)

    def draw(self, nfaces: int, *, values: bool = False, camera: Camera | None = None, bounds=None,
             colormap: str = "viridis", vmin: float | None = None, vmax: float | None = None,
             color: Sequence[float] = (0.8, 0.8, 0.8), material: Material | None = None,
             light: Sequence[float] | None = None, background: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
             device: bool = False):
        """Draw the first `nfaces` triangles already in the buffers; returns ``(rgba, depth)``
        (CuPy arrays, read through interop, when `device`). On the software path the
        mesh is the one :meth:`mesh_buffers` handed out last."""
        kw: dict[str, Any] = dict(values=values, camera=camera, bounds=bounds, colormap=colormap, vmin=vmin,
                                  vmax=vmax, color=color, material=material, light=light, background=background)
        if self.rasterizer != "gl" and (device or self.rasterizer == "software"):
            if self._soft_mesh is None:
                raise RuntimeError("draw: no mesh yet (fill the arrays of mesh_buffers first)")
            if nfaces > len(self._soft_mesh[1]):
                raise ValueError(f"draw: {nfaces} triangles, but mesh_buffers holds {len(self._soft_mesh[1])}")
            return self._raster(self._soft_mesh, nfaces, **kw)
        GL = self._gl()
        material = material or Material()
        if len(background) != 4:
            raise ValueError(f"background: expected premultiplied RGBA (4 values), got {list(background)}")
        self.fb.clear(background)
        if nfaces and bounds is not None:
            cam = camera or Camera.fit(bounds)
            near, far = cam.clip_range(bounds)
            params = _frame_params(cam, self.width, self.height, near, far, values=values, colormap=colormap,
                                   vmin=vmin, vmax=vmax, color=color, material=material, light=light,
                                   background=background)
            self._draw(GL, nfaces, values, cam, params)
        if device:
            return self._read_device()
        rgba, depth = self.fb.read()
        return rgba.astype(np.float32) / 255.0, depth

    def _read_device(self):
        from .interop import GLTexture

        cp = arrays.cupy_or_none()
        if self._textures is None:
            self._textures = (GLTexture(self.fb.color_texture, self.width, self.height, np.uint8, 4),
                              GLTexture(self.fb.depth_texture, self.width, self.height, np.float32, 1))
        rgba = self._textures[0].read()[::-1].astype(cp.float32) / 255.0  # GL's rows run bottom-up
        depth = cp.ascontiguousarray(self._textures[1].read()[::-1])
        return rgba, depth

    def _draw(self, GL, nfaces, values, cam, params):
        GL.glUseProgram(self.program)
        GL.glBindVertexArray(self.vao)
        for slot, width, used in ((0, 3, True), (1, 3, True), (2, 1, values)):
            if not used:
                GL.glDisableVertexAttribArray(slot)
                GL.glVertexAttrib1f(slot, 0.0)
                continue
            GL.glBindBuffer(GL.GL_ARRAY_BUFFER, self.buffers[slot])
            GL.glEnableVertexAttribArray(slot)
            # The raw entry point: PyOpenGL's wrapper keeps the pointer per context, which
            # needs a context id its EGL platform cannot always give.
            _raw_attrib_pointer(slot, width, GL.GL_FLOAT, GL.GL_FALSE, 0, ctypes.c_void_p(0))
        GL.glBindBuffer(GL.GL_ELEMENT_ARRAY_BUFFER, self.buffers[3])
        loc = lambda name: GL.glGetUniformLocation(self.program, name)  # noqa: E731
        p = params
        GL.glUniformMatrix4fv(loc("view"), 1, GL.GL_TRUE, cam.view_matrix().astype(np.float32))
        GL.glUniformMatrix4fv(loc("proj"), 1, GL.GL_TRUE,
                              cam.projection_matrix(self.width, self.height, p["near"], p["far"]).astype(np.float32))
        GL.glUniform3f(loc("light"), *p["light"])
        GL.glUniform4f(loc("k"), p["ambient"], p["diffuse"], p["specular"], p["shininess"])
        GL.glUniform4f(loc("color"), *(p["color"] + [1.0]))
        GL.glUniform1i(loc("use_cmap"), int(values))
        if values:
            from .colormap import name_at

            GL.glActiveTexture(GL.GL_TEXTURE0)
            nc = self._colormap(GL, name_at(p["cmap"]))
            GL.glBindTexture(GL.GL_TEXTURE_2D, self.cmap_texture)
            GL.glUniform1i(loc("cmap"), 0)
            GL.glUniform1f(loc("cmap_n"), float(nc))
            GL.glUniform2f(loc("vrange"), p["vmin"], p["vmin"] + 1.0 / p["vscale"])
        GL.glEnable(GL.GL_DEPTH_TEST)
        GL.glDepthFunc(GL.GL_LESS)
        GL.glDisable(GL.GL_CULL_FACE)
        _raw_draw_elements(GL.GL_TRIANGLES, 3 * nfaces, GL.GL_UNSIGNED_INT, ctypes.c_void_p(0))
        GL.glBindVertexArray(0)

    def close(self) -> None:
        self._soft_mesh = None
        if self.ctx is None:
            return
        from OpenGL import GL

        self.ctx.make_current()
        for r in self._registered + list(self._textures or ()):
            if r is not None:
                r.close()
        self.fb.delete()
        GL.glDeleteBuffers(4, self.buffers)
        GL.glDeleteVertexArrays(1, [self.vao])
        GL.glDeleteTextures(1, [self.cmap_texture])
        GL.glDeleteProgram(self.program)


def render_mesh(verts, faces, normals, values=None, *, width: int = 512, height: int = 512, rasterizer: str = "auto",
                **kwargs):
    """Render a triangle mesh offscreen.

    Parameters
    ----------
    verts, faces, normals : arrays
        As :func:`render.contour.marching_cubes` returns them (NumPy or CuPy).
    values : (V,) array, optional
        Scalar per vertex, coloured through `colormap` over ``vmin..vmax`` (default its
        range); without it the mesh is `color`.
    width, height : int
        Image size in pixels (up to the GL limit).
    rasterizer : {"auto", "gl", "software"}
        OpenGL or render/raster's kernels; ``"auto"``: software for CuPy meshes.
    camera : Camera, optional
        Default: :meth:`Camera.fit` to the mesh's bounds (or `bounds`).
    material, light, background
        Phong coefficients; direction towards the light in world space (default: from
        the camera); premultiplied RGBA where nothing is drawn.

    Returns
    -------
    rgba : (height, width, 4) float32
        Premultiplied colour, row 0 at the top.
    depth : (height, width) float32
        Distance along the view direction, ``inf`` on the background.
    """
    r = SurfaceRenderer(width, height, rasterizer)
    try:
        return r.render(verts, faces, normals, values, **kwargs)
    finally:
        r.close()
