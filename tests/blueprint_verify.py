"""A Mesh Blueprint checker and a reader of Blueprint files (``.root`` + domain files),
written for the tests from the Blueprint and Conduit documentation, independent of
``adaptors.mesh``'s parser and of ``adaptors.relay``'s writer.

- :func:`read_file` reads a whole HDF5 (as Conduit lays a Node out: groups, 1-D
  datasets, ``H5T_C_S1`` strings with their NUL, ``H5S_NULL`` empty nodes), JSON or YAML
  file into nested dicts of NumPy arrays, strings and ``None``;
- :func:`load_root` follows a ``.root`` file's ``file_pattern``/``tree_pattern`` (and
  checks its ``partition_pattern``/``partition_map``) to every domain;
- :func:`problems` lists what is wrong with one domain (coordsets, topologies, fields,
  state); :func:`index_problems` what is wrong with a root's index against its domains.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

#: Points per cell of Blueprint's fixed shapes.
SHAPE_POINTS = {"point": 1, "line": 2, "tri": 3, "quad": 4, "tet": 4, "hex": 8, "wedge": 6, "pyramid": 5}
SHAPE_DIM = {"point": 0, "line": 1, "tri": 2, "quad": 2, "polygonal": 2, "tet": 3, "hex": 3, "wedge": 3,
             "pyramid": 3}
#: VTK codes of the shapes (what shape_map values name when written by VTK-minded writers).
TOPO_TYPES = ("points", "uniform", "rectilinear", "structured", "unstructured")


# --------------------------------------------------------------------------- reading files


def read_file(path: str, protocol: str | None = None) -> dict:
    """The whole tree of one file; `protocol` hdf5, json or yaml (None: guessed from the contents)."""
    protocol = protocol or guess_protocol(path)
    if protocol == "hdf5":
        import h5py

        with h5py.File(path, "r") as f:
            return _h5_tree(f)
    with open(path) as fh:
        text = fh.read()
    if protocol == "json":
        return _arrays(json.loads(text))
    if protocol == "yaml":
        import yaml

        return _arrays(yaml.safe_load(text))
    raise ValueError(f"protocol {protocol!r}")


def guess_protocol(path: str) -> str:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "hdf5"
    return "json" if head.lstrip().startswith(b"{") else "yaml"


def _h5_tree(g) -> dict:
    import h5py

    out: dict = {}
    for name in g:  # h5py lists in creation order where tracked, else by name
        obj = g[name]
        if isinstance(obj, h5py.Group):
            out[name] = _h5_tree(obj)
            continue
        if obj.shape is None:  # H5S_NULL: Conduit's empty node
            out[name] = None
            continue
        tid = obj.id.get_type()
        if tid.get_class() == h5py.h5t.STRING:
            raw = np.empty(obj.shape, dtype=f"S{tid.get_size()}")
            obj.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=tid)
            out[name] = raw.tobytes().split(b"\0")[0].decode()
            continue
        out[name] = np.asarray(obj[()])
    return out


def _arrays(v):
    """JSON/YAML data with lists of numbers as arrays ("nan", "inf" entries as floats)."""
    if isinstance(v, dict):
        return {str(k): _arrays(c) for k, c in v.items()}
    if isinstance(v, list):
        vals = [float(x) if isinstance(x, str) and x.lower() in ("nan", "inf", "-inf") else x for x in v]
        if all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
            return np.asarray(vals, dtype=np.int64)
        return np.asarray(vals, dtype=np.float64)
    return v


def get(tree, path: str):
    """The node at `path` ("a/b/c") of a tree."""
    for part in filter(None, path.split("/")):
        tree = tree[part]
    return tree


def scalar(v):
    """A leaf that holds one number, as a Python number."""
    a = np.asarray(v)
    if a.size != 1:
        raise ValueError(f"expected one value, got {a.size}")
    return a.reshape(-1)[0].item()


def _expand(pattern: str, i: int) -> str:
    """Conduit's ``%d``/``%0Nd`` patterns."""
    m = re.search(r"%(0(\d))?d", pattern)
    if not m:
        return pattern
    return pattern[:m.start()] + (f"{i:0{int(m.group(2))}d}" if m.group(1) else str(i)) + pattern[m.end():]


