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
way, without copying its arrays (keep the node alive while its domains are used: they are
views of its memory). Values are any host or device array (:func:`insitu.arrays.asarray`:
never copied), or an xarray ``DataArray`` (duck-typed: ``dims`` and ``data``; its ``data``
is taken, never ``values``; axes named ``x, y, z`` or ``i, j, k`` in another order are
transposed into that order, a view). Any integer or float dtype (float16 and uint64
included) is kept as given; the kernels convert what they do not read directly. Masked
arrays are refused (their mask would be lost).

Two kinds of domain come back:

- :class:`MeshDomain`, a uniform 3-D grid: ``uniform`` topologies, and 3-D
  ``rectilinear`` and ``structured`` ones whose coordinates are an evenly spaced
  axis-aligned lattice (within 1e-5 of a step). Field values are of shape ``(nx, ny, nz)``
  (vertex) or ``(nx-1, ny-1, nz-1)`` (element), indexed ``[i, j, k]`` in any memory order;
  a flat array is read as Conduit stores it (``i`` fastest). The real cells must form a
  box (ghosts around them).
- :class:`CellDomain`, points and cells (:class:`render.cells.CellMesh`, VTK's cell types
  and node order, which are Blueprint's: Conduit's face tables wind outward on VTK's
  positive cells, so the connectivity is taken as given), with ``parse(..., cells=True)``
  only (without it these are refused ``not supported yet`` with their path, until the
  pipelines take them): unevenly spaced rectilinear and curvilinear structured grids
  (hexahedra; quads in 2-D), every 2-D grid, ``unstructured`` topologies of one shape
  (point, line, tri, quad, tet, hex, wedge, pyramid; polygonal with ``sizes`` and/or
  ``offsets``), ``mixed`` ones (``shape_map`` names -> VTK codes, the ``shapes`` ids mapped
  through it; offsets from ``offsets``, ``sizes`` or the shapes' sizes), named groups of
  elements and Conduit's (deprecated) element stream form, and ``points`` topologies (one
  VERTEX cell per point). Field values are 1-D, ``(n_points,)`` or ``(n_cells,)`` in
  Blueprint's order, views of the input (on a grid, an ``[i, j, k]`` array laid out ``i``
  fastest, i.e. Fortran order, is taken as its flat view; one laid out otherwise is
  refused, as reading it would copy it). Ghosts are an ``(n_cells,)`` bool mask, any
  cells. Copies: the points, stacked into one ``(n, 3)`` array (the only copy of the
  coordinates; grids' connectivity is generated); the connectivity is the input's unless
  its dtype is under 32 bits or uint64, or its cells do not follow each other. With
  fields on the device and the topology on the host (a ``conduit.Node``'s), the mesh is
  built on the device with one :func:`insitu.arrays.to_device` per array: 1 for grids and
  points topologies (their coordinates, packed), 2 for one fixed-size shape (points,
  connectivity), 3 for polygons (and their offsets), 4 for mixed shapes (and their
  types); none when the topology is on the device already.

What is read:

- coordsets ``uniform`` (spacing ``dx/dy/dz`` or ``x/y/z``, origin ``x/y/z`` or
  ``i/j/k``; unknown or non-Cartesian axis names are errors), ``rectilinear`` and
  ``explicit`` (axes ``x, y[, z]``), 2-D and 3-D;
- topologies: all of Blueprint's, as above. Refused with a clear error and the path:
  polyhedral cells (``polyhedral cells are not supported by the filters``), strided
  structured windows (``elements/dims/offsets``, ``strides``), 1-D meshes, ``matsets``,
  ``specsets`` and ``nestsets``. A domain may hold several topologies: the one its fields
  name is read (fields on several are refused). ``adjsets`` are checked and not needed
  (ghosts come from the ghost field);
- ghosts: the element field ``ascent_ghosts`` (the adaptor's ``ghost_field``; non-zero =
  ghost) and ``vtkGhostType`` (VTK's bits: DUPLICATECELL or HIDDENCELL = ghost); without
  ghosts every cell is real;
- ``mcarray`` fields (values ``{x, y, z}``, ``{u, v, w}`` or any component names;
  separate arrays, or views of one interleaved array) become scalar fields: ``<name>/<c>``
  for each component (views, as the Catalyst adaptor names them) and ``<name>/magnitude``,
  a :class:`VectorField` holding the components, whose values (the magnitude) are
  computed when first read. Filters that take a scalar take any of them.

A vertex field may carry its per-tile value ranges beside its values,
``"tile_ranges": {"span": [si, sj, sk], "values": ...}`` (or an
:class:`insitu.ranges.TileRanges`; see :func:`insitu.ranges.as_tile_ranges`), which its
contours pass to marching cubes so that only tiles a level can cross are read.
:func:`uniform` builds such a dict (only uniform grids' fields carry tile ranges), and
:func:`unstructured` one of points and cells; both pass ``conduit.blueprint.mesh.verify``.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping
from typing import Any, Callable, Literal, Sequence, overload

import numpy as np

from insitu import arrays
from insitu.ranges import TileRanges, as_tile_ranges
from render.cells import SHAPE_TYPES, VERTEX, CellMesh, cell_mesh, grid_cells

from .errors import MeshError

__all__ = ["CellDomain", "MeshDomain", "Field", "VectorField", "parse", "uniform", "unstructured"]


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


@dataclasses.dataclass
class CellDomain:
    """One Blueprint domain read as points and cells (:class:`render.cells.CellMesh`):
    every topology that is not a 3-D uniform grid (see :func:`parse`).

    Attributes
    ----------
    mesh : CellMesh
        Points (n_points, 3) and cells in VTK's types and node order, on the fields'
        backend.
    fields : dict of Field
        ``values`` 1-D: (n_points,) vertex or (n_cells,) element, views of the input.
    ghosts : (n_cells,) bool array or None
        True for ghost cells (from the ghost field or ``vtkGhostType``); None: none.
    dim : int
        2 or 3: the coordinates' dimension (2-D meshes have z = 0).
    topology : str
        The Blueprint topology read.
    axes : (x, y, z) 1-D arrays or None
        For a 3-D rectilinear grid, its coordinates as given (volume plots ray cast the
        grid directly); None for other meshes, and once a filter has made new cells.

    Notes
    -----
    With device fields and a host topology, the mesh's arrays were uploaded once each by
    :func:`parse` (see the module's docstring for the count); the filters never copy them
    again.
    """

    domain_id: int
    mesh: CellMesh
    fields: dict[str, Field]
    ghosts: Any = None
    dim: int = 3
    topology: str = "mesh"
    axes: tuple | None = None

    @property
    def box(self) -> np.ndarray:
        """World box of the points: (x0, x1, y0, y1, z0, z1) (six scalar reads on a device)."""
        p = self.mesh.points
        if p.shape[0] == 0:
            return np.array([np.inf, -np.inf] * 3)
        both = arrays.get_array_module(p).stack([p.min(axis=0), p.max(axis=0)], axis=1).ravel()
        return np.array(arrays.scalars_to_host(both), np.float64)

    def field(self, name: str) -> Field:
        f = self.fields.get(name)
        if f is None:
            raise MeshError(f"domain {self.domain_id}: no field {name!r}; fields: {', '.join(sorted(self.fields))}")
        return f

    def vertex_array(self, name: str):
        """Field `name` at every point (element fields recentred: each point the mean of its cells)."""
        f = self.field(name)
        if f.association == "vertex":
            return f.values
        from render.cells.fields import cell_to_point

        return cell_to_point(self.mesh, f.values)

    def real_values(self, name: str):
        """Field `name` over the real part: every point, or the cells that are not ghosts."""
        f = self.field(name)
        if f.association == "vertex" or self.ghosts is None:
            return f.values
        return f.values[~self.ghosts]


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


@overload
def parse(mesh, *, ghost_field: str = ..., cells: Literal[False] = ...) -> list[MeshDomain]: ...
@overload
def parse(mesh, *, ghost_field: str = ..., cells: bool) -> list[MeshDomain | CellDomain]: ...


def parse(mesh, *, ghost_field: str = "ascent_ghosts", cells: bool = False) -> list:
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
    cells : bool
        Read the topologies that are not 3-D uniform grids as :class:`CellDomain`; without
        it (the pipelines' default until they take cells) they are refused with
        ``not supported yet`` and their path.

    Returns
    -------
    list of MeshDomain or CellDomain
        :class:`MeshDomain` for uniform grids (uniform topologies, and 3-D rectilinear and
        structured ones whose coordinates are an evenly spaced axis-aligned lattice within
        1e-5 of a step); :class:`CellDomain` for the rest (`cells` only).

    Raises
    ------
    MeshError
        Naming the path at fault: ``"domain 1/fields/T/values: expected 17x17x9 float32
        or float64..., got 16x17x9 float32"``; well-formed meshes the filters cannot draw
        (polyhedral cells, matsets, specsets, nestsets; without `cells`, every
        :class:`CellDomain`) with what is not supported.
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
    out = [_domain(m, p, i, ghost_field, cells) for i, (p, m) in enumerate(items)]
    ids = [d.domain_id for d in out]
    if len(set(ids)) != len(ids):
        raise MeshError(f"mesh: domains repeat state/domain_id: {ids}")
    kinds = {arrays.backend_of(a) for d in out for f in d.fields.values()
             for a in (f.components.values() if f.components else (f.values,))}
    kinds |= {arrays.backend_of(d.mesh.points) for d in out if isinstance(d, CellDomain)}
    if len(kinds) > 1:
        raise MeshError("mesh: fields (or coordinates) mix host and device arrays; hand all of one rank's "
                        "fields in one memory space")
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


def _unsupported(path: str, what: str, hint: str = "") -> MeshError:
    return MeshError(f"{path}: {what}: not supported yet{hint}")


#: Why a mesh that reads as cells is refused without ``parse(..., cells=True)``.
_CELLS_HINT = (" (the pipelines draw 3-D uniform grids, and rectilinear and structured ones whose coordinates are "
               "an evenly spaced axis-aligned lattice; adaptors.mesh.parse(..., cells=True) reads this one as "
               "cells)")


# --------------------------------------------------------------------------- domains


def _domain(m, p: str, index: int, ghost_field: str, cells: bool) -> MeshDomain | CellDomain:
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
    read = _topology(_get(topo, "type", tpath), topo, tpath, coordsets[csname], cpath, cells)
    if isinstance(read, _Cells) and not cells:
        raise _unsupported(read.path, read.what, _CELLS_HINT)
    if "adjsets" in m:
        _check_adjsets(m["adjsets"], topos, f"{p}adjsets/")
    state = m.get("state", {}) or {}
    did = _number(state.get("domain_id", index), f"{p}state/domain_id", integer=True)
    if isinstance(read, _Cells):
        return _cell_domain(did, read, given, p, tname, ghost_field)
    dims, origin, spacing = read
    fields: dict[str, Field] = {}
    cdims = tuple(n - 1 for n in dims)
    for name, f in given.items():
        fpath = f"{p}fields/{name}/"
        _field(fields, str(name), f, fpath, tname,
               lambda v, assoc, path: _values(v, dims if assoc == "vertex" else cdims, path), ranges=True)
    cells_box = ((0, 0, 0), cdims)
    for gname, bits in ((ghost_field, None), (_VTK_GHOSTS, _VTK_HIDDEN)):
        g = _ghost_field(fields, gname, bits, f"{p}fields/{gname}/")
        if g is not None:
            box = _real_box(g, f"{p}fields/{gname}/values", bits)
            cells_box = _intersect(cells_box, box, f"{p}fields: {gname}")
    return MeshDomain(did, dims, origin, spacing, fields, cells_box)


def _ghost_field(fields: dict, gname: str, bits: int | None, gpath: str):
    """Remove ghost field `gname` from `fields`; return its values (None if absent)."""
    g = fields.pop(gname, None)
    if g is None:
        return None
    if g.association != "element" or g.components:
        raise MeshError(f"{gpath}association: the ghost field must be an element-associated scalar "
                        f"(ghost points are not supported yet), got {g.association}")
    if bits is not None and g.values.dtype.kind not in "iu":
        raise MeshError(f"{gpath}values: vtkGhostType holds VTK's ghost bits: expected integers, "
                        f"got {g.values.dtype}")
    return g.values


def _cell_domain(did: int, read: _Cells, given: Mapping, p: str, tname: str, ghost_field: str) -> CellDomain:
    fields: dict[str, Field] = {}
    for name, f in given.items():
        _field(fields, str(name), f, f"{p}fields/{name}/", tname,
               lambda v, assoc, path: _cell_values(v, read.n_points if assoc == "vertex" else read.n_cells,
                                                    read.grid, assoc, path), ranges=False)
    device = any(arrays.is_device_array(a) for f in fields.values()  # the ghost fields too
                 for a in (f.components.values() if f.components else (f.values,)))
    ghosts = None
    for gname, bits in ((ghost_field, None), (_VTK_GHOSTS, _VTK_HIDDEN)):
        g = _ghost_field(fields, gname, bits, f"{p}fields/{gname}/")
        if g is not None:
            mask = g != 0 if bits is None else (g & bits) != 0
            ghosts = mask if ghosts is None else ghosts | mask
    try:
        mesh = read.build(device)
    except ValueError as e:  # render.cells' checks of what the topology holds
        raise MeshError(f"{read.path}: {e}") from None
    return CellDomain(did, mesh, fields, ghosts, read.dim, tname, read.axes)


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


@dataclasses.dataclass
class _Cells:
    """A topology read as cells, built once its fields tell the backend (`build(device)`)."""

    path: str  # where the refusal points without parse(..., cells=True)
    what: str
    dim: int  # of the coordinates
    n_points: int
    n_cells: int
    grid: tuple | None  # node counts (i, j[, k]) of a structured grid: fields may come [i, j, k]-shaped
    build: Callable[[bool], CellMesh]
    axes: tuple | None = None  # a 3-D rectilinear grid's coordinates, as given (volume plots ray cast it)


def _topology(ttype, topo, tpath: str, cs, cpath: str, cells: bool) -> tuple | _Cells:
    """(dims, origin, spacing) of a 3-D uniform grid, or the :class:`_Cells` of any other
    topology over coordset `cs` (`cells`: to be built, which checks the connectivity's ids)."""
    kinds = _TOPOLOGY_COORDS.get(ttype)
    if kinds is None:
        raise MeshError(f"{tpath}type: expected one of {', '.join(_TOPOLOGY_COORDS)}, got {ttype!r}")
    ctype = _get(cs, "type", cpath)
    if ctype not in kinds:
        raise MeshError(f"{cpath}type: a {ttype} topology ({tpath.rstrip('/')}) needs a "
                        f"{' or '.join(kinds)} coordset, got {ctype!r}")
    two_d = (cpath.rstrip("/"), "a 2-D mesh (the filters contour and ray cast 3-D cells)")
    if ttype == "points":
        return _point_cells(ctype, cs, tpath, cpath)
    if ttype == "unstructured":
        return _unstructured_cells(topo, tpath, _explicit(cs, cpath), check=not cells)
    if ttype == "uniform":
        dims, origin, spacing = _uniform_coords(cs, cpath)
        _one_cell(dims, f"{cpath}dims")
        if len(dims) == 3:
            return dims, origin, spacing
        return _grid_cells(_uniform_axes(dims, origin, spacing), None, dims, *two_d)
    if ttype == "rectilinear":
        axes = [_axis(a, f"{cpath}values/{x}") for x, a in _cartesian(_get(cs, "values", cpath), f"{cpath}values")]
        lattice, uneven = _lattice(axes, cpath)
        dims = tuple(int(a.shape[0]) for a in axes)
        if lattice is not None and len(axes) == 3:
            return lattice
        read = _grid_cells(axes, None, dims, *(two_d if uneven is None else uneven))
        return dataclasses.replace(read, axes=tuple(axes)) if len(axes) == 3 else read
    dims, flat, lattice, curved = _structured(topo, tpath, cs, cpath)
    if lattice is not None and len(dims) == 3:
        return lattice
    return _grid_cells(None, flat, dims, *(two_d if curved is None else curved))


def _one_cell(dims: tuple, path: str) -> None:
    if min(dims) < 2:
        raise MeshError(f"{path}: every axis needs at least 2 nodes (one cell), got {dims}")


def _uniform_axes(dims: tuple, origin, spacing) -> list:
    return [o + h * np.arange(n, dtype=np.float64) for n, o, h in zip(dims, origin, spacing)]


def _grid_cells(axes: list | None, flat: list | None, dims: tuple, path: str, what: str) -> _Cells:
    """A structured grid's cells from its 1-D `axes` (rectilinear) or its points' `flat`
    coordinates (curvilinear, Conduit's order: i fastest)."""

    def build(device: bool) -> CellMesh:
        arrs = list(axes if axes is not None else flat)  # type: ignore[arg-type]
        if device and not all(arrays.is_device_array(a) for a in arrs):
            # One upload for all the coordinates; the cells are numbered on the device.
            dt = np.result_type(*[a.dtype for a in arrs], np.float32)
            host = [arrays.to_host(a).astype(dt, copy=False) for a in arrs]
            buf = arrays.to_device(np.concatenate(host))
            ends = np.cumsum([a.shape[0] for a in host])
            arrs = [buf[e - a.shape[0]:e] for a, e in zip(host, ends)]
        if axes is None:
            arrs = [_ijk(a, dims) for a in arrs]
        return grid_cells(*arrs)

    n_cells = _size(tuple(n - 1 for n in dims))
    return _Cells(path, what, len(dims), _size(dims), n_cells, dims, build)


def _points(axes: list):
    """The (n, 3) points of per-axis coordinates (2-D: z = 0): one copy, on their backend."""
    xp = arrays.get_array_module(axes[0])
    dt = np.result_type(*[a.dtype for a in axes], np.float32)
    pts = xp.zeros((int(axes[0].shape[0]), 3), dt)
    for i, a in enumerate(axes):
        pts[:, i] = a
    return pts


def _point_cells(ctype: str, cs, tpath: str, cpath: str) -> _Cells:
    """A points topology: one VERTEX cell per point of the coordset."""
    if ctype == "explicit":
        axes = [a for _, a in _explicit(cs, cpath)]
    else:
        if ctype == "uniform":
            dims, origin, spacing = _uniform_coords(cs, cpath)
            lines = _uniform_axes(dims, origin, spacing)
        else:
            lines = [_axis(a, f"{cpath}values/{x}") for x, a in
                     _cartesian(_get(cs, "values", cpath), f"{cpath}values")]
        xp = arrays.get_array_module(lines[0])
        # every node of the lattice, numbered as Blueprint numbers them (i fastest)
        axes = [g.ravel(order="F") for g in xp.meshgrid(*lines, indexing="ij")]
    n = int(axes[0].shape[0])

    def build(device: bool) -> CellMesh:
        pts = _points(axes)
        if device:
            pts = arrays.to_device(pts)  # the one upload: the ids are made where the points are
        return cell_mesh(pts, arrays.get_array_module(pts).arange(n, dtype=np.int64), VERTEX)

    return _Cells(tpath.rstrip("/"), "a points topology", len(axes), n, n, None, build)


def _on_backend(m: CellMesh, device: bool) -> CellMesh:
    """`m` (checked where it was built), its arrays uploaded once each when `device`."""
    if not device or arrays.is_device_array(m.points):
        return m
    return CellMesh(*(arrays.to_device(a) for a in (m.points, m.connectivity, m.offsets, m.types)))


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
    a = _one_d(_array(v, path))
    if a.ndim != 1 or a.shape[0] < 1 or a.dtype.kind not in "iuf":
        raise MeshError(f"{path}: expected a 1-D array of numbers, got {'x'.join(map(str, a.shape))} {a.dtype}")
    return a


def _lattice(axes: list, cpath: str) -> tuple[tuple | None, tuple[str, str] | None]:
    """``((dims, origin, spacing), None)`` when every axis is evenly spaced (rtol 1e-5 of a
    step), else ``(None, (path, what))`` of the first uneven one; coordinates must increase."""
    dims, origin, spacing = [], [], []
    uneven = None
    for x, a in zip("xyz", axes):
        n = int(a.shape[0])
        if n < 2:
            raise MeshError(f"{cpath}values/{x}: expected at least 2 coordinates, got {n}")
        xp = arrays.get_array_module(a)
        a0, a1 = float(a[0]), float(a[-1])
        h = (a1 - a0) / (n - 1)
        if not (np.isfinite(h) and h > 0) or not bool((a[1:] > a[:-1]).all()):
            raise MeshError(f"{cpath}values/{x}: coordinates must increase, got {a0} .. {a1}")
        err = float(xp.abs(a.astype(xp.float64) - (a0 + h * xp.arange(n))).max())
        if not err <= 1e-5 * h and uneven is None:
            uneven = (f"{cpath}values/{x}", "unevenly spaced coordinates")
        dims.append(n)
        origin.append(a0)
        spacing.append(h)
    if uneven is not None:
        return None, uneven
    return (tuple(dims), np.array(origin), np.array(spacing)), None


def _explicit(cs, cpath: str) -> list[tuple[str, Any]]:
    axes = [(x, _axis(v, f"{cpath}values/{x}")) for x, v in _cartesian(_get(cs, "values", cpath), f"{cpath}values")]
    n = {int(a.shape[0]) for _, a in axes}
    if len(n) > 1:
        raise MeshError(f"{cpath}values: the axes hold different numbers of points: "
                        f"{', '.join(f'{x} {a.shape[0]}' for x, a in axes)}")
    return axes


def _structured(topo, tpath: str, cs, cpath: str):
    """``(node dims, flat coordinates, lattice or None, (path, what) or None)`` of a
    structured topology: the lattice when its points are an evenly spaced axis-aligned one."""
    dn = _get(_get(topo, "elements", tpath), "dims", f"{tpath}elements/")
    if isinstance(dn, Mapping) and ({"offsets", "strides"} & set(dn)):
        raise _unsupported(f"{tpath}elements/dims", "a strided structured window (offsets, strides)")
    if not isinstance(dn, Mapping) or not ({"i", "j"} <= set(dn) <= set(_DIMS)):
        raise MeshError(f"{tpath}elements/dims: expected i, j[, k] cell counts")
    cells = [_number(dn[a], f"{tpath}elements/dims/{a}", positive=True, integer=True) for a in _DIMS[:len(dn)]]
    axes = _explicit(cs, cpath)
    if len(axes) != len(cells):
        raise MeshError(f"{tpath}elements/dims: {len(cells)}-D cells over {len(axes)}-D coordinates")
    nodes = tuple(c + 1 for c in cells)
    if axes[0][1].shape[0] != _size(nodes):
        raise MeshError(f"{cpath}values: expected {'x'.join(map(str, nodes))} = {_size(nodes)} points "
                        f"for {tpath}elements/dims, got {axes[0][1].shape[0]}")
    flat = [a for _, a in axes]
    lines = []
    for ax, (x, a) in enumerate(axes):
        g = _ijk(a, nodes)
        line = g[(0,) * ax + (slice(None),) + (0,) * (len(nodes) - 1 - ax)]
        # Axis-aligned: coordinate x varies along i only (y along j, z along k).
        xp = arrays.get_array_module(a)
        shape = [1] * len(nodes)
        shape[ax] = nodes[ax]
        if not bool(xp.all(g == line.reshape(shape))):
            return nodes, flat, None, (f"{cpath}values/{x}", "a structured grid that is not an axis-aligned lattice")
        lines.append(line)
    increasing = all(bool((ln[1:] > ln[:-1]).all()) for ln in lines)
    if not increasing:  # a mirrored lattice: read as cells, as given
        return nodes, flat, None, (cpath.rstrip("/"), "a lattice whose coordinates decrease")
    lattice, uneven = _lattice(lines, cpath)
    return nodes, flat, lattice, uneven


#: Nodes per cell of the fixed-size shapes; None: sized per cell.
_SHAPES: dict[str, int | None] = {"point": 1, "line": 2, "tri": 3, "quad": 4, "tet": 4, "hex": 8, "wedge": 6,
                                  "pyramid": 5, "polygonal": None, "polyhedral": None}


def _check_elements(el, epath: str, axes: list, topo, tpath: str, check: bool = True) -> tuple[str, Any]:
    """Validate elements of one shape or of ``mixed`` ones (shape_map, shapes); return the
    shape's name and, for mixed ones, each cell's VTK code (0 where polyhedral). The
    connectivity's ids are checked here where `check` (else by the mesh built from them)."""
    shape = _get(el, "shape", epath)
    poly = shape == "polyhedral" or (shape == "mixed" and "polyhedral" in _get(el, "shape_map", epath))
    if poly:  # cells are lists of faces: the faces (subelements) index the points
        sub = _get(topo, "subelements", tpath)
        _check_elements(sub, f"{tpath}subelements/", axes, {}, tpath)
    conn = _int_array(_get(el, "connectivity", epath), f"{epath}connectivity")
    npts = int(axes[0][1].shape[0])
    if check and conn.size and not poly and (int(conn.min()) < 0 or int(conn.max()) >= npts):
        raise MeshError(f"{epath}connectivity: indices must lie in [0, {npts}), got {int(conn.min())} .. "
                        f"{int(conn.max())}")
    if shape == "mixed":
        smap = _map(_get(el, "shape_map", epath), f"{epath}shape_map/", "shape names to ids")
        for name in smap:
            if name not in _SHAPES:
                raise MeshError(f"{epath}shape_map/{name}: unknown shape; shapes: {', '.join(_SHAPES)}")
        ids = {int(_number(v, f"{epath}shape_map/{k}", integer=True)): str(k) for k, v in smap.items()}
        if len(ids) != len(smap):
            raise MeshError(f"{epath}shape_map: two shapes share an id")
        shapes = _int_array(_get(el, "shapes", epath), f"{epath}shapes")
        return f"mixed {'/'.join(map(str, smap))}", _shape_codes(shapes, ids, f"{epath}shapes")
    if shape not in _SHAPES:
        raise MeshError(f"{epath}shape: expected one of {', '.join(_SHAPES)} or mixed, got {shape!r}")
    k = _SHAPES[shape]
    if k is not None and conn.size % k and "sizes" not in el and "offsets" not in el:
        raise MeshError(f"{epath}connectivity: {conn.size} indices is not a whole number of {shape}s "
                        f"({k} nodes each)")
    if k is None and "sizes" not in el and "offsets" not in el:
        raise MeshError(f"{epath}sizes: missing ({shape} cells need their sizes or offsets)")
    return str(shape), None


def _shape_codes(shapes, ids: dict[int, str], path: str):
    """Each cell's VTK code (polyhedral: 0) from its Blueprint shape id, by one lookup in a
    table over the ids' range (searchsorted where that range is huge)."""
    xp = arrays.get_array_module(shapes)
    keys = np.array(sorted(ids), np.int64)
    codes = np.array([SHAPE_TYPES.get(ids[i], 0) for i in keys], np.uint8)
    s = shapes.astype(np.int64, copy=False)
    lo, span = int(keys[0]), int(keys[-1] - keys[0]) + 1
    if span <= 1 << 16:
        table = np.full(span + 1, 255, np.uint8)  # the last entry: ids out of range
        table[keys - lo] = codes
        idx = s - lo
        idx = xp.where((idx < 0) | (idx >= span), span, idx)
        out = xp.asarray(table)[idx]
        if bool((out == 255).any()):
            bad = arrays.to_host(shapes[out == 255])
            raise MeshError(f"{path}: ids {sorted(set(bad.tolist()))} are not in shape_map ({sorted(ids)})")
        return out
    pos = xp.minimum(xp.searchsorted(xp.asarray(keys), s), keys.shape[0] - 1)
    known = xp.asarray(keys)[pos] == s
    if not bool(known.all()):
        bad = arrays.to_host(shapes[~known])
        raise MeshError(f"{path}: ids {sorted(set(bad.tolist()))} are not in shape_map ({sorted(ids)})")
    return xp.asarray(codes)[pos]


_POLYHEDRA = "polyhedral cells are not supported by the filters (cells bounded by polygon lists)"


def _unstructured_cells(topo, tpath: str, axes: list, *, check: bool) -> _Cells:
    """An unstructured topology: elements of one shape, ``mixed`` ones (``shape_map``,
    ``shapes``), named groups of elements, or the element stream form."""
    epath = f"{tpath}elements/"
    el = _get(topo, "elements", tpath)
    if isinstance(el, Mapping) and "shape" in el:
        conn, types, offsets, n_cells, label = _shaped(el, epath, axes, topo, tpath, check)
    elif isinstance(el, Mapping) and "element_types" in el:
        conn, types, offsets, n_cells, label = _stream(el, epath)
    elif isinstance(el, (Mapping, list)) and el:
        conn, types, offsets, n_cells, label = _groups(el, epath, axes, topo, tpath, check)
    else:
        raise MeshError(f"{epath.rstrip('/')}: expected a map with shape and connectivity (or groups of such "
                        f"maps, or element_types and stream), got {type(el).__name__}")
    what = f"an unstructured topology ({label} cells)"

    def build(device: bool) -> CellMesh:
        pts = _points([a for _, a in axes])
        arrs = [a for a in (pts, conn, types, offsets) if a is not None and not np.isscalar(a)]
        host = not any(arrays.is_device_array(a) for a in arrs)
        if host and not device:
            return cell_mesh(pts, conn, types, offsets)
        if host and not np.isscalar(types):
            # mixed shapes: checked on the host, where their types are, then the four arrays go up
            return _on_backend(cell_mesh(pts, conn, types, offsets), True)
        # one shape: points, connectivity (and polygons' offsets) go up once each; the types
        # (and fixed-size cells' offsets) are made on the device
        up = [a if a is None or np.isscalar(a) else arrays.to_device(a) for a in (pts, conn, types, offsets)]
        return cell_mesh(up[0], up[1], up[2], up[3])

    return _Cells(tpath.rstrip("/"), what, len(axes), int(axes[0][1].shape[0]), n_cells, None, build)


def _shaped(el, epath: str, axes: list, topo, tpath: str, check: bool):
    """(connectivity, types, CSR offsets or None, cells, label) of elements of one shape or
    of ``mixed`` shapes; types: a VTK code, or one per cell."""
    shape, mixed_types = _check_elements(el, epath, axes, topo, tpath, check)
    conn = _int_array(el["connectivity"], f"{epath}connectivity")
    xp = arrays.get_array_module(conn)
    if shape == "polyhedral":
        raise MeshError(f"{epath}shape: {_POLYHEDRA}")
    types: Any
    if shape.startswith("mixed"):
        types = mixed_types
        if types.size and bool((types == 0).any()):  # 0: the polyhedral id
            raise MeshError(f"{epath}shape_map/polyhedral: {_POLYHEDRA}")
        n_cells = int(types.shape[0])
        fixed = xp.asarray(_CELL_SIZES)[types.astype(np.int64)]
        conn, offsets = _csr(el, epath, conn, n_cells, fixed if bool((fixed > 0).all()) else None)
        return conn, types, offsets, n_cells, shape
    types = SHAPE_TYPES[shape]
    k = _SHAPES[shape]
    if k is not None and "sizes" not in el and "offsets" not in el:
        return conn, types, None, int(conn.shape[0]) // k, shape
    key = "sizes" if "sizes" in el else "offsets"
    n_cells = int(_int_array(el[key], f"{epath}{key}").shape[0])
    conn, offsets = _csr(el, epath, conn, n_cells, xp.full(n_cells, k, np.int64) if k else None)
    return conn, types, offsets, n_cells, shape


def _groups(el, epath: str, axes: list, topo, tpath: str, check: bool):
    """Named groups of elements (each of one shape or mixed), their cells one group after
    another: the connectivity is concatenated (a copy)."""
    items = list(el.items()) if isinstance(el, Mapping) else list(enumerate(el))
    conns, types, offs, labels = [], [], [], []
    base = 0
    for name, g in items:
        gpath = f"{epath}{name}/"
        if not isinstance(g, Mapping) or "shape" not in g:
            raise MeshError(f"{gpath.rstrip('/')}: expected a group of elements (shape, connectivity)")
        conn, t, off, n, label = _shaped(g, gpath, axes, topo, tpath, check)
        xp = arrays.get_array_module(conn)
        if off is None:
            k = int(_CELL_SIZES[t])
            off = xp.arange(0, n * k + 1, k, dtype=np.int64)
        conns.append(conn.astype(np.int64))
        types.append(xp.full(n, t, np.uint8) if np.isscalar(t) else t.astype(np.uint8))
        offs.append(off[:-1] + base)
        base += int(conn.shape[0])
        labels.append(label)
    xp = arrays.get_array_module(conns[0])
    offsets = xp.concatenate(offs + [xp.full(1, base, np.int64)])
    return (xp.concatenate(conns), xp.concatenate(types), offsets, int(offsets.shape[0]) - 1,
            "/".join(dict.fromkeys(labels)))


def _stream(el, epath: str):
    """Conduit's element stream form (deprecated there for shape_map and shapes): groups of
    cells of one shape (``element_index/stream_ids``), sized by ``element_counts`` or
    ``offsets`` (each group's first index in ``stream``, and optionally its end)."""
    tmap = {}
    for name, t in _map(_get(el, "element_types", epath), f"{epath}element_types/", "element types").items():
        tp = f"{epath}element_types/{name}/"
        shape = _get(t, "shape", tp)
        if shape not in SHAPE_TYPES or _SHAPES[shape] is None:
            raise MeshError(f"{tp}shape: the stream form takes shapes of fixed size "
                            f"({', '.join(s for s in SHAPE_TYPES if _SHAPES[s])}), got {shape!r}")
        tmap[_number(_get(t, "stream_id", tp), f"{tp}stream_id", integer=True)] = str(shape)
    ipath = f"{epath}element_index/"
    index = _get(el, "element_index", epath)
    sids = arrays.to_host(_int_array(_get(index, "stream_ids", ipath), f"{ipath}stream_ids")).astype(np.int64)
    stream = _int_array(_get(el, "stream", epath), f"{epath}stream")
    bad = sorted(set(sids.tolist()) - set(tmap))
    if bad:
        raise MeshError(f"{ipath}stream_ids: {bad} name no element_types stream_id ({sorted(tmap)})")
    k = np.array([_SHAPES[tmap[i]] for i in sids.tolist()], np.int64)
    code = np.array([SHAPE_TYPES[tmap[i]] for i in sids.tolist()], np.uint8)
    if "element_counts" in index:
        counts = arrays.to_host(_int_array(index["element_counts"], f"{ipath}element_counts")).astype(np.int64)
        if counts.shape != sids.shape:
            raise MeshError(f"{ipath}element_counts: expected {sids.shape[0]} entries (one per stream id), "
                            f"got {counts.shape[0]}")
    else:
        off = arrays.to_host(_int_array(_get(index, "offsets", ipath), f"{ipath}offsets")).astype(np.int64)
        ends = np.append(off[1:], stream.shape[0])[:sids.shape[0]]
        starts = off[:sids.shape[0]]
        spans = ends - starts
        if (starts.shape != sids.shape or (starts.size and starts[0] != 0) or bool((starts[1:] != ends[:-1]).any())
                or bool((spans % k).any())):
            raise MeshError(f"{ipath}offsets: expected each group's first index in stream, groups one after "
                            "another, each a whole number of cells")
        counts = spans // k
    sizes = np.repeat(k, counts)
    if int(sizes.sum()) != int(stream.shape[0]):
        raise MeshError(f"{epath}stream: the groups hold {int(sizes.sum())} indices, the stream {stream.shape[0]}")
    offsets = np.zeros(sizes.shape[0] + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    types = np.repeat(code, counts)
    if arrays.is_device_array(stream):
        types, offsets = arrays.to_device(types), arrays.to_device(offsets)
    return stream, types, offsets, int(sizes.shape[0]), "/".join(dict.fromkeys(tmap[i] for i in sids.tolist()))


#: Points per cell by VTK type code (0: sized per cell, or not a cell).
_CELL_SIZES = np.zeros(16, np.int64)
for _code, _k in ((SHAPE_TYPES[s], k) for s, k in _SHAPES.items() if s in SHAPE_TYPES):
    _CELL_SIZES[_code] = _k or 0


def _csr(el, epath: str, conn, n_cells: int, fixed):
    """Connectivity and its (n_cells + 1) CSR offsets from Blueprint's ``sizes`` and/or
    ``offsets`` (each cell's first index), or from `fixed` sizes; cells that do not follow
    each other in `conn` are gathered into a new connectivity (the only copy)."""
    xp = arrays.get_array_module(conn)
    sizes = _int_array(el["sizes"], f"{epath}sizes") if "sizes" in el else None
    starts = _int_array(el["offsets"], f"{epath}offsets") if "offsets" in el else None
    for name, a in (("sizes", sizes), ("offsets", starts)):
        if a is not None and a.shape[0] != n_cells:
            raise MeshError(f"{epath}{name}: expected {n_cells} entries (one per cell), got {a.shape[0]}")
    if sizes is None and starts is None:
        if fixed is None:
            raise MeshError(f"{epath}sizes: missing (cells of varying size need their sizes or offsets)")
        sizes = fixed
    if sizes is None and starts is not None:
        sizes = xp.diff(xp.concatenate([starts.astype(np.int64), xp.full(1, conn.shape[0], np.int64)]))
    sizes = arrays.asarray(sizes).astype(np.int64, copy=False)
    if n_cells and bool((sizes < 0).any()):
        raise MeshError(f"{epath}offsets: expected increasing offsets (each cell's first index)")
    offsets = xp.zeros(n_cells + 1, np.int64)
    xp.cumsum(sizes, out=offsets[1:])
    if starts is None or bool((starts == offsets[:-1]).all()):
        if int(offsets[-1]) != int(conn.shape[0]):
            raise MeshError(f"{epath}sizes: the cells hold {int(offsets[-1])} indices, the connectivity "
                            f"{int(conn.shape[0])}")
        return conn, offsets
    starts = starts.astype(np.int64)
    if bool((starts < 0).any()) or bool((starts + sizes > conn.shape[0]).any()):
        raise MeshError(f"{epath}offsets: cells reach past the connectivity ({int(conn.shape[0])} indices)")
    idx = xp.repeat(starts - offsets[:-1], sizes) + xp.arange(int(offsets[-1]), dtype=np.int64)
    return conn[idx], offsets


def _int_array(v, path: str):
    a = _one_d(_array(v, path))
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


def _field(fields: dict, name: str, f, fpath: str, tname: str, read: Callable[[Any, str, str], Any], *,
           ranges: bool) -> None:
    """Add field `name` (an mcarray: the vector and its components) to `fields`;
    ``read(values, association, path)`` checks and shapes each array."""
    if "matset" in _get_map(f, fpath):
        raise _unsupported(f"{fpath}matset", "per-material field values")
    assoc = _get(f, "association", fpath)
    if assoc not in ("vertex", "element"):
        raise MeshError(f"{fpath}association: expected 'vertex' or 'element', got {assoc!r}")
    if f.get("topology", tname) != tname:
        raise MeshError(f"{fpath}topology: names {f['topology']!r}, the topology is {tname!r}")
    v = _get(f, "values", fpath)
    if not isinstance(v, Mapping):
        values = read(v, assoc, f"{fpath}values")
        tr = f.get("tile_ranges")
        if tr is not None:
            if not ranges:
                raise MeshError(f"{fpath}tile_ranges: only fields of 3-D uniform grids carry tile ranges")
            tr = _tile_ranges(tr, assoc, values, f"{fpath}tile_ranges")
        fields[name] = Field(assoc, values, tr)
        return
    if not v:
        raise MeshError(f"{fpath}values: an mcarray without components")
    if f.get("tile_ranges") is not None:
        raise MeshError(f"{fpath}tile_ranges: only scalar vertex fields carry tile ranges, this one is an mcarray")
    comps = {}
    for c, a in v.items():
        if isinstance(a, Mapping):
            raise MeshError(f"{fpath}values/{c}: expected an array (an mcarray component), got a map")
        comps[str(c)] = read(a, assoc, f"{fpath}values/{c}")
    for c, a in comps.items():
        if f"{name}/{c}" in fields or c == "magnitude":
            raise MeshError(f"{fpath}values/{c}: field {name}/{c} exists already")
        fields[f"{name}/{c}"] = Field(assoc, a)
    fields[f"{name}/magnitude"] = VectorField(assoc, comps)


def _cell_values(v, n: int, grid: tuple | None, assoc: str, path: str):
    """`v` as a 1-D view of `n` values in Blueprint's order; on a structured grid, an
    ``[i, j(, k)]`` array laid out i fastest (Fortran order) is taken too, as its flat view."""
    a = _array(v, path, f"a ({n},)")
    if n == 1:
        a = _one_d(a)
    shape = None if grid is None else (grid if assoc == "vertex" else tuple(g - 1 for g in grid))
    if shape is not None and a.ndim == len(shape) and tuple(a.shape) == shape:
        t = a.transpose()
        if not t.flags.c_contiguous:
            raise MeshError(f"{path}: a {'x'.join(map(str, shape))} [i, j, k] array not laid out i fastest: "
                            "reading it in Blueprint's order would copy it; hand it flat (i fastest) or in "
                            "Fortran order (numpy.asfortranarray)")
        a = t.reshape(-1)
    if a.ndim != 1 or a.shape[0] != n or a.dtype.kind not in "iuf":
        want = f"{n}" + ("" if shape is None else f" (or {'x'.join(map(str, shape))} [i, j, k])")
        raise MeshError(f"{path}: expected {want} float or integer values for a {assoc} field, got "
                        f"{'x'.join(map(str, a.shape))} {a.dtype}")
    return a


def _get_map(f, fpath: str) -> Mapping:
    if not isinstance(f, Mapping):
        raise MeshError(f"{fpath.rstrip('/')}: expected a map (association, topology, values), "
                        f"got {type(f).__name__}")
    return f


def _array(v, path: str, want: str = "an"):
    if _is_data_array(v):
        return _data_array(v, path)
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


def _one_d(a):
    """A one-element array Conduit hands as a scalar (a node leaf of one value), as 1-D."""
    return a.reshape(1) if a.ndim == 0 else a


def _is_data_array(v) -> bool:
    """An xarray ``DataArray`` (duck-typed: ``dims`` and ``data``; its ``values`` may be a
    copy and is never read)."""
    return not isinstance(v, np.ndarray) and not arrays.is_device_array(v) and hasattr(v, "dims") \
        and hasattr(v, "data")


#: Dimension names a DataArray's axes are put in the order of (i fastest): x, y, z or i, j, k.
_NAMED_AXES = (("x", "y", "z"), ("i", "j", "k"))


def _data_array(v, path: str):
    """A DataArray's ``data`` (never ``values``, which may copy) as an array; axes named
    x/y/z or i/j/k in another order are transposed into that order (a view)."""
    d = v.data
    if isinstance(d, np.ma.MaskedArray) or _is_data_array(d):
        return _array(d, path)
    try:
        a = arrays.asarray(d, name=path)
    except arrays.DeviceUnavailableError as e:
        raise MeshError(str(e)) from None
    except TypeError:
        raise MeshError(f"{path}: a DataArray holding {type(d).__module__}.{type(d).__name__}, not an array "
                        "(NumPy, CuPy, __cuda_array_interface__ or DLPack); a lazy (dask) one needs .compute() "
                        "first") from None
    names = tuple(str(n) for n in v.dims)
    if len(names) == a.ndim > 1:
        for order in _NAMED_AXES:
            want = order[:len(names)]
            if set(names) == set(want) and names != want:
                return a.transpose([names.index(c) for c in want])
    return a


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


def unstructured(points, connectivity, shape: str, fields: Mapping[str, Any] | None = None, *,
                 sizes=None, shapes=None, element: Sequence[str] = (), ghosts=None, domain_id: int = 0) -> dict:
    """A Blueprint dict for one unstructured domain (:func:`parse` reads it as a :class:`CellDomain`).

    Parameters
    ----------
    points : (n, 2) or (n, 3) array
        Point coordinates; their columns become the coordset's x, y[, z] (views).
    connectivity : (m,) integer array
        Point ids of every cell, cell after cell, in VTK's node order (Blueprint's).
    shape : str
        A Blueprint shape (point, line, tri, quad, tet, hex, wedge, pyramid, polygonal) or
        ``"mixed"``.
    fields : mapping name -> (n,) or (ncells,) array, optional
        Vertex fields (names in `element`: element fields).
    sizes : (ncells,) integer array, optional
        Points per cell: needed for polygonal and mixed cells (offsets are derived).
    shapes : (ncells,) integer array, optional
        For ``"mixed"``: each cell's VTK type code (``shape_map`` names them).
    ghosts : (ncells,) array, optional
        Non-zero for ghost cells: an ``ascent_ghosts`` element field.

    Raises
    ------
    ValueError
        An unknown `shape`, `points` not (n, 2) or (n, 3), `shapes` or `sizes` missing where
        needed.
    """
    pts = arrays.asarray(points, name="points")
    if pts.ndim != 2 or pts.shape[1] not in (2, 3):
        raise ValueError(f"points: expected an (n, 2) or (n, 3) array, got shape {tuple(pts.shape)}")
    if shape != "mixed" and shape not in SHAPE_TYPES:
        raise ValueError(f"shape: expected one of {', '.join(SHAPE_TYPES)} or mixed, got {shape!r}")
    el: dict[str, Any] = {"shape": shape, "connectivity": connectivity}
    if shape == "mixed":
        if shapes is None:
            raise ValueError("shapes: needed for mixed cells (each cell's VTK type code)")
        el["shape_map"] = {k: np.int32(v) for k, v in SHAPE_TYPES.items()}  # Conduit reads them as int32
        el["shapes"] = shapes
    if sizes is not None:
        sz = arrays.asarray(sizes, name="sizes")
        xp = arrays.get_array_module(sz)
        el["sizes"] = sz
        el["offsets"] = xp.concatenate([xp.zeros(1, sz.dtype), xp.cumsum(sz)[:-1].astype(sz.dtype)])
    elif shape in ("mixed", "polygonal"):
        raise ValueError(f"sizes: needed for {shape} cells")
    out: dict[str, Any] = {
        "coordsets": {"coords": {"type": "explicit",
                                 "values": {x: pts[:, i] for i, x in enumerate("xyz"[:pts.shape[1]])}}},
        "topologies": {"mesh": {"type": "unstructured", "coordset": "coords", "elements": el}},
        "fields": {k: {"association": "element" if k in element else "vertex", "topology": "mesh", "values": v}
                   for k, v in (fields or {}).items()},
        "state": {"domain_id": int(domain_id)},
    }
    if ghosts is not None:
        out["fields"]["ascent_ghosts"] = {"association": "element", "topology": "mesh", "values": ghosts}
    return out
