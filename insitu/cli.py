"""The ``insitu`` command line.

    insitu info      what this machine offers insitu: versions, CUDA devices, MPI, NCCL
    insitu view      a web page showing a frame stream (live SST or a BP5 file), with steering
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="insitu", description="in-situ GPU visualization runtime")
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
    args = ap.parse_args(argv)
    if args.command == "info":
        for k, v in info().items():
            print(f"{k:>15}: {v}")
    elif args.command == "view":
        return view(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