def domain_to_file(n_domains: int, n_files: int) -> list[int]:
    """Which file holds each domain, with N domains in M files (Conduit's documented rule:
    consecutive domains, the first N % M files one more)."""
    if n_files == n_domains:
        return list(range(n_domains))
    if n_files == 1:
        return [0] * n_domains
    counts = [n_domains // n_files + (f < n_domains % n_files) for f in range(n_files)]
    return [f for f, c in enumerate(counts) for _ in range(c)]


def load_root(root_path: str) -> tuple[dict, list[dict]]:
    """A ``.root`` file and every domain it points to.

    Returns
    -------
    root : dict
        The root file's tree.
    domains : list of dict
        Domain ``i`` read from ``file_pattern``/``tree_pattern`` + the mesh name.
    """
    root = read_file(root_path)
    name = next(iter(root["blueprint_index"]))
    proto = root["protocol"]["name"]
    n = int(scalar(root["number_of_trees"]))
    nfiles = int(scalar(root["number_of_files"]))
    d2f = domain_to_file(n, nfiles)
    here = os.path.dirname(root_path)
    cache: dict = {}
    domains = []
    for i in range(n):
        file = os.path.join(here, _expand(root["file_pattern"], d2f[i]))
        if file not in cache:
            cache[file] = root if os.path.abspath(file) == os.path.abspath(root_path) else read_file(file, proto)
        tree = _expand(root["tree_pattern"], i)
        domains.append(get(cache[file], tree.rstrip("/") + "/" + name))
    return root, domains


# --------------------------------------------------------------------------- checking


def problems(dom: dict) -> list[str]:
    """What is wrong with one Blueprint domain (empty: nothing)."""
    out: list[str] = []
    try:
        _check(dom, out)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        out.append(f"unreadable: {type(e).__name__}: {e}")
    return out


def _is_ints(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind in "iu"


def _is_numbers(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind in "iuf"


def _check(dom: dict, out: list[str]) -> None:
    sizes: dict[str, tuple[int, int]] = {}  # topology -> (points, cells)
    coords: dict[str, int] = {}  # coordset -> points
    cdims: dict[str, list[int]] = {}  # coordset -> points along each axis (explicit: all)
    for cname, cs in dom.get("coordsets", {}).items():
        p = f"coordsets/{cname}"
        t = cs.get("type")
        if t == "uniform":
            dims = cs.get("dims", {})
            axes = [a for a in "ijk" if a in dims]
            if not axes or axes != list("ijk"[:len(axes)]):
                out.append(f"{p}/dims: expected i[, j[, k]], got {list(dims)}")
                continue
            nd = [int(scalar(dims[a])) for a in axes]
            if any(v < 1 for v in nd):
                out.append(f"{p}/dims: expected positive sizes, got {nd}")
            for key, names in (("origin", "xyz"), ("spacing", ("dx", "dy", "dz"))):
                if key in cs and list(cs[key]) != list(names[:len(axes)]):
                    out.append(f"{p}/{key}: expected {list(names[:len(axes)])}, got {list(cs[key])}")
            coords[cname] = int(np.prod(nd))
            cs_dims = nd
        elif t in ("rectilinear", "explicit"):
            vals = cs.get("values", {})
            axes = list(vals)
            if axes not in (["x"], ["x", "y"], ["x", "y", "z"]) or not all(_is_numbers(vals[a]) for a in axes):
                out.append(f"{p}/values: expected numeric arrays x[, y[, z]], got {axes}")
                continue
            lens = [vals[a].size for a in axes]
            if t == "explicit" and len(set(lens)) != 1:
                out.append(f"{p}/values: explicit axes differ in length: {lens}")
            coords[cname] = int(np.prod(lens)) if t == "rectilinear" else lens[0]
            cs_dims = lens
        else:
            out.append(f"{p}/type: expected uniform, rectilinear or explicit, got {t!r}")
            continue
        cdims[cname] = cs_dims
    for tname, topo in dom.get("topologies", {}).items():
        p = f"topologies/{tname}"
        t, csn = topo.get("type"), topo.get("coordset")
        if csn not in coords:
            out.append(f"{p}/coordset: names {csn!r}; coordsets: {list(coords)}")
            continue
        cs = dom["coordsets"][csn]
        npts = coords[csn]
        if t not in TOPO_TYPES:
            out.append(f"{p}/type: {t!r} not one of {TOPO_TYPES}")
        elif t in ("uniform", "rectilinear"):
            if cs["type"] != t:
                out.append(f"{p}: a {t} topology on a {cs['type']} coordset")
            sizes[tname] = (npts, int(np.prod([max(n - 1, 1) for n in cdims[csn]])))
        elif t == "points":
            sizes[tname] = (npts, npts)
        elif t == "structured":
            d = [int(scalar(topo["elements"]["dims"][a])) for a in "ijk" if a in topo["elements"]["dims"]]
            if int(np.prod([n + 1 for n in d])) != npts:
                out.append(f"{p}/elements/dims: {d} cells need {int(np.prod([n + 1 for n in d]))} points, "
                           f"the coordset has {npts}")
            sizes[tname] = (npts, int(np.prod(d)))
        else:
            ncells = _check_elements(topo.get("elements", {}), f"{p}/elements", npts, out)
            if ncells is not None:
                sizes[tname] = (npts, ncells)
    for fname, f in dom.get("fields", {}).items():
        p = f"fields/{fname}"
        assoc, tn = f.get("association"), f.get("topology")
        if assoc not in ("vertex", "element"):
            out.append(f"{p}/association: expected vertex or element, got {assoc!r}")
            continue
        if tn not in sizes:
            out.append(f"{p}/topology: names {tn!r}; topologies: {list(sizes)}")
            continue
        want = sizes[tn][0 if assoc == "vertex" else 1]
        vals = f.get("values")
        comps = vals.items() if isinstance(vals, dict) else [("", vals)]
        for c, v in comps:
            if not _is_numbers(v):
                out.append(f"{p}/values{'/' + c if c else ''}: expected a numeric array, got {type(v).__name__}")
            elif v.size != want:
                out.append(f"{p}/values{'/' + c if c else ''}: {v.size} values for {want} {assoc}s")
    state = dom.get("state", {})
    for key, kinds in (("cycle", "iu"), ("domain_id", "iu"), ("time", "iuf")):
        if key in state and np.asarray(state[key]).dtype.kind not in kinds:
            out.append(f"state/{key}: expected a {'number' if key == 'time' else 'integer'}, got {state[key]!r}")


def _check_elements(el: dict, p: str, npts: int, out: list[str]) -> int | None:
    """Check unstructured elements; their number of cells (None if unreadable)."""
    shape, conn = el.get("shape"), el.get("connectivity")
    if not _is_ints(conn):
        out.append(f"{p}/connectivity: expected an integer array")
        return None
    if conn.size and (conn.min() < 0 or conn.max() >= npts):
        out.append(f"{p}/connectivity: ids in [{conn.min()}, {conn.max()}], the coordset has {npts} points")
    if shape in SHAPE_POINTS:
        k = SHAPE_POINTS[shape]
        if conn.size % k:
            out.append(f"{p}/connectivity: {conn.size} ids is not a whole number of {shape}s")
        return conn.size // k
    if shape == "polygonal":
        sz = el.get("sizes")
        if not _is_ints(sz) or sz.sum() != conn.size or (sz.size and sz.min() < 3):
            out.append(f"{p}/sizes: polygon sizes must be >= 3 and add up to the connectivity's {conn.size}")
            return None
        _check_offsets(el, sz, p, out)
        return sz.size
    if shape == "mixed":
        smap, shapes, sz = el.get("shape_map"), el.get("shapes"), el.get("sizes")
        if not isinstance(smap, dict) or not _is_ints(shapes) or not _is_ints(sz) or shapes.size != sz.size:
            out.append(f"{p}: mixed elements need shape_map, and shapes and sizes of one length")
            return None
        ids = {int(scalar(v)): k for k, v in smap.items()}
        bad = set(np.unique(shapes).tolist()) - set(ids)
        if bad or any(k not in SHAPE_POINTS and k != "polygonal" for k in smap):
            out.append(f"{p}/shapes: ids {sorted(bad)} not in shape_map {smap}, or unknown shape names")
            return None
        want = np.array([SHAPE_POINTS.get(ids[int(s)], -1) for s in shapes.tolist()])
        fixed = want >= 0
        if (sz[fixed] != want[fixed]).any() or sz.sum() != conn.size:
            out.append(f"{p}/sizes: do not match the shapes, or do not add up to the connectivity's {conn.size}")
        _check_offsets(el, sz, p, out)
        return shapes.size
    out.append(f"{p}/shape: unknown shape {shape!r}")
    return None


def _check_offsets(el: dict, sz: np.ndarray, p: str, out: list[str]) -> None:
    off = el.get("offsets")
    if off is None:
        return
    want = np.concatenate([[0], np.cumsum(sz)[:-1]]) if sz.size else sz
    if not _is_ints(off) or off.size != sz.size or (off != want).any():
        out.append(f"{p}/offsets: not the running sum of sizes")


def index_problems(root: dict, domains: list[dict]) -> list[str]:
    """What is wrong with a root file's ``blueprint_index`` against its domains."""
    out: list[str] = []
    name = next(iter(root["blueprint_index"]))
    idx = root["blueprint_index"][name]
    n = int(scalar(root["number_of_trees"]))
    if int(scalar(idx["state"]["number_of_domains"])) != n or len(domains) != n:
        out.append(f"state/number_of_domains: {scalar(idx['state']['number_of_domains'])}, trees {n}, "
                   f"read {len(domains)}")
    for key in ("coordsets", "topologies", "fields"):
        for k, entry in idx.get(key, {}).items():
            if entry.get("path") != f"{name}/{key}/{k}":
                out.append(f"{key}/{k}/path: {entry.get('path')!r}")
            have = [d for d in domains if k in d.get(key, {})]
            if not have:
                out.append(f"{key}/{k}: in the index, in no domain")
                continue
            d = have[0][key][k]
            if key == "coordsets":
                if entry["type"] != d["type"]:
                    out.append(f"{key}/{k}/type: index {entry['type']!r}, domain {d['type']!r}")
                axes = list(entry["coord_system"]["axes"])
                want = list(d["origin"]) if d["type"] == "uniform" else list(d["values"])
                if axes != want:
                    out.append(f"{key}/{k}/coord_system/axes: {axes}, domain {want}")
            elif key == "topologies":
                if (entry["type"], entry["coordset"]) != (d["type"], d["coordset"]):
                    out.append(f"{key}/{k}: index {entry['type']}/{entry['coordset']}, domain "
                               f"{d['type']}/{d['coordset']}")
            else:
                ncomp = len(d["values"]) if isinstance(d["values"], dict) else 1
                if (entry["association"], entry["topology"], int(scalar(entry["number_of_components"]))) != (
                        d["association"], d["topology"], ncomp):
                    out.append(f"{key}/{k}: index {entry['association']}/{entry['topology']}/"
                               f"{scalar(entry['number_of_components'])}, domain {d['association']}/"
                               f"{d['topology']}/{ncomp}")
    for i, d in enumerate(domains):
        for key in ("coordsets", "topologies", "fields"):
            for k in d.get(key, {}):
                if k not in idx.get(key, {}):
                    out.append(f"domain {i}: {key}/{k} missing from the index")
        if int(scalar(d["state"]["domain_id"])) != i:
            out.append(f"domain {i}: state/domain_id is {scalar(d['state']['domain_id'])}")
    pm = idx["state"].get("partition_map")
    if pm is not None:
        files = domain_to_file(n, int(scalar(root["number_of_files"])))
        if list(np.asarray(pm["file"]).tolist()) != files or list(np.asarray(pm["domain"]).tolist()) != list(range(n)):
            out.append(f"state/partition_map: {pm}, expected files {files}")
    return out
