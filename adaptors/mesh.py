"""Meshes handed to ``execute``: Conduit Mesh Blueprint, as nested dicts or ``conduit.Node``.

One domain::

    {"coordsets": {"coords": {"type": "uniform", "dims": {"i": nx, "j": ny, "k": nz},
                              "origin": {"x": 0.0, "y": 0.0, "z": 0.0},
                              "spacing": {"dx": h, "dy": h, "dz": h}}},
     "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
     "fields": {"T": {"association": "vertex", "topology": "mesh", "values": T},
                "ascent_ghosts": {"association": "element", "topology": "mesh", "values": g}},
     "state": {"domain_id": 0, "cycle": 7, "time": 0.7}}

Several domains per rank: a list of such dicts (or a dict of them). A ``conduit.Node``
(anything with ``fetch``, ``number_of_children`` and ``child_names``) is read the same
way, without copying its arrays. Values are any host or device array
(:func:`insitu.arrays.asarray`: never copied) of shape ``(nx, ny, nz)`` for vertex
fields and ``(nx-1, ny-1, nz-1)`` for element fields, indexed ``[i, j, k]`` in any memory
order; a flat array is read as Conduit stores it (``i`` fastest). Any integer or float
dtype (float16 and uint64 included) is kept as given; the kernels convert what they do not
read directly. Masked arrays are refused (their mask would be lost).

What is read:

- coordsets ``uniform`` (spacing ``dx/dy/dz`` or ``x/y/z``, origin ``x/y/z`` or
  ``i/j/k``; unknown or non-Cartesian axis names are errors), ``rectilinear`` and
  ``explicit`` (axes ``x, y[, z]``);
- topologies ``uniform``, and ``rectilinear`` and ``structured`` ones whose coordinates
  are an evenly spaced axis-aligned lattice (within 1e-5 of a step): all become uniform
  grids. Unevenly spaced or curvilinear grids, ``unstructured`` topologies (single shapes
  or ``mixed`` with ``shape_map``/``shapes``), ``points``, 2-D meshes, ``matsets``,
  ``specsets`` and ``nestsets`` are validated and then refused with ``not supported yet``
  and the path. A domain may hold several topologies: the one its fields name is drawn.
  ``adjsets`` are checked and not needed (ghosts come from the ghost field);
- ghosts: the element field ``ascent_ghosts`` (the adaptor's ``ghost_field``; non-zero =
  ghost) and ``vtkGhostType`` (VTK's bits: DUPLICATECELL or HIDDENCELL = ghost); the
  real cells must form a box; without ghosts every cell is real;
- ``mcarray`` fields (values ``{x, y, z}``, ``{u, v, w}`` or any component names;
  separate arrays, or views of one interleaved array) become scalar fields: ``<name>/<c>``
  for each component (views, as the Catalyst adaptor names them) and ``<name>/magnitude``,
  a :class:`VectorField` holding the components, whose values (the magnitude) are
  computed when first read. Filters that take a scalar take any of them.

A vertex field may carry its per-tile value ranges beside its values,
``"tile_ranges": {"span": [si, sj, sk], "values": ...}`` (or an
:class:`insitu.ranges.TileRanges`; see :func:`insitu.ranges.as_tile_ranges`), which its
contours pass to marching cubes so that only tiles a level can cross are read.
:func:`uniform` builds such a dict.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np

from insitu import arrays
from insitu.ranges import TileRanges, as_tile_ranges

from .errors import MeshError

__all__ = ["MeshDomain", "Field", "VectorField", "parse", "uniform"]


@dataclasses.dataclass
class Field:
    association: str  # "vertex" or "element"
    values: Any  # (nx, ny, nz) or (nx-1, ny-1, nz-1), NumPy or CuPy, never a copy
    #: Per-tile (min, max) of `values` (vertex fields only), on their device; true of
    #: these very values: a field derived from them is a new Field without ranges.
    tile_ranges: TileRanges | None = None
    #: An mcarray's components by name (views), None for a scalar field.
    components: Mapping[str, Any] | None = None


class VectorField(Field):
    """An mcarray field: its `components` as given; `values`, where a filter needs a
    scalar, is their magnitude, computed on first read (float32 when every component is
    float32 or float16, else float64)."""

    def __init__(self, association: str, components: Mapping[str, Any]):
        self.association, self.components, self.tile_ranges = association, dict(components), None
        self._magnitude = None

    @property
    def values(self):
        if self._magnitude is None:
            comps = list(self.components.values())
            xp = arrays.get_array_module(comps[0])
            dt = xp.float32 if all(c.dtype in (xp.float32, xp.float16) for c in comps) else xp.float64
            acc = None
            for c in comps:
                c = c.astype(dt)
                acc = c * c if acc is None else acc + c * c
            self._magnitude = xp.sqrt(acc)
        return self._magnitude

    @values.setter
    def values(self, v) -> None:
        self._magnitude = v


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

    Parameters
    ----------
    mesh : mapping, sequence or conduit.Node
        Nested dicts, or a ``conduit.Node`` (anything with ``fetch``,
        ``number_of_children`` and ``child_names``), walked lazily: its leaves are
        NumPy views of the node's memory, never copied.
    ghost_field : str
        Element field whose non-zero cells are ghosts; ``vtkGhostType`` (cells with VTK's
        DUPLICATECELL or HIDDENCELL bit) is read as ghosts as well.

    Returns
    -------
    list of MeshDomain
        Uniform grids: uniform topologies, and rectilinear and structured ones whose
        coordinates are an evenly spaced axis-aligned lattice (within 1e-5 of a step).

    Raises
    ------
    MeshError
        Naming the path at fault: ``"domain 1/fields/T/values: expected 17x17x9 float32
        or float64..., got 16x17x9 float32"``; well-formed meshes the filters cannot draw
        yet (2-D, unstructured, points, matsets, nestsets) with ``not supported yet``.
    """
    mesh = _tree(mesh)
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
    kinds = {arrays.backend_of(a) for d in out for f in d.fields.values()
             for a in (f.components.values() if f.components else (f.values,))}
    if len(kinds) > 1:
        raise MeshError("mesh: fields mix host and device arrays; hand all of one rank's fields in one memory space")
    return out


