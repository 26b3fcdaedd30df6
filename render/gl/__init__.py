"""Headless OpenGL: EGL contexts and offscreen framebuffers (see context.py).

:func:`get_context` is the runtime's OpenGL context factory: declared as the entry point
``context`` of the group ``insitu.gl``, a pool worker calls it before ``exec_gl`` work.
"""

from .context import GLContext, GLUnavailableError, get_context
from .framebuffer import Framebuffer, check_size

__all__ = ["Framebuffer", "GLContext", "GLUnavailableError", "check_size", "get_context"]
