"""Meshes handed to ``execute``: Conduit Mesh Blueprint shapes as nested dicts.

One domain::

    {"coordsets": {"coords": {"type": "uniform", "dims": {"i": nx, "j": ny, "k": nz},
                              "origin": {"x": 0.0, "y": 0.0, "z": 0.0},
                              "spacing": {"dx": h, "dy": h, "dz": h}}},
     "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
     "fields": {"T": {"association": "vertex", "topology": "mesh", "values": T},
                "ascent_ghosts": {"association": "element", "topology": "mesh", "values": g}},
     "state": {"domain_id": 0, "cycle": 7, "time": 0.7}}

Several domains per rank: a list of such dicts (or a dict of them). Values are any
host or device array (:func:`insitu.arrays.asarray`: never copied) of shape
``(nx, ny, nz)`` for vertex fields and ``(nx-1, ny-1, nz-1)`` for element fields,
indexed ``[i, j, k]`` in any memory order; a flat array is read as Conduit stores it
(``i`` fastest). The ghost field (element, non-zero = ghost) must leave a box of real
cells; without one every cell is real. A vertex field may carry its per-tile value
ranges beside its values, ``"tile_ranges": {"span": [si, sj, sk], "values": ...}`` (or
an :class:`insitu.ranges.TileRanges`; see :func:`insitu.ranges.as_tile_ranges`), which
its contours pass to marching cubes so that only tiles a level can cross are read.
:func:`uniform` builds such a dict.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Mapping, Sequence

import numpy as np

from insitu import arrays
from insitu.ranges import TileRanges, as_tile_ranges

from .errors import MeshError

__all__ = ["MeshDomain", "Field", "parse", "uniform"]

_AXES = (("i", "x", "dx"), ("j", "y", "dy"), ("k", "z", "dz"))
_DTYPES = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@dataclasses.dataclass
class Field:
    association: str  # "vertex" or "element"
    values: Any  # (nx, ny, nz) or (nx-1, ny-1, nz-1), NumPy or CuPy, never a copy
    #: Per-tile (min, max) of `values` (vertex fields only), on their device; true of
    #: these very values: a field derived from them is a new Field without ranges.
    tile_ranges: TileRanges | None = None


@dataclasses.dataclass
class MeshDomain:
    """One Blueprint domain of the simulation's mesh (a uniform block), as the adaptor
    sees it; :class:`insitu.Domain` is another thing, a global grid's decomposition."""

    domain_id: int
    dims: tuple[int, int, int]  # nodes
    origin: np.ndarray
    spacing: np.ndarray
    fields: dict[str, Field]
    cells: tuple[tuple[int, int, int], tuple[int, int, int]]  # real cells [lo, hi) in local cell indices

    @property
    def nodes(self) -> tuple[slice, slice, slice]:
        """Node slices that span the real cells (cells lo..hi-1 -> nodes lo..hi)."""
        lo, hi = self.cells
        return slice(lo[0], hi[0] + 1), slice(lo[1], hi[1] + 1), slice(lo[2], hi[2] + 1)

    @property
    def box(self) -> np.ndarray:
        """World box of the real cells: (x0, x1, y0, y1, z0, z1)."""
        lo, hi = self.cells
        a = self.origin + np.asarray(lo) * self.spacing
        b = self.origin + np.asarray(hi) * self.spacing
        return np.array([a[0], b[0], a[1], b[1], a[2], b[2]])

    @property
    def node_origin(self) -> np.ndarray:
        """World position of the first node of :attr:`nodes`."""
        return self.origin + np.asarray(self.cells[0]) * self.spacing

    def vertex_values(self, name: str):
        """Field `name` at the nodes spanning the real cells (element fields recentred:
        each node the mean of its up to 8 cells; a view for vertex fields)."""
        return self.vertex_array(name)[self.nodes]

    def vertex_array(self, name: str):
        """Field `name` at every node of the domain, ghosts included (element fields recentred)."""
        f = self.fields.get(name)
        if f is None:
            raise MeshError(f"domain {self.domain_id}: no field {name!r}; fields: {', '.join(sorted(self.fields))}")
        return f.values if f.association == "vertex" else _recentre(f.values)

    def real_values(self, name: str):
        """Field `name` over the real part only (nodes or cells by its association)."""
        f = self.fields[name]
        if f.association == "vertex":
            return f.values[self.nodes]
        lo, hi = self.cells
        return f.values[tuple(slice(a, b) for a, b in zip(lo, hi))]


