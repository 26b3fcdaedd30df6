"""Run under mpiexec: distributed compositing equals the serial reference.

Usage: mpiexec -n N python tests/mpi/composite_check.py [--backend numpy|cupy] [--transport NAME]
       [--nccl auto|on|off|given] [--sizes 37x53 256x256 ...] [--rgba-dtype float32|float64]
       [--expect-transport NAME] [--no-host-transfers] [--repeat] [--evict-on-rank R] [--fault KIND]

Every rank makes a seeded RGBA (premultiplied) + depth image: integer depths so
that ranks tie, an ``inf`` background, some opaque and some empty pixels. For every
method, mode, visibility order and a root that moves around, the root compares the
result with :func:`depth_composite` / :func:`over_composite` of all ranks' images
remade from the same seeds: exact for depth, within 1e-6 for over.
Prints "OK ranks=N ..." on rank 0; exits 1 on a mismatch.

With ``--backend cupy`` the images live on the GPU; unless a transport is staged MPI
(``mpi-staged``) no host transfer may be counted, where it is some must be;
``--no-host-transfers`` runs the calls inside :func:`insitu.no_host_transfers`;
``--repeat`` calls each case twice and counts (and guards) only the second call, which
reuses the configuration the first set up (p2p uploads its flag addresses once, counted).
``--transport`` forces a transport for every pair; ``--evict-on-rank R`` makes rank R
forget its kept configurations after every other call (the others keep theirs); ``--nccl`` passes the deprecated
``nccl=True/False``, or with ``given`` a NCCL communicator the script made itself.

With ``--fault`` the ranks call wrongly (shape, dtype, order, nodepth, mode, hostipc, peers),
one stays away (absent), the others come after rank 0 gave up (late), or the last rank
stops after the agreement (stall); every rank
that calls prints "rank R: ErrorType: message" and the script exits 0 if each raised.
"""

import argparse
import contextlib
import sys
import time

import numpy as np
from mpi4py import MPI

from insitu import PeerTimeoutError, arrays
from render._compositor import cache, drop
from render.composite import composite, depth_composite, over_composite

METHODS = ("direct-send", "binary-swap", "radix-k", "auto")
TOL_OVER = 1e-6


def make_image(rank: int, h: int, w: int, dtype=np.float32):
    """A seeded premultiplied RGBA image and its depth (host arrays)."""
    rng = np.random.default_rng([2024, rank, h, w])
    alpha = rng.random((h, w, 1))
    alpha[rng.random((h, w, 1)) < 0.2] = 1.0  # opaque: hides everything behind
    alpha[rng.random((h, w, 1)) < 0.1] = 0.0
    rgba = np.concatenate([rng.random((h, w, 3)) * alpha, alpha], axis=2)
    depth = rng.integers(0, 5, (h, w)).astype(np.float64)  # few values: ranks tie often
    background = rng.random((h, w)) < 0.25
    depth[background] = np.inf
    rgba[background] = 0.0
    return rgba.astype(dtype), depth.astype(np.float32)


def cases(size: int, sizes):
    """(h, w, method, mode, order, root) for every combination worth checking."""
    perm = [int(r) for r in np.random.default_rng(99 + size).permutation(size)]
    orders = {"rank order": list(range(size)), "permuted": perm, "reversed": list(range(size))[::-1]}
    i = 0
    for h, w in sizes:
        for method in METHODS:
            yield h, w, method, "depth", None, i % size
            i += 1
            for name, order in orders.items():
                yield h, w, method, "over", (name, order), i % size
                i += 1


def reference(size, h, w, mode, order, dtype=np.float32):
    imgs = [make_image(r, h, w, dtype) for r in range(size)]
    if mode == "depth":
        return depth_composite([i[0] for i in imgs], [i[1] for i in imgs])
    return over_composite([imgs[r][0] for r in order]), None