# --------------------------------------------------------------------------- conduit.Node, duck-typed


def _is_node(obj) -> bool:
    return (not isinstance(obj, Mapping) and hasattr(obj, "fetch") and hasattr(obj, "number_of_children")
            and hasattr(obj, "child_names"))


def _tree(obj):
    """`obj` itself, or a conduit.Node as a read-only mapping (a list node as a list)."""
    if not _is_node(obj):
        return obj
    n = obj.number_of_children()
    if n == 0:
        return _leaf(obj.value())
    names = list(obj.child_names())
    if not names or not any(names):  # a list node
        return [_tree(obj.child(i)) for i in range(n)]
    return _NodeMap(obj, names)


def _leaf(v):
    """A Node leaf's value: a NumPy view of its memory (offset, stride), a number or a str.
    Conduit flags a strided view C-contiguous, and NumPy's contiguous fast paths (reshape,
    copies, some ufunc loops) trust the flag: the view is rebuilt with true flags."""
    if isinstance(v, np.ndarray) and v.ndim == 1 and v.shape[0] > 1 and v.strides[0] != v.itemsize:
        return np.lib.stride_tricks.as_strided(v, v.shape, v.strides)
    return v


class _NodeMap(Mapping):
    """A conduit.Node object read as a mapping; children are wrapped when read."""

    __slots__ = ("_node", "_names")

    def __init__(self, node, names: list[str]):
        self._node, self._names = node, names

    def __getitem__(self, key):
        if key not in self._names:
            raise KeyError(key)
        return _tree(self._node.fetch(key))

    def __contains__(self, key) -> bool:
        return key in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


# --------------------------------------------------------------------------- helpers


