"""Python side of the Catalyst 2 implementation ``libcatalyst-insitu`` (adaptors/src/catalyst_insitu.c).

The C module reads the Conduit node with libcatalyst's own Conduit, starts the adaptor
through the C ABI (:mod:`adaptors.capi`: the configuration named by ``catalyst/scripts``,
the communicator ``catalyst/mpi_comm``) and calls the functions here:

- :func:`execute` with a walker that turns ``catalyst/channels`` into nested dicts whose
  numeric leaves are views of the node's memory (:func:`array_view`, never a copy). The
  walker runs only when the adaptor reads the mesh, so a step where nothing is due costs
  no walk at all;
- :func:`results`, whose ``(path, value)`` pairs the C module writes into the node.

:func:`mesh_from_channels` is the translation alone (pure, usable from tests): each
channel (``type: mesh`` one Blueprint domain, ``type: multimesh`` several) becomes
domains of the Blueprint dict :func:`adaptors.execute` takes, keyed by their node path so
that every error names it (``catalyst/channels/grid/data/fields/T/values: ...``). An
``mcarray`` field (values ``{x, y, z}``) becomes one scalar field per component,
``<name>/x``, ``<name>/y``, ``<name>/z`` (views, strided when the components interleave).

Every function returns ``(status, message, value)`` as :mod:`adaptors.capi` does (an
``insitu_status``; the C module maps it to a ``catalyst_status``) and never raises.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from . import capi
from .errors import MeshError

__all__ = ["CHANNEL_TYPES", "array_view", "execute", "mesh_from_channels", "parameters_from_node", "results"]

#: ``catalyst/channels/<name>/type`` values read.
CHANNEL_TYPES = ("mesh", "multimesh")
_DTYPES = {name: np.dtype(name) for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                                 "uint64", "float32", "float64")}


# --------------------------------------------------------------------------- arrays


def array_view(path: str, addr: int, dtype: str, count: int, stride: int, itemsize: int):
    """A view of `count` elements of a Conduit leaf at `addr`, `stride` bytes apart (no copy).

    Host memory gives a read-only NumPy array; CUDA device memory (when CuPy is usable) a
    CuPy array on the pointer's device.

    Raises
    ------
    MeshError
        Naming `path`: an unknown dtype, a negative count or stride, data not aligned.
    """
    dt = _DTYPES.get(dtype)
    if dt is None or dt.itemsize != itemsize:
        raise MeshError(f"{path}: dtype {dtype} ({itemsize} bytes) is not one of {', '.join(_DTYPES)}")
    if count < 0 or stride < 0 or (count > 1 and stride == 0):
        raise MeshError(f"{path}: {count} elements {stride} bytes apart cannot be read")
    if addr % dt.itemsize or stride % dt.itemsize:
        raise MeshError(f"{path}: data at 0x{addr:x}, stride {stride} is not aligned to its {dtype} items")
    shape, strides = (int(count),), (int(stride) if count > 1 else dt.itemsize,)
    if count == 0:
        return np.empty(0, dt)
    kind = capi._pointer_kind(addr)
    if kind is not None and kind[0] == 2:  # cudaMemoryTypeDevice
        return capi._device_array(addr, shape, dt, strides, kind[1], path)
    return capi._host_array(addr, shape, dt, strides)


# --------------------------------------------------------------------------- translation


def _components(name: str, f: Mapping, path: str) -> Iterator[tuple[str, dict]]:
    """A Blueprint field; an mcarray one split into one scalar field per component."""
    values = f.get("values") if isinstance(f, Mapping) else None
    if not isinstance(values, Mapping):
        yield name, dict(f) if isinstance(f, Mapping) else f
        return
    if not values:
        raise MeshError(f"{path}/values: an mcarray without components")
    for comp, v in values.items():
        if isinstance(v, Mapping):
            raise MeshError(f"{path}/values/{comp}: expected an array (an mcarray component), got a map")
        yield f"{name}/{comp}", {**f, "values": v}


def _domain(d, path: str, default_id: int | None) -> dict:
    """One Blueprint domain of the node, fields' mcarrays split, a domain id given."""
    if not isinstance(d, Mapping):
        raise MeshError(f"{path}: expected a Blueprint mesh (coordsets, topologies, fields), got "
                        f"{type(d).__name__ if d is not None else 'an empty node'}")
    out = dict(d)
    fields = d.get("fields")
    if isinstance(fields, Mapping):
        out["fields"] = {k: v for name, f in fields.items() for k, v in _components(name, f, f"{path}/fields/{name}")}
    state = dict(d.get("state") or {}) if isinstance(d.get("state") or {}, Mapping) else {}
    if "domain_id" not in state:
        if default_id is None:
            raise MeshError(f"{path}/state/domain_id: missing; the domains of a multimesh on several ranks need "
                            "ids unique across the ranks")
        state["domain_id"] = default_id
    out["state"] = state
    return out