def run_checks(args, comm, xp) -> list[str]:
    size, rank = comm.size, comm.rank
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes]
    todo = list(cases(size, sizes))
    inputs = {}
    dtype = np.dtype(args.rgba_dtype)
    for h, w in sizes:
        rgba, depth = make_image(rank, h, w, dtype)
        inputs[h, w] = (arrays.to_device(rgba), arrays.to_device(depth)) if xp is not np else (rgba, depth)
    nccl = given_nccl(comm) if args.nccl == "given" else {"auto": None, "on": True, "off": False}[args.nccl]
    results, transports, setup = [], set(), 0
    with arrays.count_transfers() as tc:
        for i, (h, w, method, mode, order, root) in enumerate(todo):
            if rank == args.evict_on_rank and i % 2:
                for key in list(cache):
                    drop(key)
            rgba, depth = inputs[h, w]
            info = {}

            def call():
                return composite(rgba, depth if mode == "depth" else None, comm=comm, mode=mode, method=method,
                                 order=None if order is None else order[1], root=root, transport=args.transport,
                                 nccl=nccl, timeout=60, info=info)

            if args.repeat:  # a first call sets the configuration up; the second one is measured
                with arrays.count_transfers() as first:
                    call()
                setup += first.calls
            with arrays.no_host_transfers() if args.no_host_transfers else contextlib.nullcontext():
                out = call()
            transports.add(info["transport"])
            if (out is not None) != (rank == root):
                results.append(f"rank {rank}: root={root} but got {'a result' if out is not None else 'None'}")
                out = None
            results.append(out)
    calls = tc.calls - setup
    errors = [r for r in results if isinstance(r, str)]
    results = [r for r in results if not isinstance(r, str)]
    errors += check_transfers(transports, calls, args)
    for (h, w, method, mode, order, root), out in zip(todo, results):
        if rank != root:
            continue
        errors += compare(out, reference(size, h, w, mode, None if order is None else order[1], dtype),
                          f"{h}x{w} {method} {mode}{'' if order is None else ' ' + order[0]} root={root}")
    if rank == 0:
        print(f"ranks={size} transports={sorted(transports)} host_transfers={calls} cases={len(todo)}"
              + (f" setup_transfers={setup}" if args.repeat else ""), flush=True)
    return errors


def given_nccl(comm):
    """A NCCL communicator made by the caller, as an application that has one passes it."""
    from cupy.cuda import nccl

    uid = comm.bcast(nccl.get_unique_id() if comm.rank == 0 else None, root=0)
    return nccl.NcclCommunicator(comm.size, uid, comm.rank)


def check_transfers(transports, calls, args) -> list[str]:
    errors = []
    if args.expect_transport and transports != {args.expect_transport}:
        errors.append(f"expected transport {args.expect_transport}, used {sorted(transports)}")
    labels = {name for t in transports for name in t.split("+")}
    if "mpi-staged" not in labels and calls:
        errors.append(f"{calls} host<->device transfers counted on a path that must make none ({sorted(transports)})")
    if "mpi-staged" in labels and not calls:
        errors.append("the staged MPI path counted no host<->device transfers")
    return errors


def compare(out, ref, label: str) -> list[str]:
    if isinstance(out, tuple):
        got_rgba, got_depth = (arrays.to_host(a) for a in out)
    else:
        got_rgba, got_depth = arrays.to_host(out), None
    ref_rgba, ref_depth = ref
    if got_rgba.shape != ref_rgba.shape or got_rgba.dtype != ref_rgba.dtype:
        return [f"{label}: got {got_rgba.shape} {got_rgba.dtype}, want {ref_rgba.shape} {ref_rgba.dtype}"]
    if ref_depth is not None:
        bad = ~((got_rgba == ref_rgba).all(axis=2) & (got_depth == ref_depth))
        return [f"{label}: {int(bad.sum())} pixels differ from depth_composite"] if bad.any() else []
    err = float(np.abs(got_rgba.astype(np.float64) - ref_rgba).max()) if got_rgba.size else 0.0
    return [f"{label}: max |over - over_composite| = {err:.2e} > {TOL_OVER}"] if err > TOL_OVER else []