def _get(node, key: str, path: str):
    if not isinstance(node, Mapping):
        raise MeshError(f"{path.rstrip('/')}: expected a map, got {type(node).__name__}")
    if key not in node:
        known = ", ".join(map(str, node)) or "nothing"
        raise MeshError(f"{path}{key}: missing (found: {known})")
    return node[key]


def _map(node, path: str, what: str) -> Mapping:
    if not isinstance(node, Mapping) or not node:
        got = "an empty map" if isinstance(node, Mapping) else type(node).__name__
        raise MeshError(f"{path.rstrip('/')}: expected a map of {what}, got {got}")
    return node


def _number(v, path: str, *, positive: bool = False, integer: bool = False):
    if isinstance(v, np.ndarray) and v.size == 1:  # a one-element Conduit leaf
        v = v.reshape(()).item()
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    if ok and integer:
        ok = float(v) == int(v)
    if ok:
        ok = np.isfinite(float(v)) and (not positive or v > 0)
    if not ok:
        want = "a positive integer" if integer else ("a positive number" if positive else "a finite number")
        raise MeshError(f"{path}: expected {want}, got {v!r}")
    return int(v) if integer else float(v)


def _unsupported(path: str, what: str) -> MeshError:
    return MeshError(f"{path}: {what}: not supported yet (insitu draws 3-D uniform grids, and rectilinear and "
                     "structured ones whose coordinates are an evenly spaced axis-aligned lattice)")


# --------------------------------------------------------------------------- domains


def _domain(m, p: str, index: int, ghost_field: str) -> MeshDomain:
    if not isinstance(m, Mapping):
        raise MeshError(f"{p.rstrip('/') or 'mesh'}: expected a Blueprint domain (a map), got {type(m).__name__}")
    for key, what in _SETS:
        if key in m:
            raise _unsupported(f"{p}{key}", what)
    given = _get(m, "fields", p)
    if not isinstance(given, Mapping):
        raise MeshError(f"{p}fields: expected a map of fields, got {type(given).__name__}")
    topos = _map(_get(m, "topologies", p), f"{p}topologies/", "topologies")
    tname = _pick_topology(topos, given, p)
    tpath = f"{p}topologies/{tname}/"
    topo = topos[tname]
    coordsets = _map(_get(m, "coordsets", p), f"{p}coordsets/", "coordsets")
    csname = _coordset_name(topo, coordsets, tpath)
    cpath = f"{p}coordsets/{csname}/"
    dims, origin, spacing = _grid(_get(topo, "type", tpath), topo, tpath, coordsets[csname], cpath)
    if "adjsets" in m:
        _check_adjsets(m["adjsets"], topos, f"{p}adjsets/")
    state = m.get("state", {}) or {}
    did = _number(state.get("domain_id", index), f"{p}state/domain_id", integer=True)
    fields: dict[str, Field] = {}
    cdims = tuple(n - 1 for n in dims)
    for name, f in given.items():
        fpath = f"{p}fields/{name}/"
        _field(fields, str(name), f, fpath, tname, dims, cdims)
    cells = ((0, 0, 0), cdims)
    for gname, bits in ((ghost_field, None), (_VTK_GHOSTS, _VTK_HIDDEN)):
        g = fields.pop(gname, None)
        if g is None:
            continue
        gpath = f"{p}fields/{gname}/"
        if g.association != "element" or g.components:
            raise MeshError(f"{gpath}association: the ghost field must be an element-associated scalar "
                            f"(ghost points are not supported yet), got {g.association}")
        if bits is not None and g.values.dtype.kind not in "iu":
            raise MeshError(f"{gpath}values: vtkGhostType holds VTK's ghost bits: expected integers, "
                            f"got {g.values.dtype}")
        cells = _intersect(cells, _real_box(g.values, f"{gpath}values", bits), f"{p}fields: {gname}")
    return MeshDomain(did, dims, origin, spacing, fields, cells)


#: Domain children the filters would ignore, and so draw wrong: refused until supported.
_SETS = (("matsets", "material sets (the mesh would be drawn as if of one material)"),
         ("specsets", "species sets"),
         ("nestsets", "nesting sets (AMR levels would be drawn over each other)"))
