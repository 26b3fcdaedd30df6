"""The ``insitu`` command line (``python -m insitu`` is the same).

    insitu --version
    insitu info      what this machine offers insitu: versions, CUDA devices, MPI, NCCL
    insitu view      a web page showing a frame stream (live SST or a BP5 file), with steering
    insitu check     validate a configuration as the adaptor would (and against a recorded mesh);
                     print what each step will do
    insitu warmup    compile the kernels a configuration needs (or all of them) ahead of a job

``check`` and ``warmup`` use the adaptor package, the layer above this runtime: it is found
through its ``insitu.adaptor`` entry point (:mod:`insitu.plugins`) when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
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
        if not ipaddress.ip_address(v.host.split("%")[0]).is_loopback:
            err(f"warning: serving on {args.host} ({v.host}), not a loopback address: anyone who can reach "
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

    out = []
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
    args = ap.parse_args(argv)
    if args.command == "info":
        for k, v in info().items():
            print(f"{k:>15}: {v}")
    elif args.command == "view":
        return view(args)
    elif args.command == "check":
        return check(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
