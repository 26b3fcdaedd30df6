"""Errors the adaptor raises (or, with ``exceptions: catch``, records and reports)."""

from __future__ import annotations

__all__ = ["AdaptorError", "ConfigError", "MeshError", "NotInitializedError"]


class AdaptorError(RuntimeError):
    """Base class of the adaptor's own errors."""


class ConfigError(AdaptorError, ValueError):
    """The configuration is malformed; ``problems`` lists each one with its path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        head = "invalid insitu configuration" + (f" ({len(problems)} problems)" if len(problems) > 1 else "")
        super().__init__(head + ":\n  " + "\n  ".join(self.problems))


class MeshError(AdaptorError, ValueError):
    """The mesh handed to ``execute`` does not follow the Mesh Blueprint (the path says where)."""


class NotInitializedError(AdaptorError):
    """``execute``/``results``/``finalize`` before ``initialize`` (or after ``finalize``)."""