def _recentre(cells):
    xp = arrays.get_array_module(cells)
    c = cells.astype(xp.float64) if cells.dtype.kind != "f" else cells
    p = xp.pad(c, 1, mode="edge")
    # Node (i, j, k) touches cells i-1..i: the 8 shifted views of the edge-padded cells.
    acc = None
    for di in (0, 1):
        for dj in (0, 1):
            for dk in (0, 1):
                v = p[di:di + c.shape[0] + 1, dj:dj + c.shape[1] + 1, dk:dk + c.shape[2] + 1]
                acc = v.copy() if acc is None else acc + v
    return acc / 8


def parse(mesh, *, ghost_field: str = "ascent_ghosts") -> list[MeshDomain]:
    """Validate a Blueprint mesh (one domain, a list or a dict of them); return its domains.

    Raises
    ------
    MeshError
        Naming the path at fault: ``"domain 1/fields/T/values: expected 17x17x9 float32
        or float64..., got 16x17x9 float32"``.
    """
    if isinstance(mesh, Mapping) and "coordsets" in mesh:
        items = [("", mesh)]
    elif isinstance(mesh, Mapping):
        items = [(f"{k}/", v) for k, v in mesh.items()]
    elif isinstance(mesh, (list, tuple)):
        items = [(f"domain {i}/", v) for i, v in enumerate(mesh)]
    else:
        raise MeshError(f"mesh: expected a Blueprint dict (or a list of them), got {type(mesh).__name__}")
    out = [_domain(m, p, i, ghost_field) for i, (p, m) in enumerate(items)]
    ids = [d.domain_id for d in out]
    if len(set(ids)) != len(ids):
        raise MeshError(f"mesh: domains repeat state/domain_id: {ids}")
    kinds = {arrays.backend_of(f.values) for d in out for f in d.fields.values()}
    if len(kinds) > 1:
        raise MeshError("mesh: fields mix host and device arrays; hand all of one rank's fields in one memory space")
    return out


def _get(node, key: str, path: str):
    if not isinstance(node, Mapping):
        raise MeshError(f"{path.rstrip('/')}: expected a map, got {type(node).__name__}")
    if key not in node:
        known = ", ".join(map(str, node)) or "nothing"
        raise MeshError(f"{path}{key}: missing (found: {known})")
    return node[key]


def _one(node, path: str):
    if not isinstance(node, Mapping) or len(node) != 1:
        raise MeshError(f"{path.rstrip('/')}: expected exactly one entry (a uniform coordset/topology), "
                        f"got {len(node) if isinstance(node, Mapping) else type(node).__name__}")
    return next(iter(node.items()))


def _number(v, path: str, *, positive: bool = False, integer: bool = False):
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    if ok and integer:
        ok = float(v) == int(v)
    if ok:
        ok = np.isfinite(float(v)) and (not positive or v > 0)
    if not ok:
        want = "a positive integer" if integer else ("a positive number" if positive else "a finite number")
        raise MeshError(f"{path}: expected {want}, got {v!r}")
    return int(v) if integer else float(v)