def run_fault(args, comm, xp) -> bool:
    rank, last = comm.rank, comm.size - 1
    h, w = 9, 7
    rgba, depth = make_image(rank, h, w, np.float64 if (args.fault == "dtype" and rank == last) else np.float32)
    if args.fault == "shape" and rank == last:
        rgba, depth = make_image(rank, h, w + 1)
    kw = dict(comm=comm, timeout=2.0, transport=args.transport)
    if args.fault == "hostipc":
        kw["transport"] = "ipc"
    if args.fault == "peers":  # per-peer choices whose two ends disagree
        kw["transport"] = {p: ("mpi" if rank == 0 else "ipc") for p in range(comm.size) if p != rank}
    if args.fault == "order":
        kw.update(mode="over", order=[0] * comm.size)
        depth = None
    if args.fault == "nodepth" and rank == last:
        depth = None
    if args.fault == "mode":
        kw.update(mode="over" if rank == last else "depth")
        depth = None if rank == last else depth
    if xp is not np:
        rgba = arrays.to_device(rgba)
        depth = None if depth is None else arrays.to_device(depth)
    if args.fault == "absent":
        comm = comm.Dup()  # rank 0 waits on this one alone; the world barrier below is apart
        kw["comm"] = comm
        if rank != 0:
            time.sleep(4)  # longer than rank 0's timeout: it must give up, not hang
            return True
    if args.fault == "stall" and rank == comm.size - 1:
        # This rank agrees to composite, then never moves a strip (hung after the agreement).
        import render._compositor

        def stalled(*a, **k):
            time.sleep(4)
            raise PeerTimeoutError(f"rank {rank} stalled on purpose")

        render._compositor.Compositor.run = stalled
    if args.fault == "late":
        comm = comm.Dup()
        kw.update(comm=comm, timeout=1.0 if rank == 0 else 2.0)
        if rank != 0:
            # Rank 0 has given up by now; what it left behind must not hold these ranks.
            time.sleep(3)
    t0 = time.monotonic()
    try:
        composite(rgba, depth, **kw)
    except (ValueError, PeerTimeoutError) as exc:
        print(f"rank {rank}: {type(exc).__name__}: {exc} (after {time.monotonic() - t0:.1f} s)", flush=True)
        return True
    print(f"rank {rank}: no error", flush=True)
    return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="numpy", choices=("numpy", "cupy"))
    ap.add_argument("--transport", default=None, help="force this transport for every pair")
    ap.add_argument("--nccl", default="auto", choices=("auto", "on", "off", "given"))
    ap.add_argument("--sizes", nargs="+", default=["37x53", "256x256", "3x5"], help="HxW")
    ap.add_argument("--rgba-dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--expect-transport", default=None)
    ap.add_argument("--no-host-transfers", action="store_true")
    ap.add_argument("--repeat", action="store_true")
    ap.add_argument("--evict-on-rank", type=int, default=None)
    ap.add_argument("--fault", default=None,
                    choices=("shape", "dtype", "order", "nodepth", "mode", "hostipc", "peers", "absent", "late",
                             "stall"))
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    xp = np
    if args.backend == "cupy":
        import cupy as xp

        arrays.select_device(comm)
    if args.fault:
        ok = run_fault(args, comm, xp)
        MPI.COMM_WORLD.Barrier()
        sys.exit(0 if ok else 1)
    errors = run_checks(args, comm, xp)
    everyone = comm.gather(errors, root=0)
    if comm.rank == 0:
        bad = [e for errs in everyone for e in errs]
        for e in bad[:20]:
            print("FAILED", e, flush=True)
        if not bad:
            print(f"OK ranks={comm.size} backend={args.backend}", flush=True)
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