def mesh_from_channels(channels, *, rank: int = 0, size: int = 1) -> dict[str, dict]:
    """The Blueprint domains of ``catalyst/channels`` (as the walker gives it), for :func:`adaptors.execute`.

    Parameters
    ----------
    channels : mapping
        ``{name: {"type": "mesh" | "multimesh", "data": ...}}``: a mesh channel's data is
        one Blueprint domain, a multimesh channel's a map (or list) of domains.
    rank, size : int
        This rank in the adaptor's communicator and its size: a mesh channel's domain
        without ``state/domain_id`` gets ``rank`` (a multimesh's on one rank its index).

    Returns
    -------
    dict
        ``{node path of the domain: Blueprint domain}``, mcarray fields split into
        ``<name>/<component>`` scalar fields; arrays are the ones given (never copied).

    Raises
    ------
    MeshError
        Naming the node path at fault.
    """
    root = "catalyst/channels"
    if not isinstance(channels, Mapping) or not channels:
        raise MeshError(f"{root}: no channel (each mesh is a channel: {root}/<name>/{{type: mesh|multimesh, data}})")
    out: dict[str, dict] = {}
    for name, ch in channels.items():
        cpath = f"{root}/{name}"
        if not isinstance(ch, Mapping):
            raise MeshError(f"{cpath}: expected {{type, data}}, got {type(ch).__name__}")
        kind = ch.get("type")
        if kind not in CHANNEL_TYPES:
            raise MeshError(f"{cpath}/type: {'missing' if kind is None else repr(kind)}; insitu reads "
                            f"{', '.join(CHANNEL_TYPES)}")
        if ch.get("data") is None:
            raise MeshError(f"{cpath}/data: missing (the channel's Conduit Mesh Blueprint mesh)")
        data = ch["data"]
        if kind == "mesh":
            out[f"{cpath}/data"] = _domain(data, f"{cpath}/data", rank + len(out) * size)
            continue
        items = list(data.items()) if isinstance(data, Mapping) else list(enumerate(data)) \
            if isinstance(data, list) else None
        if not items or (isinstance(data, Mapping) and "coordsets" in data):
            raise MeshError(f"{cpath}/data: a multimesh is a map or list of Blueprint domains, got "
                            f"{'one domain (use type: mesh)' if isinstance(data, Mapping) and data else 'nothing'}")
        for key, d in items:
            dpath = f"{cpath}/data/{key}"
            out[dpath] = _domain(d, dpath, len(out) if size == 1 else None)
    return out


class _ChannelMesh(Mapping):
    """The step's domains, read from the node when the adaptor first looks at them."""

    def __init__(self, walk: Callable[[int], Any], rank: int, size: int) -> None:
        self._walk, self._rank, self._size = walk, rank, size
        self._mesh: dict | None = None

    def _get(self) -> dict:
        if self._mesh is None:
            try:
                tree = self._walk(0)
            except (ValueError, RuntimeError) as exc:  # NULL data, a bad leaf: the path is in the message
                raise MeshError(str(exc)) from None
            self._mesh = mesh_from_channels(tree, rank=self._rank, size=self._size)
        return self._mesh

    def __getitem__(self, key):
        return self._get()[key]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


