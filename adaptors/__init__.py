"""What simulations link: the Catalyst-style adaptor, its configuration, the C ABI and Fortran module.

Python solvers call the functions here; C, C++ and Fortran solvers link
``libinsitu_adaptor`` (``adaptors/include/insitu_adaptor.h``), which calls them.

    import adaptors
    adaptors.initialize("insitu.yaml", comm)     # or a dict with the same keys
    adaptors.execute(step, time, mesh)           # Conduit Mesh Blueprint dicts
    adaptors.results()                           # steering back: camera, iso values, stop, errors
    adaptors.finalize()
"""

from .adaptor import STEERABLE, Adaptor, about, execute, finalize, initialize, results, steer
from .config import describe, load
from .errors import AdaptorError, ConfigError, MeshError, NotInitializedError
from .mesh import uniform

__all__ = [
    "Adaptor",
    "AdaptorError",
    "ConfigError",
    "MeshError",
    "NotInitializedError",
    "STEERABLE",
    "about",
    "describe",
    "execute",
    "finalize",
    "initialize",
    "load",
    "results",
    "steer",
    "uniform",
]
