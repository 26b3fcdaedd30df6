"""Ascent's ``relay`` extract: the domains as Blueprint files that VisIt and Conduit open.

The layout is Conduit's ``relay::io::blueprint::save_mesh`` (which Ascent's extract
calls), so ``conduit.relay.io.blueprint.load_mesh`` and VisIt's Blueprint reader read it:

- ``<path>.cycle_NNNNNN.root``: the index (``blueprint_index/mesh`` with each coordset's,
  topology's and field's ``path``; ``protocol/name``, ``protocol/version``,
  ``number_of_files``, ``number_of_trees``, ``file_pattern``, ``tree_pattern``, and the
  newer ``state/partition_pattern`` / ``partition_map``);
- ``<path>.cycle_NNNNNN/domain_NNNNNN.<protocol>``: one file per domain, the domain under
  ``mesh/``; with ``num_files`` below the number of domains, ``file_NNNNNN.<protocol>``
  holding ``domain_NNNNNN/mesh/`` each, domains assigned to files as Conduit does;
- a single domain in the whole job goes into the ``.root`` file itself (Conduit's
  ``root_only`` style).

Domains are numbered 0..N-1 over the job, rank after rank (Conduit relabels
``state/domain_id`` the same way). HDF5 files hold what Conduit writes (groups, 1-D
datasets, strings as ``H5T_C_S1`` arrays with their terminating NUL); YAML and JSON files
are Conduit's plain ("json"/"yaml" protocol) text, which keeps values (floats written
to round-trip) but not dtypes: Conduit reads integers back as int64 and floats as float64.

What a domain becomes (:func:`blueprint_domain`): a :class:`~adaptors.mesh.MeshDomain`
is a ``uniform`` coordset ``coords`` and topology ``mesh``; a
:class:`~adaptors.mesh.CellDomain` an ``explicit`` coordset and an ``unstructured``
topology (one shape, or ``mixed`` with ``shape_map``/``shapes``/``offsets``/``sizes``,
shape ids being VTK's codes). Fields keep their association and dtype (float16 is written
as float32: Conduit has no float16); an mcarray field is written back as one field with
its components; ghosts are the element field ``ascent_ghosts`` (int32, 1 = ghost).
``state`` holds ``cycle``, ``time`` and ``domain_id``. Device arrays are copied to the host
(counted, one copy per array): writing files is the extract's purpose.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from insitu import arrays
from render.cells import POLYGON, SHAPE_TYPES

from .context import PeerFailedError
from .errors import AdaptorError, MeshError
from .mesh import CellDomain, MeshDomain, VectorField

__all__ = ["PROTOCOLS", "blueprint_domain", "relay", "root_index", "write_mesh"]

#: Protocol names Ascent's relay extract takes -> the file protocol written.
PROTOCOLS: dict[str, str] = {"hdf5": "hdf5", "blueprint": "hdf5", "blueprint/mesh/hdf5": "hdf5",
                             "yaml": "yaml", "blueprint/mesh/yaml": "yaml",
                             "json": "json", "blueprint/mesh/json": "json"}
#: The mesh's name in the files and the index (Conduit's default).
MESH = "mesh"
GHOSTS = "ascent_ghosts"
#: Conduit version whose layout the files follow (written as ``protocol/version``).
CONDUIT_LAYOUT = "0.9.2"
_VTK_SHAPES = {v: k for k, v in SHAPE_TYPES.items()}
#: YAML keys written without quotes.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def relay(x) -> None:
    """The ``relay`` extract (:data:`adaptors.extracts.EXTRACTS`): this step's domains of
    every rank to Blueprint files and a ``.root`` index; collective over the job's ranks
    (through ``x.ctx``, the adaptor's :class:`~adaptors.context.Context`)."""
    ctx = getattr(x, "ctx", None)
    if ctx is None and x.size > 1:
        raise AdaptorError(f"extracts/{x.name}: the relay extract gathers the ranks' domain counts through the "
                           "job's Context, and this adaptor passes none to its extracts (Extract.ctx)")
    prm = x.params
    write_mesh(prm["path"], x.domains, protocol=prm.get("protocol", "hdf5"), fields=prm.get("fields"),
               topologies=prm.get("topologies"), num_files=prm.get("num_files"), cycle=x.step, time=x.time,
               ctx=ctx, what=f"extracts/{x.name}")


# --------------------------------------------------------------------------- the collective shell


def write_mesh(path: str, domains: Sequence[MeshDomain | CellDomain], *, protocol: str = "hdf5",
               fields: Sequence[str] | None = None, topologies: Sequence[str] | None = None,
               num_files: int | None = None, cycle: int = 0, time: float = 0.0, ctx=None,
               what: str = "relay") -> str | None:
    """Write every rank's domains as Blueprint files with a ``.root`` index, as Conduit's
    ``relay::io::blueprint::save_mesh(mesh, path, protocol, {number_of_files})`` does.

    Collective when `ctx` spans several ranks: every rank calls it, with its own domains
    (none is fine).

    Parameters
    ----------
    path : str
        Output prefix: ``<path>.cycle_<cycle:06d>.root`` and a folder of that name without
        ``.root`` (created, parents too).
    domains : list of MeshDomain or CellDomain
        This rank's domains.
    protocol : str
        A key of :data:`PROTOCOLS` (``hdf5``, ``yaml``, ``json``, ``blueprint/mesh/hdf5``...).
    fields, topologies : list of str, optional
        What to write (Ascent's selection: the union of the fields named and of every field
        on a topology named); default everything. ``ascent_ghosts`` is always written.
    num_files : int, optional
        Files to spread the domains over; ``None``, 0 or more than the domains: one each.
    cycle, time : number
        ``state/cycle`` and ``state/time`` of every domain.
    ctx : adaptors.context.Context, optional
        The job's ranks; ``None``: this process alone.
    what : str
        Names the caller in messages (``extracts/e1``).

    Returns
    -------
    str or None
        The ``.root`` file's path on the rank that wrote it (the first rank holding a
        domain), None on the others and when the job holds no domain.

    Raises
    ------
    ValueError
        Bad parameters, naming the key (``protocol``, ``num_files``; a
        :class:`~adaptors.errors.MeshError` for ``fields`` or ``topologies`` a domain
        lacks), raised on every rank before anything is written.
    OSError
        A file or folder that cannot be written (the rank that failed raises it; the
        others raise :class:`~adaptors.context.PeerFailedError`); no ``.root`` is written
        then.
    """
    rank, size = (0, 1) if ctx is None else (ctx.rank, ctx.size)
    local_index: dict = {}
    selections: list[list[str]] = []
    error: BaseException | None = None
    try:
        fproto = _protocol(protocol, what)
        nfiles_wanted = _num_files(num_files, what)
        for d in domains:
            names = select_fields(d, fields, topologies, what=what)
            selections.append(names)
            _merge(local_index, _domain_index(d, names, cycle, time))
    except Exception as e:  # raised after the collective, so that no rank waits for this one
        error = e
    # 1st collective: domain counts (the global numbering), local indexes, and set-up errors.
    gathered = _allgather(ctx, (len(domains), local_index, _text(error)), f"{what}: domain counts")
    _raise_any(error, [g[2] for g in gathered], what)
    counts = [g[0] for g in gathered]
    total = sum(counts)
    if total == 0:
        return None  # Conduit writes nothing either
    first = sum(counts[:rank])
    writer = next(r for r, c in enumerate(counts) if c)  # the root file's writer (Conduit: the first with domains)
    base = f"{path}.cycle_{int(cycle):06d}"
    root_path = base + ".root"
    nfiles = total if nfiles_wanted is None or nfiles_wanted > total else nfiles_wanted
    root_only = total == 1
    d2f = _domain_to_file(total, nfiles)
    error = None
    if not root_only:
        # Rounds: a file several ranks share is written by them one after the other, in rank order.
        writers: list[list[int]] = [[] for _ in range(nfiles)]
        owner = np.repeat(np.arange(size), counts)
        for g in range(total):
            if not writers[d2f[g]] or writers[d2f[g]][-1] != owner[g]:
                writers[d2f[g]].append(int(owner[g]))
        rounds = max(len(w) for w in writers)
        try:
            os.makedirs(base, exist_ok=True)
        except OSError as e:
            error = e
        for k in range(rounds):
            if k:
                _barrier(ctx, f"{what}: file round {k}")
            if error is not None:
                continue
            try:
                for f in range(nfiles):
                    if len(writers[f]) > k and writers[f][k] == rank:
                        _write_file(base, fproto, f, nfiles == total, d2f, first, domains, selections, cycle,
                                    time, part=k, parts=len(writers[f]))
            except Exception as e:  # raised after the collectives below, which every rank enters
                error = e
    # 2nd collective: did every rank write its domains? The .root comes last, only then.
    errors = _allgather(ctx, _text(error), f"{what}: domains written")
    _raise_any(error, errors, what)
    if rank != writer:
        return None
    index: dict = {}
    for g in gathered:
        _merge(index, g[1])
    root = root_index(index, total, nfiles, fproto, os.path.basename(base), root_only=root_only, d2f=d2f)
    if root_only:
        tree = blueprint_domain(domains[0], selections[0], cycle=cycle, time=time, domain_id=0)
        root = {MESH: tree, **root}
    os.makedirs(os.path.dirname(root_path) or ".", exist_ok=True)
    _write_tree(root_path, fproto, root)
    return root_path


def _write_file(base: str, fproto: str, f: int, one_each: bool, d2f: list[int], first: int, domains, selections,
                cycle, time, *, part: int, parts: int) -> None:
    """This rank's domains that go to file `f` (part `part` of `parts` of that file's writers)."""
    mine = [i for i in range(len(domains)) if d2f[first + i] == f]
    if one_each:
        (i,) = mine
        tree = blueprint_domain(domains[i], selections[i], cycle=cycle, time=time, domain_id=first + i)
        _write_tree(os.path.join(base, f"domain_{first + i:06d}.{fproto}"), fproto, {MESH: tree})
        return
    file = os.path.join(base, f"file_{f:06d}.{fproto}")
    trees = ((f"domain_{first + i:06d}", {MESH: blueprint_domain(domains[i], selections[i], cycle=cycle, time=time,
                                                                    domain_id=first + i)}) for i in mine)
    _write_entries(file, fproto, trees, part=part, parts=parts)


def _allgather(ctx, value, what: str) -> list:
    return [value] if ctx is None else ctx.allgather(value, what=what)


def _barrier(ctx, what: str) -> None:
    if ctx is not None:
        ctx.barrier(what=what)


def _text(e: BaseException | None) -> str | None:
    return None if e is None else f"{type(e).__name__}: {e}"


def _raise_any(error: BaseException | None, texts: Iterable[str | None], what: str) -> None:
    """Raise this rank's own error, or a relayed one naming the first rank that failed."""
    if error is not None:
        raise error
    bad = [(r, t) for r, t in enumerate(texts) if t is not None]
    if bad:
        e = PeerFailedError(f"{what}: rank {bad[0][0]} failed ({bad[0][1]})"
                            + (f" and {len(bad) - 1} more rank(s)" if len(bad) > 1 else ""))
        e.relayed = True  # type: ignore[attr-defined]  # reports another rank's failure (see Context)
        raise e


def _protocol(protocol, what: str) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(f"{what}: params/protocol: unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[protocol]


def _num_files(n, what: str) -> int | None:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{what}: params/num_files: expected an integer >= 0, got {n!r}")
    return int(n) or None


def _domain_to_file(n_domains: int, n_files: int) -> list[int]:
    """Conduit's assignment (gen_domain_to_file_map): consecutive domains, the first
    ``n_domains % n_files`` files holding one more."""
    per, extra = divmod(n_domains, n_files)
    out: list[int] = []
    for f in range(n_files):
        out += [f] * (per + (f < extra))
    return out


# --------------------------------------------------------------------------- the index


def root_index(index: Mapping, n_domains: int, n_files: int, fproto: str, base_name: str, *, root_only: bool,
               d2f: Sequence[int]) -> dict:
    """The ``.root`` file's tree: `index` (the mesh's, from its domains) completed with
    the number of domains and where each one is, as Conduit's write_mesh writes it."""
    idx = json.loads(json.dumps(index))  # a deep copy of plain data
    state = idx.setdefault("state", {})
    state["number_of_domains"] = np.int64(n_domains)
    rng = np.arange(n_domains, dtype=np.int64)
    if root_only:
        file_pattern, tree_pattern = base_name + ".root", "/"
        state["partition_pattern"] = file_pattern + ":/"
    elif n_files == n_domains:
        file_pattern, tree_pattern = f"{base_name}/domain_%06d.{fproto}", "/"
        state["partition_pattern"] = f"{base_name}/domain_{{domain:06d}}.{fproto}:/"
        state["partition_map"] = {"file": rng, "domain": rng.copy()}
    else:
        file_pattern, tree_pattern = f"{base_name}/file_%06d.{fproto}", "/domain_%06d"
        state["partition_pattern"] = f"{base_name}/file_{{file:06d}}.{fproto}:/domain_{{domain:06d}}"
        state["partition_map"] = {"file": np.asarray(d2f, np.int64), "domain": rng}
    for cs in idx.get("coordsets", {}).values():
        cs["coord_system"]["axes"] = {a: None for a in cs["coord_system"]["axes"]}  # empty nodes, as Conduit's
    for fl in idx.get("fields", {}).values():
        fl["number_of_components"] = np.int64(fl["number_of_components"])
    if "cycle" in state:
        state["cycle"] = np.int64(state["cycle"])
    if "time" in state:
        state["time"] = np.float64(state["time"])
    return {"blueprint_index": {MESH: idx},
            "protocol": {"name": fproto, "version": CONDUIT_LAYOUT},
            "number_of_files": np.int32(n_files), "number_of_trees": np.int32(n_domains),
            "file_pattern": file_pattern, "tree_pattern": tree_pattern}


def _domain_index(d, names: list[str], cycle, time) -> dict:
    """One domain's entries of the Blueprint index (Conduit's
    generate_index_for_single_domain), as plain JSON-able data."""
    if isinstance(d, MeshDomain):
        cs = {"type": "uniform", "coord_system": {"axes": ["x", "y", "z"], "type": "cartesian"}}
        topo, ttype = MESH, "uniform"
    else:
        cs = {"type": "explicit", "coord_system": {"axes": ["x", "y", "z"][:d.dim], "type": "cartesian"}}
        topo, ttype = d.topology, "unstructured"
    # state last: Conduit tells a YAML .root from a JSON one by a "{" in its first 256 bytes,
    # and the partition pattern has braces.
    out: dict = {"coordsets": {"coords": {**cs, "path": f"{MESH}/coordsets/coords"}},
                 "topologies": {topo: {"type": ttype, "coordset": "coords", "path": f"{MESH}/topologies/{topo}"}},
                 "fields": {},
                 "state": {"cycle": int(cycle), "time": float(time), "path": f"{MESH}/state"}}
    for name in names + [GHOSTS]:
        f = _vector(d, name)
        assoc = "element" if name == GHOSTS else (f or d.fields[name]).association
        out["fields"][name] = {"number_of_components": len(f.components or ()) if f is not None else 1,
                               "topology": topo, "association": assoc, "path": f"{MESH}/fields/{name}"}
    return out


def _merge(into: dict, new: Mapping) -> None:
    """Conduit's Node.update: `new`'s entries into `into`, recursively."""
    for k, v in new.items():
        if isinstance(v, Mapping) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v


# --------------------------------------------------------------------------- domains as Blueprint trees


def _vector(d, name: str) -> VectorField | None:
    f = d.fields.get(f"{name}/magnitude")
    return f if isinstance(f, VectorField) else None


def field_names(d) -> list[str]:
    """The fields of `d` as Blueprint names: scalars, and each mcarray once (its
    ``<name>/<component>`` and ``<name>/magnitude`` views are not fields of their own)."""
    vectors = {n[:-len("/magnitude")] for n, f in d.fields.items()
               if isinstance(f, VectorField) and n.endswith("/magnitude")}
    return sorted(vectors | {n for n in d.fields if n.split("/")[0] not in vectors})


def select_fields(d, fields: Sequence[str] | None, topologies: Sequence[str] | None, *,
                  what: str = "relay") -> list[str]:
    """The Blueprint field names of `d` to write (Ascent's selection: those named in
    `fields`, and all of those on a topology named in `topologies`; both None: all)."""
    have = field_names(d)
    topo = MESH if isinstance(d, MeshDomain) else d.topology
    if fields is None and topologies is None:
        return have
    if isinstance(fields, str) or isinstance(topologies, str):
        raise TypeError(f"{what}: params/fields and params/topologies are lists of names, got a string")
    if topologies is not None and not topologies:
        raise ValueError(f"{what}: params/topologies: an empty list selects nothing")
    out: list[str] = []
    for t in topologies or ():
        if t != topo:
            raise MeshError(f"{what}: params/topologies: domain {d.domain_id} has no topology {t!r}; "
                           f"topologies: {topo!r}")
        out = list(have)
    if fields is not None and not fields:
        raise ValueError(f"{what}: params/fields: an empty list selects nothing")
    for name in fields or ():
        if name == GHOSTS:
            continue  # written always
        head = name.split("/")[0]
        base = head if head != name and _vector(d, head) is not None else name  # vel/x, vel/magnitude: vel
        if base not in have:
            raise MeshError(f"{what}: params/fields: domain {d.domain_id} has no field {name!r}; fields: "
                           f"{', '.join(repr(h) for h in have)}")
        if base not in out:
            out.append(base)
    return [n for n in out if n != GHOSTS]


def blueprint_domain(d: MeshDomain | CellDomain, names: Sequence[str] | None = None, *, cycle: int = 0,
                     time: float = 0.0, domain_id: int | None = None) -> dict:
    """Domain `d` as a Blueprint tree of host arrays (nested dicts, as it is written).

    Parameters
    ----------
    d : MeshDomain or CellDomain
    names : list of str, optional
        Fields to include (:func:`select_fields`); default all. ``ascent_ghosts`` is
        added always.
    cycle, time : number
        ``state/cycle`` and ``state/time``.
    domain_id : int, optional
        ``state/domain_id`` (default ``d.domain_id``).

    Returns
    -------
    dict
        ``coordsets``, ``topologies``, ``fields``, ``state``; values 1-D NumPy arrays in
        Blueprint's order (``i`` fastest), device arrays copied once each.
    """
    names = field_names(d) if names is None else list(names)
    out: dict[str, Any] = {}
    if isinstance(d, MeshDomain):
        topo = MESH
        out["coordsets"] = {"coords": {
            "type": "uniform",
            "dims": {a: np.int64(n) for a, n in zip("ijk", d.dims)},
            "origin": {a: np.float64(v) for a, v in zip("xyz", d.origin)},
            "spacing": {f"d{a}": np.float64(v) for a, v in zip("xyz", d.spacing)}}}
        out["topologies"] = {topo: {"type": "uniform", "coordset": "coords"}}
        ghosts = np.ones(tuple(n - 1 for n in d.dims), np.int32)
        (lo, hi) = d.cells
        ghosts[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = 0
        ghost_values = _flat(ghosts)
    elif isinstance(d, CellDomain):
        topo = d.topology
        out["coordsets"] = {"coords": _explicit(d.mesh.points, d.dim)}
        out["topologies"] = {topo: {"type": "unstructured", "coordset": "coords", "elements": _elements(d.mesh)}}
        ghost_values = (np.zeros(d.mesh.n_cells, np.int32) if d.ghosts is None
                        else arrays.to_host(d.ghosts).astype(np.int32))
    else:
        raise TypeError(f"blueprint_domain: expected a MeshDomain or CellDomain, got {type(d).__name__}")
    flds: dict[str, Any] = {}
    for name in names:
        vec = _vector(d, name)
        if vec is not None:
            flds[name] = {"association": vec.association, "topology": topo,
                          "values": {c: _flat(arrays.to_host(a)) for c, a in (vec.components or {}).items()}}
        else:
            f = d.fields[name]
            flds[name] = {"association": f.association, "topology": topo, "values": _flat(arrays.to_host(f.values))}
    flds[GHOSTS] = {"association": "element", "topology": topo, "values": ghost_values}
    out["fields"] = flds
    out["state"] = {"cycle": np.int64(cycle), "time": np.float64(time),
                    "domain_id": np.int32(d.domain_id if domain_id is None else domain_id)}
    return out


def _flat(a: np.ndarray) -> np.ndarray:
    """Values in Blueprint's order (``i`` fastest); float16 as float32 (Conduit has no float16)."""
    a = np.asarray(a)
    flat = a.reshape(-1, order="F") if a.ndim > 1 else a
    return flat.astype(np.float32) if flat.dtype == np.float16 else np.ascontiguousarray(flat)


def _explicit(points, dim: int) -> dict:
    p = arrays.to_host(points)
    return {"type": "explicit", "values": {a: np.ascontiguousarray(p[:, i]) for i, a in enumerate("xyz"[:dim])}}


def _elements(m) -> dict:
    """A CellMesh's cells as Blueprint ``elements``: one shape, or ``mixed``."""
    types = arrays.to_host(m.types)
    conn = np.ascontiguousarray(arrays.to_host(m.connectivity))
    offsets = arrays.to_host(m.offsets)
    kinds = np.unique(types).tolist()
    unknown = [t for t in kinds if t not in _VTK_SHAPES]
    if unknown:
        raise ValueError(f"relay: cells of VTK types {unknown} have no Blueprint shape; "
                         f"known: {sorted(_VTK_SHAPES)}")
    if len(kinds) <= 1:
        shape = _VTK_SHAPES[kinds[0]] if kinds else "point"
        el: dict[str, Any] = {"shape": shape, "connectivity": conn}
        if kinds == [POLYGON]:
            el["sizes"] = np.diff(offsets).astype(np.int64)
            el["offsets"] = np.ascontiguousarray(offsets[:-1], np.int64)
        return el
    return {"shape": "mixed",
            "shape_map": {_VTK_SHAPES[t]: np.int32(t) for t in kinds},
            "shapes": types.astype(np.int32),
            "offsets": np.ascontiguousarray(offsets[:-1], np.int64),
            "sizes": np.diff(offsets).astype(np.int64),
            "connectivity": conn}


# --------------------------------------------------------------------------- files


def _write_tree(file: str, fproto: str, tree: Mapping) -> None:
    """One tree to a new file (replaced if there)."""
    _write_entries(file, fproto, iter(tree.items()), part=0, parts=1)


def _write_entries(file: str, fproto: str, entries: Iterable[tuple[str, Any]], *, part: int, parts: int) -> None:
    """Top-level `entries` into `file`: writer `part` of `parts` (the first creates the
    file, the others add to it, so ranks can fill one file in turns)."""
    if fproto == "hdf5":
        import h5py

        with h5py.File(file, "w" if part == 0 else "a", track_order=True) as h5:
            for k, v in entries:
                _h5_put(h5, k, v)
        return
    with open(file, "w" if part == 0 else "a") as out:
        if fproto == "json":
            out.write("{\n" if part == 0 else ",\n")
            out.write(",\n".join(f"{json.dumps(k)}: {_json(v, 1)}" for k, v in entries))
            if part == parts - 1:
                out.write("\n}\n")
        else:
            for k, v in entries:
                _yaml(out, k, v, 0)


def _h5_put(g, name: str, v) -> None:
    """`v` under `name` in HDF5 group `g`, as Conduit lays a Node out."""
    import h5py

    if isinstance(v, Mapping):
        sub = g.create_group(name, track_order=True)
        for k, c in v.items():
            _h5_put(sub, str(k), c)
    elif v is None:
        g.create_dataset(name, data=h5py.Empty("V1"))  # Conduit's empty node: opaque type, null dataspace
    elif isinstance(v, str):
        # Conduit's strings: H5T_C_S1 elements, the terminating NUL included.
        raw = np.frombuffer(v.encode() + b"\0", dtype="S1")
        tid = h5py.h5t.C_S1.copy()
        dset = h5py.h5d.create(g.id, name.encode(), tid, h5py.h5s.create_simple((raw.size,)))
        dset.write(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=tid)
    else:
        g.create_dataset(name, data=np.atleast_1d(np.asarray(v)))


def _number(v) -> str:
    """A number that Conduit's parsers (strtod, RapidJSON) and YAML 1.1 read back as the
    same float: repr's round-trip digits, always with a '.', non-finite as Conduit spells it."""
    if isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    x = float(v)
    if not math.isfinite(x):
        return "nan" if x != x else ("inf" if x > 0 else "-inf")
    s = repr(x)
    if "e" in s and "." not in s.split("e")[0]:
        s = s.replace("e", ".0e")
    elif "e" not in s and "." not in s:
        s += ".0"
    return s


def _numbers(a: np.ndarray, *, yaml: bool) -> str:
    """An array's values, comma-separated, as :func:`_number` spells each (through
    json's C float formatting: the per-value Python path is several times slower)."""
    a = np.asarray(a).reshape(-1)
    if a.dtype.kind != "f":
        return json.dumps(a.tolist())[1:-1]
    x = a.astype(np.float64)
    s = json.dumps(x.tolist())[1:-1]
    with np.errstate(invalid="ignore"):
        # repr's exponent form ("1e-05", "1.5e+16"), which YAML 1.1 reads as a float only with a '.'
        fix = np.flatnonzero(((np.abs(x) < 1e-4) & (x != 0)) | (np.abs(x) >= 1e16)) if yaml else x[:0]
    if len(fix):
        parts = s.split(", ")
        for i in fix.tolist():
            parts[i] = _number(x[i])
        s = ", ".join(parts)
    if "N" in s or "I" in s:  # json's NaN, Infinity, -Infinity: Conduit's spelling (quoted in JSON)
        q = "" if yaml else '"'
        s = s.replace("-Infinity", f"{q}-inf{q}").replace("Infinity", f"{q}inf{q}").replace("NaN", f"{q}nan{q}")
    return s


def _json(v, depth: int) -> str:
    pad = "  " * depth
    if isinstance(v, Mapping):
        if not v:
            return "{}"
        inner = ",\n".join(f"{pad}  {json.dumps(str(k))}: {_json(c, depth + 1)}" for k, c in v.items())
        return "{\n" + inner + "\n" + pad + "}"
    if v is None:
        return "null"
    if isinstance(v, str):
        return json.dumps(v)
    a = np.asarray(v)
    if a.ndim == 0:
        s = _number(a.item())
        return s if s not in ("nan", "inf", "-inf") else json.dumps(s)  # Conduit reads these strings as floats
    return "[" + _numbers(a, yaml=False) + "]"


def _yaml(out, key: str, v, depth: int) -> None:
    pad = "  " * depth
    k = str(key) if _PLAIN.fullmatch(str(key)) else json.dumps(str(key))
    if isinstance(v, Mapping):
        out.write(f"{pad}{k}:\n")
        for c, w in v.items():
            _yaml(out, c, w, depth + 1)
    elif v is None:
        out.write(f"{pad}{k}:\n")
    elif isinstance(v, str):
        out.write(f"{pad}{k}: {json.dumps(v)}\n")
    else:
        a = np.asarray(v)
        out.write(f"{pad}{k}: {_number(a.item()) if a.ndim == 0 else '[' + _numbers(a, yaml=True) + ']'}\n")
