"""The ``insitu`` command line (``python -m insitu`` is the same).

    insitu --version
    insitu info      what this machine offers insitu: versions, CUDA devices, MPI, NCCL
    insitu view      a web page showing a frame stream (live SST or a BP5 file), with steering
    insitu check     validate a configuration as the adaptor would (and against a recorded mesh);
                     print what each step will do
    insitu warmup    compile the kernels a configuration needs (or all of them) ahead of a job
    insitu replay    re-run a configuration on the meshes an hdf5 extract recorded (under mpiexec too)

``check``, ``warmup`` and ``replay`` use the adaptor package, the layer above this runtime: it is found
through its ``insitu.adaptor`` entry point (:mod:`insitu.plugins`) when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import platform
import re
import sys
from typing import Any, Mapping

from ._version import __version__

__all__ = ["main"]


def _version(mod: str) -> str:
    try:
        return getattr(importlib.import_module(mod), "__version__", "installed")
    except Exception as exc:  # missing, or failing to load its native library
        return f"not available ({exc.__class__.__name__})"


def info() -> dict[str, str]:
    """What this machine offers: package versions, CUDA devices, MPI flavour, NCCL."""
    from . import __version__, arrays, transports

    out = {"insitu": __version__, "python": platform.python_version()}
    for mod in ("numpy", "numba", "mpi4py", "h5py", "adios2", "OpenGL", "pyspark", "cupy"):
        out[mod] = _version(mod)
    cp = arrays.cupy_or_none()
    if cp is None:
        out["cuda"] = arrays._cupy_status()[1]
    else:
        n = cp.cuda.runtime.getDeviceCount()
        names = [cp.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(n)]
        out["cuda"] = f"{n} device(s): {', '.join(names)}"
        out["nccl"] = "available" if transports.nccl_available() else "not available"
    try:
        from mpi4py import MPI

        out["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
        out["mpi cuda-aware"] = str(transports.mpi_cuda_aware())
    except Exception as exc:
        out["mpi"] = f"not available ({exc.__class__.__name__}: {exc})"
    return out


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


def _open_browser(url: str) -> str:
    """Open `url` through a private redirect file; returns the file's path (to remove at exit).

    A URL on a browser's command line is visible to every local user (``ps``), and this
    one holds the viewer's token; the file is readable by its owner only (``mkstemp``).
    """
    import html
    import os
    import tempfile
    import webbrowser

    fd, path = tempfile.mkstemp(prefix="insitu-view-", suffix=".html")
    with os.fdopen(fd, "w") as f:
        u = html.escape(url)
        f.write(f'<!doctype html><meta http-equiv="refresh" content="0;url={u}"><a href="{u}">insitu view</a>\n')
    webbrowser.open("file://" + path)
    return path


def view(args: argparse.Namespace) -> int:
    """``insitu view``: serve the stream until Ctrl-C / SIGTERM (or its end with --exit-at-end)."""
    import ipaddress
    import os
    import signal
    import threading

    from .log import enable
    from .viewer import serve

    enable("WARNING")  # the viewer reports stream and request errors as log records

    def err(msg: str) -> None:
        print(f"insitu view: {msg}", file=sys.stderr, flush=True)

    try:
        v = serve(args.stream, engine=args.engine, host=args.host, port=args.port, png=args.png, mp4=args.mp4,
                  steer=args.steer, timeout=args.timeout, rate=args.rate)
    except (OSError, RuntimeError, ValueError) as exc:
        err(str(exc))
        return 2
    done = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    rc, reported, redirect = 0, False, []

    def report_end() -> bool:  # once the stream has ended; True: nothing to serve (no frame ever came)
        nonlocal rc, reported
        reported = True
        s = v.status()
        if s["error"]:
            err(s["error"])
            if s["frames"] == 0:
                rc = 1
                return True
        print(f"insitu view: {args.stream} ended after {s['frames']} frames (last step {s['step']})", flush=True)
        if s["record_error"]:
            err(s["record_error"])
            rc = 1
        return False

    try:
        print(f"insitu view: serving {v.url} for {args.stream}", flush=True)
        host = str(v.host)
        if not ipaddress.ip_address(host.split("%")[0]).is_loopback:
            err(f"warning: serving on {args.host} ({host}), not a loopback address: anyone who can reach "
                f"port {v.port} of this machine may try it, and plain HTTP carries the token and the frames "
                "unencrypted; prefer the default 127.0.0.1 with an SSH tunnel (ssh -L)")
        if not args.no_browser:
            threading.Thread(target=lambda: redirect.append(_open_browser(v.url)), daemon=True).start()
        while not done.wait(0.25):
            if v.ended and not reported and (report_end() or args.exit_at_end):
                break
        if v.ended and not reported:
            report_end()
    finally:
        v.close()
        for sig, h in previous.items():
            signal.signal(sig, h)
        for path in redirect:
            try:
                os.remove(path)
            except OSError:
                pass
    return rc


# --------------------------------------------------------------------------- check


def _adaptor_package() -> Any:
    """The adaptor package, through its entry point (the runtime names no package above it)."""
    from .plugins import load

    return load("insitu.adaptor", "package")


def _raw_config(config: str) -> Any:
    """The configuration as given (a parsed file or text), before validation."""
    import yaml

    text = config
    if os.path.exists(config):
        with open(config) as f:
            text = f.read()
    return (yaml.safe_load(text) if text.strip() else None) or {}


def _embedded(raw: Any) -> Any:
    """`raw` with the embedded engine: checks and warmups start no Spark (its own parameters
    were validated already; its daemons run the same kernels)."""
    if isinstance(raw, Mapping) and raw.get("engine", "embedded") != "embedded":
        return {**raw, "engine": "embedded"}
    return raw


def read_mesh(path: str, ghost_field: str = "ascent_ghosts") -> tuple[list[dict], int, float]:
    """The domains an ``hdf5`` extract recorded, as Blueprint dicts (uniform grids).

    Parameters
    ----------
    path : str
        A file the extract wrote (one per step; ``<path>.rank<r>.h5`` per rank).
    ghost_field : str
        Name of the element field marking the ghost cells the recorded real-cell box leaves out.

    Returns
    -------
    domains : list of dict
        One Blueprint dict per recorded domain.
    step, time : int, float
        The recorded step and time.
    """
    import h5py
    import numpy as np

    out: list[dict] = []
    with h5py.File(path, "r") as f:
        step, time = int(f.attrs.get("step", 0)), float(f.attrs.get("time", 0.0))
        for gname in sorted(f):
            g = f[gname]
            if not isinstance(g, h5py.Group) or "dims" not in g.attrs:
                continue
            dims = [int(n) for n in g.attrs["dims"]]
            fields: dict[str, dict] = {}
            for name, obj in g.items():
                if isinstance(obj, h5py.Dataset):
                    fields[name] = {"association": str(obj.attrs.get("association", "vertex")), "topology": "mesh",
                                    "values": obj[()]}
                else:  # a name with "/" (an mcarray's components): h5py made a group of it
                    comps = {c: obj[c] for c in obj if isinstance(obj[c], h5py.Dataset)}
                    if comps:
                        assoc = str(next(iter(comps.values())).attrs.get("association", "vertex"))
                        fields[name] = {"association": assoc, "topology": "mesh",
                                        "values": {c: d[()] for c, d in comps.items()}}
            lo = [int(v) for v in g.attrs.get("real_cells_lo", (0, 0, 0))]
            hi = [int(v) for v in g.attrs.get("real_cells_hi", [n - 1 for n in dims])]
            cdims = [n - 1 for n in dims]
            if ghost_field not in fields and (any(lo) or hi != cdims):
                ghosts = np.ones(cdims, np.int32)
                ghosts[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = 0
                fields[ghost_field] = {"association": "element", "topology": "mesh", "values": ghosts}
            out.append({
                "coordsets": {"coords": {"type": "uniform", "dims": dict(zip("ijk", dims)),
                                         "origin": dict(zip("xyz", map(float, g.attrs["origin"]))),
                                         "spacing": dict(zip(("dx", "dy", "dz"), map(float, g.attrs["spacing"])))}},
                "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
                "fields": fields,
                "state": {"domain_id": int(gname.rpartition("_")[2] or len(out))},
            })
    if not out:
        raise ValueError(f"{path}: no domain recorded by an hdf5 extract (groups domain_NNNNNN)")
    return out, step, time


def _short(v: Any, most: int = 60) -> str:
    r = repr(v) if not isinstance(v, str) else v
    return r if len(r) <= most else r[:most - 3] + "..."


def _given(params: Mapping) -> str:
    return ", ".join(f"{k}={_short(v)}" for k, v in params.items() if v is not None)


def plan(cfg: Mapping) -> list[str]:
    """What each executed step of a validated configuration does, in the adaptor's order:
    queries, triggers, the pipelines the due scenes need, scenes, extracts."""
    lines = [f"engine: {cfg['engine']['type']}; exceptions: {cfg['exceptions']}; log: {cfg['log']}; "
             f"timeout: {cfg['timeout']:g} s"]
    if cfg.get("params"):
        lines.append(f"user parameters: {_given(cfg['params'])}")
    triggered = {a for t in cfg["triggers"].values() for a in t["actions"]}
    lines.append("each step, in order:")
    for name, q in cfg["queries"].items():
        lines.append(f"  query {name}: {q['name']} = {q['expression']}")
    for name, t in cfg["triggers"].items():
        when = f"every {t['every']} steps" if t.get("every") is not None else f"when {t['condition']}"
        lines.append(f"  trigger {name}: {when} -> runs {', '.join(t['actions'])}")
    for name, filters in cfg["pipelines"].items():
        chain = " -> ".join(f"{f['type']}({_given(f['params'])})" for f in filters.values())
        lines.append(f"  pipeline {name} (when a due scene draws it): {chain or 'the mesh as given'}")
    for name, sc in cfg["scenes"].items():
        due = "when triggered" if name in triggered else "every step"
        lines.append(f"  scene {name} ({due}):")
        for pname, p in sc["plots"].items():
            src = f"pipeline {p['pipeline']}" if p.get("pipeline") else "the mesh"
            field = f", field {p['field']}" if p.get("field") else ""
            lines.append(f"    plot {pname}: {p['type']} of {src}{field}")
        for rname, r in sc["renders"].items():
            out = f" -> {r['image_prefix']}.png" if r.get("image_prefix") else " (not written)"
            lines.append(f"    render {rname}: {r['image_width']}x{r['image_height']}{out}")
    for name, e in cfg["extracts"].items():
        due = "when triggered" if name in triggered else "every step"
        lines.append(f"  extract {name} ({due}): {e['type']}({_given(e['params'])})")
    if not (cfg["scenes"] or cfg["extracts"] or cfg["queries"]):
        lines.append("  nothing (no scenes, extracts or queries)")
    return lines


def check_config(config: str, mesh: str | None = None) -> list[str]:
    """Validate `config` exactly as :class:`Adaptor` does at ``initialize`` (and, given a mesh
    an ``hdf5`` extract recorded, as ``execute`` does: field names, queries and triggers on it).

    Returns
    -------
    list of str
        :func:`plan`'s lines (and which actions the recorded step runs).

    Raises
    ------
    ConfigError, MeshError, ValueError, KeyError, TypeError
        The error the adaptor would raise, with its message.
    """
    ad = _adaptor_package()
    cfg = ad.load(config)
    lines = plan(cfg)
    a = ad.Adaptor(_embedded(_raw_config(config)))  # what initialize does beyond the schema
    try:
        if mesh is not None:
            meshes, step, time = read_mesh(mesh, cfg["ghost_field"])
            # The adaptor's own checks of a step's mesh (Adaptor._execute), in its order.
            domains = ad.mesh.parse(meshes, ghost_field=cfg["ghost_field"], cells=True)
            a._check_fields(domains)
            active = a._active(step, time, domains)
            fields = sorted(set.intersection(*(set(d.fields) for d in domains)))
            lines.append(f"on {mesh} (step {step}, {len(domains)} domain(s), fields {', '.join(fields)}): "
                         f"runs {', '.join(n for n in (*cfg['scenes'], *cfg['extracts']) if n in active) or 'nothing'}")
    finally:
        a.finalize()
    return lines


def check(args: argparse.Namespace) -> int:
    """``insitu check CONFIG [--mesh FILE]``: 0 valid, 1 rejected, 2 unreadable mesh file."""
    ad = _adaptor_package()
    try:
        lines = check_config(args.config, args.mesh)
    except ad.ConfigError as e:
        print(f"insitu check: {args.config}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"insitu check: {args.mesh}: cannot read ({e})", file=sys.stderr)
        return 2
    except (ad.MeshError, ValueError, KeyError, TypeError) as e:
        print(f"insitu check: {args.config} on {args.mesh}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"insitu check: {args.config}: valid")
    for line in lines:
        print(line)
    return 0


# --------------------------------------------------------------------------- warmup

#: ``insitu warmup`` without a configuration: every family of CPU kernels the adaptor runs
#: (contour, raster, volume, eikonal, the cell filters, ranges and reductions).
WARMUP_ALL: dict[str, Any] = {
    "pipelines": {
        "contour": {"c": {"type": "contour", "params": {"field": "a", "iso_values": [0.5]}}},
        "slice": {"s": {"type": "slice", "params": {"point": [0.0, 0.0, 0.1]}}},
        "threshold": {"t": {"type": "threshold", "params": {"field": "a", "min_value": 0.3, "max_value": 0.7}}},
        "clip": {"k": {"type": "clip", "params": {"sphere": {"center": {"x": 0, "y": 0, "z": 0}, "radius": 0.5}}}},
        "isovolume": {"i": {"type": "isovolume", "params": {"field": "a", "min_value": 0.3, "max_value": 0.7}}},
        "gradient": {"g": {"type": "gradient", "params": {"field": "a"}},
                     "m": {"type": "vector_magnitude", "params": {"field": "a_gradient"}},
                     "c": {"type": "contour", "params": {"field": "a_gradient_magnitude", "levels": 1}}},
        "eikonal": {"e": {"type": "eikonal", "params": {"speed": "s", "seeds": [[0.0, 0.0, 0.0]]}},
                    "c": {"type": "contour", "params": {"field": "arrival_time", "iso_values": [0.5]}}},
    },
    "scenes": {
        **{f"draw_{p}": {"plots": {"p": {"type": "pseudocolor", "pipeline": p, "field": "a"}}}
           for p in ("contour", "slice", "threshold", "clip", "isovolume", "gradient", "eikonal")},
        "mesh": {"plots": {"p": {"type": "pseudocolor", "field": "a"}, "v": {"type": "volume", "field": "a"}}},
    },
    "queries": {"q": {"params": {"expression": "max(field('a'))", "name": "amax"}}},
}

_FIELD_CALL = re.compile(r"""field\(\s*['"]([^'"]+)['"]""")


def _warmup_fields(cfg: Mapping, added: Any) -> tuple[dict[str, tuple[float, float]], set[str]]:
    """The fields a validated configuration reads from the mesh: ``{name: (low, high)}`` (a
    range holding the values it names: iso values, thresholds, colour ranges) and the names
    read as vectors."""
    nums: dict[str, list[float]] = {}
    vectors: set[str] = set()
    produced: set[str] = set()
    positive: set[str] = set()

    def need(name: Any, *values: Any) -> None:
        if isinstance(name, str):
            nums.setdefault(name, []).extend(float(v) for v in values if isinstance(v, (int, float)))

    for filters in cfg["pipelines"].values():
        for f in filters.values():
            prm = f["params"]
            need(prm.get("field"), *(prm.get("iso_values") or ()), prm.get("min_value"), prm.get("max_value"),
                 prm.get("clip_value"))
            if f["type"] in ("vector_magnitude", "vector_component"):
                vectors.add(prm["field"])
            if f["type"] == "eikonal":
                produced.add(prm["output"])
                try:
                    float(prm["speed"])
                except ValueError:
                    need(prm["speed"])
                    positive.add(prm["speed"])
            produced.update(n for n in added(f["type"], prm) if n != prm.get("field"))
    for sc in cfg["scenes"].values():
        for p in sc["plots"].values():
            need(p.get("field"), p.get("min_value"), p.get("max_value"))
    texts = [q["expression"] for q in cfg["queries"].values()]
    texts += [t["condition"] for t in cfg["triggers"].values() if t.get("condition")]
    for text in texts:
        for name in _FIELD_CALL.findall(text):
            need(name)
    ranges = {}
    for name, values in nums.items():
        if name in produced:
            continue
        lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
        if hi - lo < 1e-6:
            lo, hi = lo - 1.0, hi + 1.0
        lo, hi = lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo)  # every named value strictly inside
        if name in positive and lo <= 0:
            lo, hi = 0.5, max(hi, 1.5)
        ranges[name] = (lo, hi)
    return ranges, vectors - produced


def _warmup_box(cfg: Mapping) -> tuple[list[float], list[float]]:
    """A box around the origin holding the configuration's eikonal seeds."""
    lo, hi = [-1.0] * 3, [1.0] * 3
    for filters in cfg["pipelines"].values():
        for f in filters.values():
            for pt in f["params"].get("seeds") or () if f["type"] == "eikonal" else ():
                for i, v in enumerate(pt.values() if isinstance(pt, Mapping) else pt):
                    lo[i], hi[i] = min(lo[i], float(v) - 0.5), max(hi[i], float(v) + 0.5)
    return lo, hi


def _warmup_meshes(cfg: Mapping, added: Any, dtype: str, cells: bool, n: int = 12) -> list[tuple[str, dict]]:
    """Small meshes holding every field the configuration reads, in `dtype`: a uniform grid
    without and with ghost cells, and with `cells` the same grid as hexahedra with int32 and
    with int64 point ids."""
    import numpy as np

    ranges, vectors = _warmup_fields(cfg, added)
    lo, hi = _warmup_box(cfg)
    axes = [np.linspace(a, b, n) for a, b in zip(lo, hi)]
    x, y, z = np.meshgrid(*axes, indexing="ij")
    rad = np.sqrt((x - x.mean()) ** 2 + (y - y.mean()) ** 2 + (z - z.mean()) ** 2)
    rad = rad / rad.max()
    values: dict[str, Any] = {}
    for name, (a, b) in ranges.items():
        if name in vectors:
            ramps = (rad, (x - lo[0]) / (hi[0] - lo[0]), (y - lo[1]) / (hi[1] - lo[1]))
            values[name] = {c: (a + (b - a) * u).astype(dtype) for c, u in zip("xyz", ramps)}
        else:
            values[name] = (a + (b - a) * rad).astype(dtype)
    fields = {k: {"association": "vertex", "topology": "mesh", "values": v} for k, v in values.items()}
    spacing = dict(zip(("dx", "dy", "dz"), ((b - a) / (n - 1) for a, b in zip(lo, hi))))
    grid = {"coordsets": {"coords": {"type": "uniform", "dims": {"i": n, "j": n, "k": n},
                                     "origin": dict(zip("xyz", lo)), "spacing": spacing}},
            "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}}, "fields": fields,
            "state": {"domain_id": 0}}
    out = [(f"grid {dtype}", grid)]
    # A grid with ghost cells: its kernels see views of the arrays (another Numba specialization).
    ghosts = np.ones((n - 1,) * 3, np.int32)
    ghosts[1:-1, 1:-1, 1:-1] = 0
    out.append((f"grid {dtype}, ghost cells", {**grid, "fields": {
        **fields, cfg["ghost_field"]: {"association": "element", "topology": "mesh", "values": ghosts}}}))
    if cells:
        pts = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1).astype(dtype)
        i, j, k = (a.ravel() for a in np.meshgrid(*(np.arange(n - 1),) * 3, indexing="ij"))
        corner = lambda di, dj, dk: ((i + di) * n + (j + dj)) * n + (k + dk)  # noqa: E731
        hexes = np.stack([corner(0, 0, 0), corner(1, 0, 0), corner(1, 1, 0), corner(0, 1, 0),
                          corner(0, 0, 1), corner(1, 0, 1), corner(1, 1, 1), corner(0, 1, 1)], axis=1).ravel()
        flat = {k: {**f, "values": ({c: a.ravel() for c, a in f["values"].items()} if isinstance(f["values"], dict)
                                    else f["values"].ravel())} for k, f in fields.items()}
        for ids in ("int32", "int64"):
            out.append((f"hexahedra {dtype}, {ids} ids", {
                "coordsets": {"coords": {"type": "explicit", "values": {c: pts[:, d] for d, c in enumerate("xyz")}}},
                "topologies": {"mesh": {"type": "unstructured", "coordset": "coords",
                                        "elements": {"shape": "hex", "connectivity": hexes.astype(ids)}}},
                "fields": flat, "state": {"domain_id": 0}}))
    return out