def _domain(m, p: str, index: int, ghost_field: str) -> MeshDomain:
    csname, cs = _one(_get(m, "coordsets", p), f"{p}coordsets/")
    cpath = f"{p}coordsets/{csname}/"
    if _get(cs, "type", cpath) != "uniform":
        raise MeshError(f"{cpath}type: only 'uniform' coordsets are supported, got {cs['type']!r}")
    dims_n = _get(cs, "dims", cpath)
    dims = tuple(_number(_get(dims_n, a, f"{cpath}dims/"), f"{cpath}dims/{a}", positive=True, integer=True)
                 for a, _, _ in _AXES)
    if min(dims) < 2:
        raise MeshError(f"{cpath}dims: every axis needs at least 2 nodes (one cell), got {dims}")
    org = cs.get("origin", {})
    spc = cs.get("spacing", {})
    origin = np.array([_number(org.get(x, 0.0), f"{cpath}origin/{x}") for _, x, _ in _AXES])
    spacing = np.array([_number(spc.get(d, 1.0), f"{cpath}spacing/{d}", positive=True) for _, _, d in _AXES])
    tname, topo = _one(_get(m, "topologies", p), f"{p}topologies/")
    tpath = f"{p}topologies/{tname}/"
    if _get(topo, "type", tpath) != "uniform":
        raise MeshError(f"{tpath}type: only 'uniform' topologies are supported, got {topo['type']!r}")
    if topo.get("coordset", csname) != csname:
        raise MeshError(f"{tpath}coordset: names {topo['coordset']!r}, the coordset is {csname!r}")
    state = m.get("state", {}) or {}
    did = _number(state.get("domain_id", index), f"{p}state/domain_id", integer=True)
    fields = {}
    given = _get(m, "fields", p)
    if not isinstance(given, Mapping):
        raise MeshError(f"{p}fields: expected a map of fields, got {type(given).__name__}")
    cdims = tuple(n - 1 for n in dims)
    for name, f in given.items():
        fpath = f"{p}fields/{name}/"
        assoc = _get(f, "association", fpath)
        if assoc not in ("vertex", "element"):
            raise MeshError(f"{fpath}association: expected 'vertex' or 'element', got {assoc!r}")
        if f.get("topology", tname) != tname:
            raise MeshError(f"{fpath}topology: names {f['topology']!r}, the topology is {tname!r}")
        shape = dims if assoc == "vertex" else cdims
        values = _values(_get(f, "values", fpath), shape, f"{fpath}values")
        ranges = f.get("tile_ranges")
        if ranges is not None:
            ranges = _tile_ranges(ranges, assoc, values, f"{fpath}tile_ranges")
        fields[str(name)] = Field(assoc, values, ranges)
    cells = ((0, 0, 0), cdims)
    if ghost_field in fields:
        g = fields.pop(ghost_field)
        if g.association != "element":
            raise MeshError(f"{p}fields/{ghost_field}/association: the ghost field must be element-associated")
        cells = _real_box(g.values, f"{p}fields/{ghost_field}/values")
    return MeshDomain(did, dims, origin, spacing, fields, cells)


def _values(v, shape: tuple, path: str):
    want = "x".join(map(str, shape))
    try:
        a = arrays.asarray(v, name=path)
    except arrays.DeviceUnavailableError as e:
        raise MeshError(str(e)) from None
    except TypeError:
        raise MeshError(f"{path}: expected a {want} array (NumPy, CuPy, __cuda_array_interface__ or "
                        f"DLPack), got {type(v).__name__}") from None
    if a.ndim == 1 and a.size == int(np.prod(shape)):
        a = a.reshape(shape[::-1]).transpose()  # Conduit's order: i fastest; a view
    if tuple(a.shape) != tuple(shape) or str(a.dtype) not in _DTYPES:
        raise MeshError(f"{path}: expected {want} {'/'.join(_DTYPES[:2])} (or integer), "
                        f"got {'x'.join(map(str, a.shape))} {a.dtype}")
    return a


def _tile_ranges(obj, association: str, values, path: str) -> TileRanges:
    if association != "vertex":
        raise MeshError(f"{path}: only vertex fields carry tile ranges, this field is {association}-associated")
    try:
        return as_tile_ranges(obj, values.shape, values, name=path)
    except arrays.DeviceUnavailableError as e:
        raise MeshError(str(e)) from None
    except (TypeError, ValueError) as e:
        raise MeshError(str(e) if str(e).startswith(path) else f"{path}: {e}") from None


_box_cache: dict = {}  # id(ghost array) -> (weak reference, box)


