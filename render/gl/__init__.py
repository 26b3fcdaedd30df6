"""Headless OpenGL: EGL contexts and offscreen framebuffers (see context.py)."""

from .context import GLContext, GLUnavailableError, get_context
from .framebuffer import Framebuffer, check_size

__all__ = ["Framebuffer", "GLContext", "GLUnavailableError", "check_size", "get_context"]