_WRITES = ("image_name", "type", "phi", "theta", "db_name")  # render keys naming files or cinema databases


def _warmup_config(cfg: Mapping, images: str, cells: bool) -> dict:
    """A validated configuration made into one that runs every pipeline and scene each step,
    writes small images under `images` and no extracts (their kernels are the scenes')."""
    pipes = {k: v for k, v in cfg["pipelines"].items()
             if not (cells and any(f["type"] == "eikonal" for f in v.values()))}  # eikonal: grids only
    scenes = {}
    for sname, sc in cfg["scenes"].items():
        plots = {k: p for k, p in sc["plots"].items() if not p.get("pipeline") or p["pipeline"] in pipes}
        if plots:
            # One plain render each (a cinema render draws the same way, at more angles), into `images`.
            renders = {r: {**{k: v for k, v in rv.items() if k not in _WRITES}, "image_width": 48, "image_height": 32,
                           "image_prefix": os.path.join(images, f"{sname}_{r}_%d")} for r, rv in sc["renders"].items()}
            scenes[sname] = {"plots": plots, "renders": renders}
    queries = {k: {"params": {"expression": q["expression"], "name": q["name"]}} for k, q in cfg["queries"].items()}
    return {"pipelines": pipes, "scenes": scenes, "queries": queries, "params": cfg.get("params"),
            "log": "quiet", "exceptions": "catch"}