#: VTK's ghost array and the bits of it that hide a cell (DUPLICATECELL | HIDDENCELL), as VTK's filters read it.
_VTK_GHOSTS, _VTK_HIDDEN = "vtkGhostType", 1 | 32


def _pick_topology(topos: Mapping, fields: Mapping, p: str) -> str:
    """The topology the fields name (one per domain: the filters draw one grid)."""
    named: dict[str, str] = {}
    for name, f in fields.items():
        t = f.get("topology") if isinstance(f, Mapping) else None
        if t is not None:
            named.setdefault(str(t), str(name))
    for t, name in named.items():
        if t not in topos:
            raise MeshError(f"{p}fields/{name}/topology: names {t!r}; topologies: {', '.join(map(str, topos))}")
    if len(named) > 1:
        raise _unsupported(f"{p}fields", f"fields on several topologies ({', '.join(named)}) of one domain "
                                         "(hand each topology's fields as a domain of their own)")
    if named:
        return next(iter(named))
    if len(topos) > 1:
        raise MeshError(f"{p}topologies: several ({', '.join(map(str, topos))}) and no field names one "
                        "(fields/<name>/topology)")
    return str(next(iter(topos)))


def _coordset_name(topo, coordsets: Mapping, tpath: str) -> str:
    cs = topo.get("coordset") if isinstance(topo, Mapping) else None
    if cs is None:
        if len(coordsets) > 1:
            raise MeshError(f"{tpath}coordset: missing, and there are several coordsets "
                            f"({', '.join(map(str, coordsets))})")
        return str(next(iter(coordsets)))
    if cs not in coordsets:
        raise MeshError(f"{tpath}coordset: names {cs!r}; coordsets: {', '.join(map(str, coordsets))}")
    return str(cs)


# --------------------------------------------------------------------------- coordsets and topologies


_TOPOLOGY_COORDS = {"uniform": ("uniform",), "rectilinear": ("rectilinear",), "structured": ("explicit",),
                    "unstructured": ("explicit",), "points": ("explicit", "uniform", "rectilinear")}


def _grid(ttype, topo, tpath: str, cs, cpath: str):
    """(dims, origin, spacing) of the uniform grid topology `topo` over `cs` makes."""
    kinds = _TOPOLOGY_COORDS.get(ttype)
    if kinds is None:
        raise MeshError(f"{tpath}type: expected one of {', '.join(_TOPOLOGY_COORDS)}, got {ttype!r}")
    ctype = _get(cs, "type", cpath)
    if ctype not in kinds:
        raise MeshError(f"{cpath}type: a {ttype} topology ({tpath.rstrip('/')}) needs a "
                        f"{' or '.join(kinds)} coordset, got {ctype!r}")
    if ttype == "uniform":
        dims, origin, spacing = _uniform_coords(cs, cpath)
    elif ttype == "rectilinear":
        dims, origin, spacing = _lattice([_axis(a, f"{cpath}values/{x}") for x, a in
                                          _cartesian(_get(cs, "values", cpath), f"{cpath}values")], cpath)
    elif ttype == "structured":
        dims, origin, spacing = _structured(topo, tpath, cs, cpath)
    elif ttype == "unstructured":
        shape = _check_unstructured(topo, tpath, _explicit(cs, cpath))
        raise _unsupported(tpath.rstrip("/"), f"an unstructured topology ({shape} cells)")
    else:
        if ctype == "explicit":
            _explicit(cs, cpath)
        raise _unsupported(tpath.rstrip("/"), "a points topology")
    if len(dims) == 2:
        raise _unsupported(cpath.rstrip("/"), "a 2-D mesh (the filters contour and ray cast 3-D cells)")
    if min(dims) < 2:
        raise MeshError(f"{cpath}dims: every axis needs at least 2 nodes (one cell), got {dims}")
    return dims, origin, spacing


_DIMS = ("i", "j", "k")
_ORIGIN = (("x", "y", "z"), ("i", "j", "k"))
_SPACING = (("dx", "dy", "dz"), ("x", "y", "z"))
_NON_CARTESIAN = {"r", "theta", "phi"}