_PARAM = re.compile(r"^\s*-*([A-Za-z_][\w.]*)\s*[=:]\s*(\S+)\s*$")


def parameters_from_node(params) -> dict[str, float]:
    """Steering parameters from ``catalyst/state/parameters``: ``{name: number}``, or
    strings ``"name=value"`` (ParaView's form; strings that are not a numeric assignment
    are script arguments insitu has no use for, and are left alone)."""
    found: dict[str, float] = {}
    items = params.items() if isinstance(params, Mapping) else enumerate(params if isinstance(params, list)
                                                                         else [params])
    for key, v in items:
        if isinstance(v, str):
            m = _PARAM.match(v)
            if m:
                try:
                    found[m.group(1)] = float(m.group(2))
                except ValueError:
                    pass
        elif isinstance(key, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            found[key] = float(v)
    return found


# --------------------------------------------------------------------------- entry points


def execute(step: int, time: float, walk: Callable[[int], Any], rank: int, size: int, has_parameters: bool,
            problem: str) -> tuple[int, str, Any]:
    """``catalyst_execute``: the adaptor's step on the node's channels (read lazily).

    `problem`: what the C module found wrong with the node (no state, no channels); the
    step then fails on every rank as an invalid mesh does.
    """
    if has_parameters and not problem:
        try:
            found = parameters_from_node(walk(1))
            if found:
                capi._require().steer({"params": found})
        except Exception as exc:  # a bad parameter fails the step (on every rank) like a bad mesh
            problem = f"catalyst/state/parameters: {exc}"
    mesh = _ChannelMesh(walk, rank, size)
    return capi.execute_mesh(step, time, mesh, int(capi.Status.ERR_MESH) if problem else 0, problem)


def _result_items(r: Mapping) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = [("insitu/stop", int(bool(r.get("stop")))),
                                    ("insitu/pause", int(bool(r.get("pause")))),
                                    ("insitu/step", -1 if r.get("step") is None else int(r["step"])),
                                    ("insitu/time", float(r.get("time") or 0.0)),
                                    ("insitu/nerrors", len(r.get("errors") or [])),
                                    ("insitu/errors", [str(e) for e in r.get("errors") or []]),
                                    ("insitu/frames", [str(f) for f in r.get("frames") or []])]
    for name, v in (r.get("params") or {}).items():
        items.append((f"insitu/params/{name}", float(v)))
    for name, vals in (r.get("iso_values") or {}).items():
        if vals is not None:
            items.append((f"insitu/iso_values/{name}", [float(v) for v in vals]))
    for key, v in (r.get("camera") or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            items.append((f"insitu/camera/{key}", float(v)))
        elif isinstance(v, (list, tuple)):
            items.append((f"insitu/camera/{key}", [float(x) for x in v]))
    if r.get("colormap"):
        items.append(("insitu/colormap", str(r["colormap"])))
    for key, v in (r.get("transfers") or {}).items():
        items.append((f"insitu/transfers/{key}", int(v)))
    return items


def results() -> tuple[int, str, Any]:
    """``catalyst_results``: ``(path, value)`` pairs written into the node under ``insitu/``:
    ``stop``, ``pause``, ``step``, ``time``, ``nerrors``, ``errors`` and ``frames`` (lists of
    strings), ``params/<name>``, ``iso_values/<pipeline>``, ``camera/<key>``, ``colormap``,
    ``transfers/<h2d_calls|h2d_bytes|d2h_calls|d2h_bytes>`` (the last step's host<->device copies)."""
    return capi._guard("results", lambda: _result_items(capi._require().results()))