class _CompileCounter(logging.Handler):
    """Collects the kernel compiles logged while it is attached (insitu.log's records)."""

    def __init__(self, echo: bool) -> None:
        super().__init__(logging.INFO)
        self.compiled: list[str] = []
        self.where: dict[str, None] = {}
        self.echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("compiling ") and isinstance(record.args, tuple) and len(record.args) == 2:
            self.compiled.append(str(record.args[0]))
            self.where[str(record.args[1])] = None
            if self.echo:
                print(f"  {msg}", flush=True)


def _on_device(obj: Any, cp: Any) -> Any:
    """A Blueprint dict with every NumPy array copied to the device, as a CuPy simulation hands it."""
    import numpy as np

    if isinstance(obj, np.ndarray):
        return cp.asarray(obj)
    if isinstance(obj, dict):
        return {k: _on_device(v, cp) for k, v in obj.items()}
    return obj


#: Points per axis of the warmup's large device meshes: contours, clips and frames of more than
#: 1024 elements, the length from which CuPy's block reductions use one kernel whatever the size.
_LARGE = 48


def _warmup_gpu(gpu: bool | None) -> tuple[Any, str]:
    """CuPy (or None) for the device runs of a warmup, and why not where it is None."""
    from .arrays import _cupy_status

    if gpu is False:
        return None, "not asked (--no-gpu)"
    cp, why = _cupy_status()
    if cp is None and gpu:
        raise RuntimeError(f"--gpu: no CUDA kernels can be compiled here: {why}")
    return cp, why


