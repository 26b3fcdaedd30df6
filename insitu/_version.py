"""The version of insitu: the one place it is written.

pyproject.toml reads it (setuptools' ``attr:``), CMakeLists.txt parses this line, and
``insitu.__version__`` re-exports it.
"""

__version__ = "0.1.0"