def _real_box(g, path: str):
    """The box of real cells, read once per ghost array *object* (a weak reference ties
    the entry to the array, so a new array at a recycled address is read afresh; rewrite
    a ghost array in place and the old box stays: hand a new array instead)."""
    hit = _box_cache.get(id(g))
    if hit is not None and hit[0]() is g:
        return hit[1]
    box = _find_real_box(g, path)
    key = id(g)
    try:
        ref = weakref.ref(g, lambda _: _box_cache.pop(key, None))
    except TypeError:  # an array type without weak references: no caching
        return box
    _box_cache[key] = (ref, box)
    return box


def _find_real_box(g, path: str):
    xp = arrays.get_array_module(g)
    real = g == 0
    lo, hi = [], []
    for ax in range(3):
        other = tuple(a for a in range(3) if a != ax)
        idx = xp.nonzero(real.any(axis=other))[0]
        if idx.size == 0:
            raise MeshError(f"{path}: every cell is a ghost")
        lo.append(int(idx[0]))
        hi.append(int(idx[-1]) + 1)
    box = real[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
    if not bool(box.all()):
        raise MeshError(f"{path}: the real (zero) cells must form a box inside a shell of ghost cells")
    return tuple(lo), tuple(hi)


def uniform(fields: Mapping[str, Any], *, origin: Sequence[float] = (0.0, 0.0, 0.0),
            spacing: Sequence[float] = (1.0, 1.0, 1.0), ghost: int | Sequence[Sequence[int]] = 0,
            domain_id: int = 0, element: Sequence[str] = (),
            tile_ranges: Mapping[str, Any] | None = None) -> dict:
    """A Blueprint dict for one uniform domain (the shorter Pythonic form).

    Parameters
    ----------
    fields : mapping name -> (nx, ny, nz) array
        Vertex fields (names in `element` are element fields, one sample fewer per axis).
    origin, spacing : (3,) floats
        Position of node (0, 0, 0) and the node spacing.
    ghost : int or ((lo_x, hi_x), (lo_y, hi_y), (lo_z, hi_z))
        Layers of ghost cells on each side; adds an ``ascent_ghosts`` element field.
    tile_ranges : mapping name -> TileRanges or {"span", "values"}, optional
        Per-tile ranges of vertex fields (:mod:`insitu.ranges`), checked by :func:`parse`.

    Raises
    ------
    MeshError
        `tile_ranges` names a field not in `fields`.
    """
    unknown = sorted(set(tile_ranges or ()) - set(fields))
    if unknown:
        raise MeshError(f"tile_ranges: no field {', '.join(map(repr, unknown))}; fields: {', '.join(fields)}")
    name, first = next(iter(fields.items()))
    shape = tuple(int(n) + (1 if name in element else 0) for n in first.shape)
    dims = dict(zip("ijk", shape))
    out: dict[str, Any] = {
        "coordsets": {"coords": {"type": "uniform", "dims": dims,
                                 "origin": dict(zip("xyz", map(float, origin))),
                                 "spacing": dict(zip(("dx", "dy", "dz"), map(float, spacing)))}},
        "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
        "fields": {k: {"association": "element" if k in element else "vertex", "topology": "mesh", "values": v}
                   for k, v in fields.items()},
        "state": {"domain_id": int(domain_id)},
    }
    for k, r in (tile_ranges or {}).items():
        out["fields"][k]["tile_ranges"] = r
    widths = ((ghost, ghost),) * 3 if isinstance(ghost, int) else tuple(tuple(w) for w in ghost)
    if any(w for pair in widths for w in pair):
        out["fields"]["ascent_ghosts"] = {"association": "element", "topology": "mesh",
                                          "values": _ghosts(tuple(n - 1 for n in shape), widths)}
    return out


_ghost_cache: dict = {}


def _ghosts(cdims: tuple, widths: tuple) -> np.ndarray:
    key = (cdims, widths)
    g = _ghost_cache.get(key)
    if g is None:
        g = np.ones(cdims, np.int32)
        g[tuple(slice(lo, n - hi) for (lo, hi), n in zip(widths, cdims))] = 0
        g.setflags(write=False)
        if len(_ghost_cache) > 64:
            _ghost_cache.clear()
        _ghost_cache[key] = g
    return g