def warmup_config(config: str | None = None, *, dtypes: tuple[str, ...] = ("float32", "float64"),
                  cells: bool | None = None, verbose: bool = False, gpu: bool | None = None) -> dict:
    """Compile the kernels `config` needs (all of them without one) by running its pipelines
    and scenes once on small meshes of each of `dtypes`: Numba writes them to its disk cache
    (``NUMBA_CACHE_DIR``), where the job's processes find them. Where CuPy and a CUDA device are
    usable, the same meshes run again from device arrays: CuPy writes the CUDA kernels of those
    pipelines to its own disk cache (``CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``).

    Parameters
    ----------
    config : str, optional
        The adaptor's configuration (a file, or text); None: :data:`WARMUP_ALL`, grids and cells.
    dtypes : tuple of str
        Floating-point types of the simulation's fields.
    cells : bool, optional
        Also run meshes of cells (hexahedra, int32 and int64 ids); default: without a config only.
    verbose : bool
        Print each compile as it starts.
    gpu : bool, optional
        Also the device runs (CUDA kernels); default: where CuPy and a CUDA device are usable.

    Returns
    -------
    dict
        ``runs`` ([(mesh, seconds)]), ``compiled`` (kernel names), ``cache`` (where they went),
        ``errors`` (what failed on the small meshes), ``frames`` (images drawn), ``gpu`` (None where
        the device runs were done, else why not).

    Raises
    ------
    RuntimeError
        `gpu` is True where CuPy or a CUDA device is missing.
    """
    import tempfile
    import time

    from . import arrays

    cp, no_gpu = _warmup_gpu(gpu)
    ad = _adaptor_package()
    cfg = ad.load(WARMUP_ALL if config is None else config)
    cells = config is None if cells is None else cells
    counter = _CompileCounter(verbose)
    loggers = [logging.getLogger(p) for p in ("insitu", "adaptors", "render", "solvers")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(counter)
        lg.setLevel(logging.INFO)
    runs, errors, frames = [], [], 0
    try:
        with tempfile.TemporaryDirectory(prefix="insitu-warmup-") as images:
            for dtype in dtypes:
                for cell_mesh in (False, True) if cells else (False,):
                    wcfg = _warmup_config(cfg, images, cell_mesh)
                    part = slice(2, None) if cell_mesh else slice(0, 2)  # hexahedra, or the grids
                    chosen = _warmup_meshes(cfg, ad.pipelines.added_fields, dtype, cell_mesh)[part]
                    if cp is not None:
                        # The same meshes from device arrays (the CUDA kernels), small and large:
                        # CuPy's block reductions compile a kernel per block size, which it picks
                        # from the length reduced (below 1025 elements), so the short arrays of a
                        # small mesh and the long ones of a job's each need theirs.
                        large = _warmup_meshes(cfg, ad.pipelines.added_fields, dtype, cell_mesh, n=_LARGE)[part]
                        chosen += [(f"{label}, device", _on_device(mesh, cp)) for label, mesh in chosen]
                        chosen += [(f"{label}, {_LARGE}^3, device", _on_device(mesh, cp)) for label, mesh in large]
                    for label, mesh in chosen:
                        t0 = time.perf_counter()
                        with ad.Adaptor(wcfg) as a:
                            a.execute(0, 0.0, mesh)
                            res = a.results()
                        errors += [f"{label}: {e}" for e in res["errors"]]
                        frames += len(res["frames"])
                        runs.append((label, time.perf_counter() - t0))
                        if verbose:
                            print(f"  {label}: {runs[-1][1]:.1f} s", flush=True)
            if cp is not None and arrays.cupy_or_none() is not None:  # the adios2 extract's device frames
                from .stream.frames import device_frame_bytes  # (extracts are not run here)

                device_frame_bytes(cp.zeros((2, 2, 4), cp.uint8))
    finally:
        for lg, lvl in zip(loggers, levels):
            lg.removeHandler(counter)
            lg.setLevel(lvl)
    return {"runs": runs, "compiled": counter.compiled, "cache": list(counter.where), "errors": errors,
            "frames": frames, "gpu": None if cp is not None else no_gpu}


def warmup(args: argparse.Namespace) -> int:
    """``insitu warmup [CONFIG]``: 0 done, 1 configuration rejected or a run failed."""
    import time

    ad = _adaptor_package()
    where = os.environ.get("NUMBA_CACHE_DIR") or "beside the installed sources (__pycache__), else ~/.cache/numba"
    print(f"insitu warmup: compiling the kernels of {args.config or 'every filter and plot'} "
          f"({', '.join(args.dtype)}); Numba's cache: {where}", flush=True)
    t0 = time.perf_counter()
    try:
        out = warmup_config(args.config, dtypes=tuple(args.dtype), cells=args.cells or None, verbose=args.verbose,
                            gpu=args.gpu)
    except ad.ConfigError as e:
        print(f"insitu warmup: {args.config}: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:
        print(f"insitu warmup: {e}", file=sys.stderr)
        return 1
    from .log import cupy_cache_dir

    if out["gpu"] is None:
        print(f"insitu warmup: CUDA kernels compiled too (device arrays); CuPy's cache: {cupy_cache_dir()}",
              flush=True)
    else:
        print(f"insitu warmup: CPU kernels only, no CUDA kernels: {out['gpu']}", flush=True)
    for problem in out["errors"]:
        print(f"insitu warmup: failed on a small mesh (its kernels may compile in the job): {problem}",
              file=sys.stderr)
    what = f"{len(out['compiled'])} kernels compiled" if out["compiled"] else "nothing to compile: all were cached"
    print(f"insitu warmup: done in {time.perf_counter() - t0:.1f} s, {what}", flush=True)
    return 1 if out["errors"] else 0


# --------------------------------------------------------------------------- replay


def recorded_steps(paths: list[str]) -> list[tuple[int, float, list[str]]]:
    """Group the files of an ``hdf5`` extract by the step they recorded.

    Parameters
    ----------
    paths : list of str
        Files, directories (their ``*.h5`` files) or glob patterns.

    Returns
    -------
    list of (step, time, files)
        Sorted by step; each step's files sorted by name (``<path>.rank<r>.h5``: rank order).
    """
    import glob

    import h5py

    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "*.h5")) + glob.glob(os.path.join(p, "*.hdf5")))
        elif glob.has_magic(p):
            files += sorted(glob.glob(p))
        else:
            files.append(p)
    if not files:
        raise ValueError(f"no recorded files in {' '.join(paths)}")
    steps: dict[int, tuple[float, list[str]]] = {}
    for path in files:
        with h5py.File(path, "r") as f:
            step, time = int(f.attrs.get("step", 0)), float(f.attrs.get("time", 0.0))
        steps.setdefault(step, (time, []))[1].append(path)
    return [(s, t, sorted(fs, key=_rank_order)) for s, (t, fs) in sorted(steps.items())]