def _uniform_coords(cs, cpath: str):
    dims_n = _get(cs, "dims", cpath)
    if not isinstance(dims_n, Mapping) or not ({"i", "j"} <= set(dims_n) <= set(_DIMS)):
        got = ", ".join(map(str, dims_n)) if isinstance(dims_n, Mapping) else type(dims_n).__name__
        raise MeshError(f"{cpath}dims: expected i, j (2-D) or i, j, k (3-D) node counts, got {got}")
    nd = len(dims_n)
    dims = tuple(_number(dims_n[a], f"{cpath}dims/{a}", positive=True, integer=True) for a in _DIMS[:nd])
    origin = _axes(cs.get("origin"), f"{cpath}origin", _ORIGIN, nd, 0.0, positive=False)
    spacing = _axes(cs.get("spacing"), f"{cpath}spacing", _SPACING, nd, 1.0, positive=True)
    return dims, np.array(origin), np.array(spacing)


def _axes(node, path: str, options: tuple, nd: int, default: float, *, positive: bool) -> list[float]:
    """Per-axis numbers keyed by one of the `options` name sets (a missing axis: `default`)."""
    if node is None:
        return [default] * nd
    if not isinstance(node, Mapping):
        raise MeshError(f"{path}: expected a map of per-axis numbers, got {type(node).__name__}")
    keys = set(node)
    for names in options:
        if keys <= set(names[:nd]):
            return [_number(node[a], f"{path}/{a}", positive=positive) if a in node else default
                    for a in names[:nd]]
    want = " or ".join("/".join(n[:nd]) for n in options)
    what = "non-Cartesian axes" if keys & _NON_CARTESIAN else "unknown or mixed axis names"
    raise MeshError(f"{path}: {what} {', '.join(sorted(map(str, keys)))}: expected {want} "
                    f"({'not supported yet' if keys & _NON_CARTESIAN else 'one naming for every axis'})")


def _cartesian(values, path: str) -> list[tuple[str, Any]]:
    """The (axis, array) pairs of a rectilinear or explicit coordset's values: x, y[, z]."""
    if not isinstance(values, Mapping):
        raise MeshError(f"{path}: expected a map of per-axis arrays (x, y[, z]), got {type(values).__name__}")
    keys = set(values)
    if keys & _NON_CARTESIAN:
        raise _unsupported(path, f"non-Cartesian axes ({', '.join(sorted(map(str, keys)))})")
    if keys not in ({"x", "y"}, {"x", "y", "z"}):
        raise MeshError(f"{path}: expected axes x, y[, z], got {', '.join(sorted(map(str, keys))) or 'none'}")
    return [(x, values[x]) for x in "xyz" if x in keys]


def _axis(v, path: str):
    a = _array(v, path)
    if a.ndim != 1 or a.shape[0] < 1 or a.dtype.kind not in "iuf":
        raise MeshError(f"{path}: expected a 1-D array of numbers, got {'x'.join(map(str, a.shape))} {a.dtype}")
    return a


def _lattice(axes: list, cpath: str):
    """Origin and step of each axis's coordinates, which must be evenly spaced (rtol 1e-5 of a step)."""
    dims, origin, spacing = [], [], []
    for x, a in zip("xyz", axes):
        n = int(a.shape[0])
        if n < 2:
            raise MeshError(f"{cpath}values/{x}: expected at least 2 coordinates, got {n}")
        xp = arrays.get_array_module(a)
        a0, a1 = float(a[0]), float(a[-1])
        h = (a1 - a0) / (n - 1)
        if not (np.isfinite(h) and h > 0):
            raise MeshError(f"{cpath}values/{x}: coordinates must increase, got {a0} .. {a1}")
        err = float(xp.abs(a.astype(xp.float64) - (a0 + h * xp.arange(n))).max())
        if not err <= 1e-5 * h:
            raise _unsupported(f"{cpath}values/{x}", "unevenly spaced coordinates")
        dims.append(n)
        origin.append(a0)
        spacing.append(h)
    return tuple(dims), np.array(origin), np.array(spacing)


