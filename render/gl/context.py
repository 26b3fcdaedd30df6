"""Headless OpenGL contexts through EGL.

On NVIDIA the EGL device platform, on the EGL device that drives the current CUDA
device (so CUDA-GL interop shares one GPU); without a GPU Mesa's surfaceless platform
(llvmpipe). ``INSITU_EGL_PLATFORM=device|surfaceless|default`` overrides the choice.
"""

from __future__ import annotations

import ctypes
import os
import threading

from insitu.log import get_logger

# PyOpenGL picks its platform at first import: EGL, whatever the desktop is.
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

__all__ = ["GLContext", "GLUnavailableError", "get_context"]

_log = get_logger(__name__)

_PLATFORM_DEVICE = 0x313F
_PLATFORM_SURFACELESS_MESA = 0x31DD
_CUDA_DEVICE_NV = 0x323A
_INSTALL = ("install Mesa's EGL (apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) "
            "or the NVIDIA driver's EGL")


class GLUnavailableError(RuntimeError):
    """No usable EGL/OpenGL on this machine."""


def _egl():
    if os.environ.get("PYOPENGL_PLATFORM") != "egl":
        raise GLUnavailableError(f"PYOPENGL_PLATFORM is {os.environ.get('PYOPENGL_PLATFORM')!r}; "
                                 "render/ needs 'egl' (set it before OpenGL is first imported)")
    try:
        from OpenGL import EGL
        EGL.eglGetDisplay  # resolving it loads libEGL
    except Exception as e:  # ImportError, or ctypes failing to load libEGL
        raise GLUnavailableError(f"no EGL library: {e}; {_INSTALL}") from e
    return EGL


def _cuda_device() -> int | None:
    from insitu import arrays

    cp = arrays.cupy_or_none()
    if cp is None or not arrays.cuda_available():
        return None
    return cp.cuda.runtime.getDevice()


def _ext(name: str, restype, *argtypes):
    """An EGL extension function through eglGetProcAddress (PyOpenGL's wrappers check
    extensions on a display that is not initialized yet, and fail)."""
    lib = ctypes.CDLL("libEGL.so.1")
    lib.eglGetProcAddress.restype = ctypes.c_void_p
    lib.eglGetProcAddress.argtypes = [ctypes.c_char_p]
    addr = lib.eglGetProcAddress(name.encode())
    return ctypes.CFUNCTYPE(restype, *argtypes)(addr) if addr else None


def _platform_display(EGL, platform: int, native):
    get = _ext("eglGetPlatformDisplayEXT", ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p)
    ptr = get(platform, native, None) if get else None
    return ctypes.cast(ptr, EGL.EGLDisplay) if ptr else None


def _device_display(EGL, cuda_device: int):
    """The EGL display of the EGL device that is CUDA device `cuda_device`, or None."""
    query = _ext("eglQueryDevicesEXT", ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                 ctypes.POINTER(ctypes.c_int))
    attrib = _ext("eglQueryDeviceAttribEXT", ctypes.c_uint, ctypes.c_void_p, ctypes.c_int,
                  ctypes.POINTER(ctypes.c_ssize_t))
    if query is None or attrib is None:
        return None
    devices, n = (ctypes.c_void_p * 32)(), ctypes.c_int()
    if not query(32, devices, ctypes.byref(n)):
        return None
    for i in range(n.value):
        value = ctypes.c_ssize_t(-1)
        # Not NVIDIA: the attribute is unknown and the query fails (EGL_BAD_ATTRIBUTE).
        if attrib(devices[i], _CUDA_DEVICE_NV, ctypes.byref(value)) and value.value == cuda_device:
            return _platform_display(EGL, _PLATFORM_DEVICE, devices[i])
    return None


def _display(EGL):
    """(display, how): the platform display the rules above pick."""
    choice = os.environ.get("INSITU_EGL_PLATFORM", "auto")
    if choice not in ("auto", "device", "surfaceless", "default"):
        raise ValueError(f"INSITU_EGL_PLATFORM: expected device, surfaceless or default, got {choice!r}")
    if choice in ("auto", "device"):
        dev = _cuda_device()
        if dev is not None:
            try:
                dpy = _device_display(EGL, dev)
            except OSError:  # no libEGL.so.1 by that name
                dpy = None
            if dpy:
                return dpy, f"EGL device of CUDA device {dev}"
        if choice == "device":
            raise GLUnavailableError("INSITU_EGL_PLATFORM=device: no EGL device matches the current CUDA device")
    if choice in ("auto", "surfaceless"):
        try:
            dpy = _platform_display(EGL, _PLATFORM_SURFACELESS_MESA, None)
        except OSError:  # no libEGL.so.1 by that name
            dpy = None
        if dpy:
            return dpy, "Mesa surfaceless"
        if choice == "surfaceless":
            raise GLUnavailableError(f"INSITU_EGL_PLATFORM=surfaceless: no Mesa surfaceless platform; {_INSTALL}")
    return EGL.eglGetDisplay(EGL.EGL_DEFAULT_DISPLAY), "default display"