def _rank_order(path: str) -> tuple[int, str]:
    m = re.search(r"\.rank(\d+)\.[^.]+$", path)
    return (int(m.group(1)) if m else -1, path)


def _world() -> Any:
    """COMM_WORLD when started by an MPI launcher with several ranks, else None (one process)."""
    from .log import rank

    if rank() is None:
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None


def replay(args: argparse.Namespace) -> int:
    """``insitu replay RECORDING... --config CONFIG``: 0 every step ran, 1 some failed, 2 bad input."""
    import time

    from .log import Progress

    ad = _adaptor_package()
    comm = _world()
    rank, size = (comm.Get_rank(), comm.Get_size()) if comm is not None else (0, 1)

    def say(msg: str, err: bool = False) -> None:
        if rank == 0:
            print(f"insitu replay: {msg}", file=sys.stderr if err else sys.stdout, flush=True)

    try:
        cfg = ad.load(args.config)
        steps = recorded_steps(args.recording)
    except ad.ConfigError as e:
        say(f"{args.config}: {e}", err=True)
        return 2
    except (OSError, ValueError) as e:
        say(str(e), err=True)
        return 2
    if args.steps:
        lo, _, hi = args.steps.partition(":")
        steps = [s for s in steps if (not lo or s[0] >= int(lo)) and (not hi or s[0] < int(hi))]
    failed = 0
    t_start = time.perf_counter()
    # The bar (rank 0, stderr a terminal or --progress) stands for the per-step lines; a failed step is
    # always named.
    bar = Progress(len(steps), "insitu replay", enabled=args.progress if rank == 0 else False)
    with ad.Adaptor(args.config, comm) as a, bar:
        for step, t, files in steps:
            t0 = time.perf_counter()
            # Each rank takes every size-th file: a run recorded on as many ranks replays rank by rank.
            domains = [d for path in files[rank::size] for d in read_mesh(path, cfg["ghost_field"])[0]]
            ok = a.execute(step, t, domains)
            failed += not ok
            line = f"step {step} {'ok' if ok else 'FAILED'} ({time.perf_counter() - t0:.2f} s)"
            if rank == 0 and (not ok or not bar.enabled):
                bar.write(f"insitu replay: {line}", file=sys.stdout)
            bar.update(note=f"step {step}")
        errors = a.results()["errors"]
    for problem in errors:
        say(f"error: {problem}", err=True)
    say(f"{len(steps)} steps replayed on {size} rank(s) in {time.perf_counter() - t_start:.1f} s, {failed} failed")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="insitu", description="in-situ GPU visualization runtime")
    ap.add_argument("--version", action="version", version=f"insitu {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, CUDA devices, MPI and NCCL on this machine")
    vp = sub.add_parser("view", help="a web page showing a frame stream, with steering",
                        description="Serve a local web page showing the frames of STREAM (a live ADIOS2 SST "
                                    "stream, or a BP5 file replayed) and forward the page's controls to the "
                                    "simulation as steering on STREAM.steer. The URL it prints holds a secret token: "
                                    "only requests carrying it are answered. Runs until Ctrl-C.")
    vp.add_argument("stream", metavar="STREAM", help="SST stream name (the FrameWriter's) or BP5 directory")
    vp.add_argument("--engine", choices=("SST", "BP5"), type=str.upper,
                    help="default: BP5 when STREAM is a directory, else SST")
    vp.add_argument("--host", default="127.0.0.1",
                    help="address to serve on (default 127.0.0.1; another one serves the network: a warning says so)")
    vp.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    vp.add_argument("--png", metavar="DIR", help="also write every received frame as DIR/frame_STEP.png")
    vp.add_argument("--mp4", metavar="FILE", help="also write a movie of the received frames (finished at the end)")
    vp.add_argument("--rate", type=_positive, default=10.0, metavar="FPS",
                    help="frames/s of a BP5 replay and of the movie (default 10)")
    vp.add_argument("--no-browser", action="store_true", help="do not open a browser")
    vp.add_argument("--steer", action=argparse.BooleanOptionalAction, default=None,
                    help="forward steering to the simulation (default: on for SST)")
    vp.add_argument("--timeout", type=_positive, default=30.0, metavar="S",
                    help="seconds to wait for a live stream's writer, or for the next step of a BP5 file "
                         "still being written (default 30)")
    vp.add_argument("--exit-at-end", action="store_true", help="exit when the stream ends instead of serving on")
    cp = sub.add_parser("check", help="validate a configuration as the adaptor would; print what each step does",
                        description="Validate CONFIG exactly as the adaptor does at initialize (every problem "
                                    "listed with its path) and print what each executed step will do. With --mesh, "
                                    "a mesh recorded by an hdf5 extract is checked as execute would check it: "
                                    "the fields the configuration names, its queries and triggers. Exit status: "
                                    "0 valid, 1 rejected, 2 mesh file unreadable.")
    cp.add_argument("config", metavar="CONFIG", help="YAML/JSON file (or text) of the adaptor's configuration")
    cp.add_argument("--mesh", metavar="SAMPLE.h5", help="a step recorded by an hdf5 extract")
    wp = sub.add_parser("warmup", help="compile the kernels a configuration needs ahead of a job",
                        description="Compile the Numba kernels CONFIG needs (every kernel without CONFIG) by "
                                    "running its pipelines and scenes once on small meshes, so that the job's "
                                    "first step does not stall. Numba keeps them in its disk cache: the directory "
                                    "NUMBA_CACHE_DIR names (set it for read-only installs; on a cluster a shared "
                                    "directory, or a node-local one warmed on every node), else __pycache__ beside "
                                    "the sources. Where CuPy and a CUDA device are usable, the meshes also run from "
                                    "device arrays: CuPy keeps those CUDA kernels in CUPY_CACHE_DIR (else "
                                    "~/.cupy/kernel_cache). Run it with the job's Python, cache variables, CPU and "
                                    "GPU type.")
    wp.add_argument("config", metavar="CONFIG", nargs="?", help="the adaptor's configuration (default: everything)")
    wp.add_argument("--dtype", nargs="+", choices=("float32", "float64"), default=["float32", "float64"],
                    help="floating-point types of the simulation's fields (default: both)")
    wp.add_argument("--cells", action="store_true",
                    help="also meshes of cells (unstructured hexahedra); always without CONFIG")
    wp.add_argument("--gpu", action=argparse.BooleanOptionalAction, default=None,
                    help="also compile the CUDA kernels (CuPy's, from device arrays; default: where CuPy and a "
                         "CUDA device are usable), into CUPY_CACHE_DIR (else ~/.cupy/kernel_cache)")
    wp.add_argument("-v", "--verbose", action="store_true", help="print each kernel as it compiles")
    rp = sub.add_parser("replay", help="re-run a configuration on the meshes an hdf5 extract recorded",
                        description="Run the adaptor with CONFIG on the steps an hdf5 extract recorded, step by "
                                    "step, as the simulation would have: frames and extracts as CONFIG says. "
                                    "Under mpiexec each rank takes every N-th file of a step (a run recorded on "
                                    "N ranks replays rank by rank on N ranks).")
    rp.add_argument("recording", metavar="RECORDING", nargs="+",
                    help="the extract's files (one per step and rank), a directory of them, or a glob pattern")
    rp.add_argument("--config", required=True, metavar="CONFIG", help="the adaptor's configuration to run")
    rp.add_argument("--steps", metavar="A:B", help="only steps A <= step < B (either end may be left out)")
    rp.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="a progress bar on stderr in place of a line per step (default: when stderr is a terminal)")
    args = ap.parse_args(argv)
    if args.command == "info":
        for k, v in info().items():
            print(f"{k:>15}: {v}")
    elif args.command == "view":
        return view(args)
    elif args.command == "check":
        return check(args)
    elif args.command == "warmup":
        return warmup(args)
    elif args.command == "replay":
        return replay(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