def _explicit(cs, cpath: str) -> list[tuple[str, Any]]:
    axes = [(x, _axis(v, f"{cpath}values/{x}")) for x, v in _cartesian(_get(cs, "values", cpath), f"{cpath}values")]
    n = {int(a.shape[0]) for _, a in axes}
    if len(n) > 1:
        raise MeshError(f"{cpath}values: the axes hold different numbers of points: "
                        f"{', '.join(f'{x} {a.shape[0]}' for x, a in axes)}")
    return axes


def _structured(topo, tpath: str, cs, cpath: str):
    dn = _get(_get(topo, "elements", tpath), "dims", f"{tpath}elements/")
    if not isinstance(dn, Mapping) or not ({"i", "j"} <= set(dn) <= set(_DIMS)):
        raise MeshError(f"{tpath}elements/dims: expected i, j[, k] cell counts")
    cells = [_number(dn[a], f"{tpath}elements/dims/{a}", positive=True, integer=True) for a in _DIMS[:len(dn)]]
    axes = _explicit(cs, cpath)
    if len(axes) != len(cells):
        raise MeshError(f"{tpath}elements/dims: {len(cells)}-D cells over {len(axes)}-D coordinates")
    nodes = [c + 1 for c in cells]
    if axes[0][1].shape[0] != int(np.prod(nodes)):
        raise MeshError(f"{cpath}values: expected {'x'.join(map(str, nodes))} = {int(np.prod(nodes))} points "
                        f"for {tpath}elements/dims, got {axes[0][1].shape[0]}")
    lines = []
    for ax, (x, a) in enumerate(axes):
        g = _ijk(a, tuple(nodes))
        line = g[(0,) * ax + (slice(None),) + (0,) * (len(nodes) - 1 - ax)]
        # Axis-aligned: coordinate x varies along i only (y along j, z along k).
        xp = arrays.get_array_module(a)
        shape = [1] * len(nodes)
        shape[ax] = nodes[ax]
        if not bool(xp.all(g == line.reshape(shape))):
            raise _unsupported(f"{cpath}values/{x}", "a structured grid that is not an axis-aligned lattice")
        lines.append(line)
    return _lattice(lines, cpath)


#: Nodes per cell of the fixed-size shapes; None: sized per cell.
_SHAPES: dict[str, int | None] = {"point": 1, "line": 2, "tri": 3, "quad": 4, "tet": 4, "hex": 8, "wedge": 6,
                                  "pyramid": 5, "polygonal": None, "polyhedral": None}


def _check_unstructured(topo, tpath: str, axes: list) -> str:
    """Validate an unstructured topology's elements; return its shape's name."""
    epath = f"{tpath}elements/"
    el = _get(topo, "elements", tpath)
    if isinstance(el, Mapping) and "stream" in el and "shape" not in el:
        raise _unsupported(epath.rstrip("/"), "the element stream form of mixed shapes (element_types, stream)")
    shape = _get(el, "shape", epath)
    poly = shape == "polyhedral" or (shape == "mixed" and "polyhedral" in _get(el, "shape_map", epath))
    if poly:  # cells are lists of faces: the faces (subelements) index the points
        _check_unstructured({"elements": _get(topo, "subelements", tpath)}, f"{tpath}sub", axes)
    conn = _int_array(_get(el, "connectivity", epath), f"{epath}connectivity")
    npts = int(axes[0][1].shape[0])
    if conn.size and not poly and (int(conn.min()) < 0 or int(conn.max()) >= npts):
        raise MeshError(f"{epath}connectivity: indices must lie in [0, {npts}), got {int(conn.min())} .. "
                        f"{int(conn.max())}")
    if shape == "mixed":
        smap = _map(_get(el, "shape_map", epath), f"{epath}shape_map/", "shape names to ids")
        for name in smap:
            if name not in _SHAPES:
                raise MeshError(f"{epath}shape_map/{name}: unknown shape; shapes: {', '.join(_SHAPES)}")
        ids = {_number(v, f"{epath}shape_map/{k}", integer=True) for k, v in smap.items()}
        shapes = _int_array(_get(el, "shapes", epath), f"{epath}shapes")
        bad = set(np.unique(arrays.to_host(shapes)).tolist()) - ids if shapes.size else set()
        if bad:
            raise MeshError(f"{epath}shapes: ids {sorted(bad)} are not in shape_map ({sorted(ids)})")
        return f"mixed {'/'.join(map(str, smap))}"
    if shape not in _SHAPES:
        raise MeshError(f"{epath}shape: expected one of {', '.join(_SHAPES)} or mixed, got {shape!r}")
    k = _SHAPES[shape]
    if k is not None and conn.size % k:
        raise MeshError(f"{epath}connectivity: {conn.size} indices is not a whole number of {shape}s "
                        f"({k} nodes each)")
    if k is None and "sizes" not in el and "offsets" not in el:
        raise MeshError(f"{epath}sizes: missing ({shape} cells need their sizes or offsets)")
    return str(shape)


