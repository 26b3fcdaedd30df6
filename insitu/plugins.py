"""Extensions declared as Python entry points: how the packages above the runtime fill its registries.

The runtime names no algorithm, renderer or solver. A package that owns one declares it
in its ``pyproject.toml``, and the runtime finds it by group and name when first needed,
importing the package only then::

    [project.entry-points."insitu.kernels"]
    "contour.marching_cubes" = "mypackage.contour:marching_cubes"

Groups read by the runtime:

``insitu.kernels``
    registered kernel names -> functions (:func:`insitu.pool.kernels.lookup`);
``insitu.gl``
    ``context``: the factory that makes an OpenGL context current for a worker's
    ``exec_gl`` (:meth:`insitu.pool.Worker.init_gl`);
``insitu.colormaps``
    any name -> a sequence of colormap names a renderer knows (the viewer offers their
    union, :data:`insitu.viewer.COLORMAPS`).

Entry points are read from the installed distributions' metadata (an editable install
counts; ``pip install -e .`` refreshes it after ``pyproject.toml`` changes), once per
group and process; :func:`refresh` reads them again.
"""

from __future__ import annotations

import importlib.metadata
import threading
from typing import Any

__all__ = ["declared", "load", "refresh"]

_groups: dict[str, dict[str, importlib.metadata.EntryPoint]] = {}
_lock = threading.Lock()


def _group(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    with _lock:
        eps = _groups.get(group)
        if eps is None:
            # the first distribution on sys.path wins a name, as importlib.metadata orders them
            eps = {}
            for ep in importlib.metadata.entry_points(group=group):
                eps.setdefault(ep.name, ep)
            _groups[group] = eps
        return eps


def declared(group: str) -> dict[str, str]:
    """The entry points of `group`, ``{name: "module:attribute"}``; nothing is imported.

    Parameters
    ----------
    group : str
        Entry point group, e.g. ``"insitu.kernels"``.

    Returns
    -------
    dict of str to str
    """
    return {name: ep.value for name, ep in _group(group).items()}


def load(group: str, name: str) -> Any:
    """Import and return the object entry point `name` of `group` refers to.

    Raises
    ------
    KeyError
        No installed distribution declares `name` in `group`; the message lists the
        names that are declared.
    """
    ep = _group(group).get(name)
    if ep is None:
        known = ", ".join(sorted(_group(group))) or "none"
        raise KeyError(f"no entry point {name!r} in group {group!r} (declared: {known}); a package provides "
                       f"one in its pyproject.toml under [project.entry-points.\"{group}\"] and must be installed")
    return ep.load()


def refresh() -> None:
    """Forget the entry points read so far (after installing a package into a running process)."""
    with _lock:
        _groups.clear()