class GLContext:
    """An OpenGL 3.3+ core context with no window, current on the creating thread.

    Attributes
    ----------
    renderer, version : str
        ``GL_RENDERER`` / ``GL_VERSION``.
    platform : str
        How the display was found.
    max_size : int
        Largest framebuffer side this context allows.
    """

    def __init__(self) -> None:
        EGL = _egl()
        self._EGL = EGL
        dpy, self.platform = _display(EGL)
        major, minor = EGL.EGLint(), EGL.EGLint()
        if not dpy or not EGL.eglInitialize(dpy, ctypes.pointer(major), ctypes.pointer(minor)):
            raise GLUnavailableError(f"eglInitialize failed on the {self.platform}; {_INSTALL}")
        self._dpy = dpy
        if not EGL.eglBindAPI(EGL.EGL_OPENGL_API):
            raise GLUnavailableError("EGL: this EGL cannot bind desktop OpenGL")
        attrs = (EGL.EGLint * 5)(EGL.EGL_RENDERABLE_TYPE, EGL.EGL_OPENGL_BIT,
                                 EGL.EGL_SURFACE_TYPE, EGL.EGL_PBUFFER_BIT, EGL.EGL_NONE)
        cfg, n = EGL.EGLConfig(), EGL.EGLint()
        if not EGL.eglChooseConfig(dpy, attrs, ctypes.pointer(cfg), 1, ctypes.pointer(n)) or n.value < 1:
            raise GLUnavailableError(f"EGL: no OpenGL config on the {self.platform}")
        cattrs = (EGL.EGLint * 7)(EGL.EGL_CONTEXT_MAJOR_VERSION, 3, EGL.EGL_CONTEXT_MINOR_VERSION, 3,
                                  EGL.EGL_CONTEXT_OPENGL_PROFILE_MASK, EGL.EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT,
                                  EGL.EGL_NONE)
        ctx = EGL.eglCreateContext(dpy, cfg, EGL.EGL_NO_CONTEXT, cattrs)
        if not ctx:
            raise GLUnavailableError(f"EGL: could not create an OpenGL 3.3 core context on the {self.platform}")
        self._ctx = ctx
        self.make_current()
        from OpenGL import GL

        self.renderer = GL.glGetString(GL.GL_RENDERER).decode()
        self.version = GL.glGetString(GL.GL_VERSION).decode()
        vp = GL.glGetIntegerv(GL.GL_MAX_VIEWPORT_DIMS)
        self.max_size = int(min(GL.glGetIntegerv(GL.GL_MAX_TEXTURE_SIZE),
                                GL.glGetIntegerv(GL.GL_MAX_RENDERBUFFER_SIZE), min(vp)))
        self._thread = threading.get_ident()
        _log.info("OpenGL context: %s, OpenGL %s, on the %s", self.renderer, self.version, self.platform)

    def make_current(self) -> None:
        """Make this context current on the calling thread (surfaceless)."""
        EGL = self._EGL
        if not EGL.eglMakeCurrent(self._dpy, EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, self._ctx):
            raise GLUnavailableError("EGL: eglMakeCurrent failed (surfaceless contexts unsupported?)")

    def close(self) -> None:
        """Destroy the context."""
        EGL = self._EGL
        if self._ctx is not None:
            EGL.eglMakeCurrent(self._dpy, EGL.EGL_NO_SURFACE, EGL.EGL_NO_SURFACE, EGL.EGL_NO_CONTEXT)
            EGL.eglDestroyContext(self._dpy, self._ctx)
            self._ctx = None

    def __repr__(self) -> str:
        return f"<GLContext {self.renderer!r}, OpenGL {self.version}, {self.platform}>"


_contexts: dict[int, GLContext] = {}


def get_context() -> GLContext:
    """This thread's shared context, created on first use and made current."""
    tid = threading.get_ident()
    ctx = _contexts.get(tid)
    if ctx is None:
        ctx = _contexts[tid] = GLContext()
    else:
        ctx.make_current()
    return ctx