def _int_array(v, path: str):
    a = _array(v, path)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise MeshError(f"{path}: expected a 1-D integer array, got {'x'.join(map(str, a.shape))} {a.dtype}")
    return a


def _check_adjsets(adjsets, topos: Mapping, path: str) -> None:
    """Adjacency sets are read and checked, not used: ghosts come from the ghost field, and
    blocks that share their boundary nodes meet without cracks."""
    for name, a in _map(adjsets, path, "adjacency sets").items():
        apath = f"{path}{name}/"
        assoc = _get(a, "association", apath)
        if assoc not in ("vertex", "element"):
            raise MeshError(f"{apath}association: expected 'vertex' or 'element', got {assoc!r}")
        t = _get(a, "topology", apath)
        if t not in topos:
            raise MeshError(f"{apath}topology: names {t!r}; topologies: {', '.join(map(str, topos))}")
        for gname, g in _map(_get(a, "groups", apath), f"{apath}groups/", "groups").items():
            for key in ("neighbors", "values"):
                v = _get(g, key, f"{apath}groups/{gname}/")
                if not isinstance(v, (int, np.integer)):
                    _int_array(v, f"{apath}groups/{gname}/{key}")


# --------------------------------------------------------------------------- fields


def _field(fields: dict, name: str, f, fpath: str, tname: str, dims: tuple, cdims: tuple) -> None:
    """Add field `name` (an mcarray: the vector and its components) to `fields`."""
    if "matset" in _get_map(f, fpath):
        raise _unsupported(f"{fpath}matset", "per-material field values")
    assoc = _get(f, "association", fpath)
    if assoc not in ("vertex", "element"):
        raise MeshError(f"{fpath}association: expected 'vertex' or 'element', got {assoc!r}")
    if f.get("topology", tname) != tname:
        raise MeshError(f"{fpath}topology: names {f['topology']!r}, the topology is {tname!r}")
    shape = dims if assoc == "vertex" else cdims
    v = _get(f, "values", fpath)
    if not isinstance(v, Mapping):
        values = _values(v, shape, f"{fpath}values")
        ranges = f.get("tile_ranges")
        if ranges is not None:
            ranges = _tile_ranges(ranges, assoc, values, f"{fpath}tile_ranges")
        fields[name] = Field(assoc, values, ranges)
        return
    if not v:
        raise MeshError(f"{fpath}values: an mcarray without components")
    if f.get("tile_ranges") is not None:
        raise MeshError(f"{fpath}tile_ranges: only scalar vertex fields carry tile ranges, this one is an mcarray")
    comps = {}
    for c, a in v.items():
        if isinstance(a, Mapping):
            raise MeshError(f"{fpath}values/{c}: expected an array (an mcarray component), got a map")
        comps[str(c)] = _values(a, shape, f"{fpath}values/{c}")
    for c, a in comps.items():
        if f"{name}/{c}" in fields or c == "magnitude":
            raise MeshError(f"{fpath}values/{c}: field {name}/{c} exists already")
        fields[f"{name}/{c}"] = Field(assoc, a)
    fields[f"{name}/magnitude"] = VectorField(assoc, comps)


