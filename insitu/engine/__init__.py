"""Engines: who runs the workers and schedules their work.

``"embedded"`` (the default): one worker in each process of the simulation's own job
(an ``mpirun`` rank), ranks talking over the transports; no scheduler in between.
:func:`get_engine` answers an unknown name with the known ones.
"""

from __future__ import annotations

from .embedded import EmbeddedEngine

__all__ = ["ENGINES", "EmbeddedEngine", "get_engine"]

#: Engines by the name a configuration uses.
ENGINES: dict[str, type] = {"embedded": EmbeddedEngine}
ENGINES["spark"] = __import__("insitu.engine.spark", fromlist=["SparkEngine"]).SparkEngine  # imports pyspark only when started


def get_engine(name: str) -> type:
    """The engine class registered as `name`."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)}") from None
