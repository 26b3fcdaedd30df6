"""Exceptions shared across the runtime."""

from __future__ import annotations

__all__ = ["InsituError", "MismatchError", "PeerTimeoutError"]


class InsituError(RuntimeError):
    """Base class of the runtime's own errors."""


class MismatchError(InsituError, ValueError):
    """Ranks of one job disagree about something they must share (dtype, shape, ghost width...)."""


class PeerTimeoutError(InsituError, TimeoutError):
    """A peer rank did not answer within the timeout (it died, hangs, or skipped a collective)."""