def _get_map(f, fpath: str) -> Mapping:
    if not isinstance(f, Mapping):
        raise MeshError(f"{fpath.rstrip('/')}: expected a map (association, topology, values), "
                        f"got {type(f).__name__}")
    return f


def _array(v, path: str, want: str = "an"):
    if isinstance(v, np.ma.MaskedArray):
        raise MeshError(f"{path}: a masked array (numpy.ma): its mask would be dropped; fill the masked "
                        "samples (.filled(...)) or mark ghost cells with a ghost field")
    try:
        return arrays.asarray(v, name=path)
    except arrays.DeviceUnavailableError as e:
        raise MeshError(str(e)) from None
    except TypeError:
        raise MeshError(f"{path}: expected {want} array (NumPy, CuPy, __cuda_array_interface__ or "
                        f"DLPack), got {type(v).__name__}") from None


def _values(v, shape: tuple, path: str):
    """`v` as an array of `shape` (a flat one: Conduit's order, i fastest; always a view),
    of any integer or float dtype: kept as given, kernels convert what they cannot read
    (float16, 64-bit integers) on the array's own device."""
    a = _array(v, path, f"a {'x'.join(map(str, shape))}")
    if a.ndim == 1 and a.size == _size(shape):
        a = _ijk(a, shape)
    if tuple(a.shape) != tuple(shape) or a.dtype.kind not in "iuf":
        raise MeshError(f"{path}: expected {'x'.join(map(str, shape))} float32/float64 (or integer), "
                        f"got {'x'.join(map(str, a.shape))} {a.dtype}")
    return a


def _ijk(a, shape: tuple):
    """A flat array in Conduit's order (i fastest) as an ``[i, j, k]`` view of `shape`
    (built from its stride: never a copy, whatever its flags say)."""
    if arrays.is_device_array(a):
        return a.reshape(shape[::-1]).transpose()
    s = a.strides[0] if a.shape[0] > 1 else a.itemsize
    strides = tuple(s * _size(shape[:n]) for n in range(len(shape)))
    return np.lib.stride_tricks.as_strided(a, shape, strides)


def _size(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _intersect(a, b, what: str):
    lo = tuple(max(x, y) for x, y in zip(a[0], b[0]))
    hi = tuple(min(x, y) for x, y in zip(a[1], b[1]))
    if any(h <= low for low, h in zip(lo, hi)):
        raise MeshError(f"{what}: every cell is a ghost")
    return lo, hi


def _tile_ranges(obj, association: str, values, path: str) -> TileRanges:
    if association != "vertex":
        raise MeshError(f"{path}: only vertex fields carry tile ranges, this field is {association}-associated")
    try:
        return as_tile_ranges(obj, values.shape, values, name=path)
    except arrays.DeviceUnavailableError as e:
        raise MeshError(str(e)) from None
    except (TypeError, ValueError) as e:
        raise MeshError(str(e) if str(e).startswith(path) else f"{path}: {e}") from None


_box_cache: dict = {}  # (id(ghost array), ghost bits) -> (weak reference, box)


def _real_box(g, path: str, bits: int | None = None):
    """The box of real cells, read once per ghost array *object* (a weak reference ties
    the entry to the array, so a new array at a recycled address is read afresh; rewrite
    a ghost array in place and the old box stays: hand a new array instead)."""
    key = (id(g), bits)
    hit = _box_cache.get(key)
    if hit is not None and hit[0]() is g:
        return hit[1]
    box = _find_real_box(g, path, bits)
    try:
        ref = weakref.ref(g, lambda _: _box_cache.pop(key, None))
    except TypeError:  # an array type without weak references: no caching
        return box
    _box_cache[key] = (ref, box)
    return box


def _find_real_box(g, path: str, bits: int | None):
    xp = arrays.get_array_module(g)
    real = g == 0 if bits is None else (g & bits) == 0
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
