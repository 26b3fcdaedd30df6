"""Engines: who runs the workers and schedules their work.

``"embedded"`` (the default): one worker in each process of the simulation's own job
(an ``mpirun`` rank), ranks talking over the transports; no scheduler in between.
``"spark"``: a Spark driver schedules tasks that run the same command packages on
worker daemons. :func:`get_engine` answers an unknown name with the known ones.
"""

from __future__ import annotations

from .embedded import EmbeddedEngine
from .spark import SparkEngine  # pyspark itself is imported when a SparkEngine starts

__all__ = ["ENGINES", "EmbeddedEngine", "SparkEngine", "get_engine"]

#: Engines by the name a configuration uses.
ENGINES: dict[str, type] = {"embedded": EmbeddedEngine, "spark": SparkEngine}


def get_engine(name: str) -> type:
    """The engine class registered as `name`."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)}") from None
