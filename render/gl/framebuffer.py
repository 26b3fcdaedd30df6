"""Offscreen framebuffer: RGBA8 colour, float32 view depth, and a float32 z-buffer."""

from __future__ import annotations

import numpy as np

from .context import GLContext

__all__ = ["Framebuffer", "check_size"]


def check_size(ctx: GLContext, width: int, height: int) -> tuple[int, int]:
    """Validated (width, height) for `ctx`: positive integers within its limit."""
    if int(width) != width or int(height) != height or width < 1 or height < 1:
        raise ValueError(f"image size: expected positive integers, got {width}x{height}")
    if max(width, height) > ctx.max_size:
        raise ValueError(f"image size {width}x{height} exceeds this OpenGL's limit of {ctx.max_size} per side "
                         f"({ctx.renderer})")
    return int(width), int(height)


def _texture(GL, internal, fmt, kind, width, height):
    tex = GL.glGenTextures(1)
    GL.glBindTexture(GL.GL_TEXTURE_2D, tex)
    GL.glTexParameteri(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_MIN_FILTER, GL.GL_NEAREST)
    GL.glTexParameteri(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_MAG_FILTER, GL.GL_NEAREST)
    GL.glTexImage2D(GL.GL_TEXTURE_2D, 0, internal, width, height, 0, fmt, kind, None)
    return tex


class Framebuffer:
    """Render target of `width` x `height` pixels in the current context.

    Colour attachment 0 is RGBA8 (premultiplied colour), attachment 1 is R32F holding the
    distance along the view direction (``inf`` where nothing was drawn); the z-buffer is
    DEPTH_COMPONENT32F. The textures (``color_texture``, ``depth_texture``) can be
    registered with CUDA.
    """

    def __init__(self, ctx: GLContext, width: int, height: int) -> None:
        from OpenGL import GL

        self.width, self.height = check_size(ctx, width, height)
        self.fbo = GL.glGenFramebuffers(1)
        GL.glBindFramebuffer(GL.GL_FRAMEBUFFER, self.fbo)
        self.color_texture = _texture(GL, GL.GL_RGBA8, GL.GL_RGBA, GL.GL_UNSIGNED_BYTE, self.width, self.height)
        GL.glFramebufferTexture2D(GL.GL_FRAMEBUFFER, GL.GL_COLOR_ATTACHMENT0, GL.GL_TEXTURE_2D, self.color_texture, 0)
        self.depth_texture = _texture(GL, GL.GL_R32F, GL.GL_RED, GL.GL_FLOAT, self.width, self.height)
        GL.glFramebufferTexture2D(GL.GL_FRAMEBUFFER, GL.GL_COLOR_ATTACHMENT1, GL.GL_TEXTURE_2D, self.depth_texture, 0)
        self.zbuffer = _texture(GL, GL.GL_DEPTH_COMPONENT32F, GL.GL_DEPTH_COMPONENT, GL.GL_FLOAT, self.width,
                                self.height)
        GL.glFramebufferTexture2D(GL.GL_FRAMEBUFFER, GL.GL_DEPTH_ATTACHMENT, GL.GL_TEXTURE_2D, self.zbuffer, 0)
        GL.glDrawBuffers(2, [GL.GL_COLOR_ATTACHMENT0, GL.GL_COLOR_ATTACHMENT1])
        status = GL.glCheckFramebufferStatus(GL.GL_FRAMEBUFFER)
        if status != GL.GL_FRAMEBUFFER_COMPLETE:
            raise RuntimeError(f"OpenGL framebuffer {self.width}x{self.height} incomplete (status {status:#x})")

    def bind(self) -> None:
        from OpenGL import GL

        GL.glBindFramebuffer(GL.GL_FRAMEBUFFER, self.fbo)
        GL.glViewport(0, 0, self.width, self.height)

    def clear(self, background=(0.0, 0.0, 0.0, 0.0)) -> None:
        """Colour to the (premultiplied) background, view depth to inf, z-buffer to far."""
        from OpenGL import GL

        self.bind()
        GL.glClearBufferfv(GL.GL_COLOR, 0, np.asarray(background, np.float32))
        GL.glClearBufferfv(GL.GL_COLOR, 1, np.array([np.inf, 0, 0, 0], np.float32))
        GL.glClearBufferfv(GL.GL_DEPTH, 0, np.array([1.0], np.float32))

    def read(self) -> tuple[np.ndarray, np.ndarray]:
        """(rgba uint8 (H, W, 4), depth float32 (H, W)) on the host, row 0 at the top."""
        from OpenGL import GL

        self.bind()
        GL.glPixelStorei(GL.GL_PACK_ALIGNMENT, 1)
        GL.glReadBuffer(GL.GL_COLOR_ATTACHMENT0)
        rgba = GL.glReadPixels(0, 0, self.width, self.height, GL.GL_RGBA, GL.GL_UNSIGNED_BYTE)
        GL.glReadBuffer(GL.GL_COLOR_ATTACHMENT1)
        depth = GL.glReadPixels(0, 0, self.width, self.height, GL.GL_RED, GL.GL_FLOAT)
        rgba = np.frombuffer(rgba, np.uint8).reshape(self.height, self.width, 4)[::-1]
        depth = np.frombuffer(depth, np.float32).reshape(self.height, self.width)[::-1]
        return np.ascontiguousarray(rgba), np.ascontiguousarray(depth)

    def delete(self) -> None:
        from OpenGL import GL

        GL.glDeleteTextures(3, [self.color_texture, self.depth_texture, self.zbuffer])
        GL.glDeleteFramebuffers(1, [self.fbo])
