"""The paper's listings on the Spark engine (insitu.engine.spark), runnable as a program.

    python examples/spark_listings.py --master local[2] --listing all

Each listing is a function ``listingN(engine, ...)`` returning its result on the
driver; ``referenceN(...)`` computes the same thing without Spark (a single process,
or the embedded engine running the same per-block functions), and ``main`` checks
that the two agree. The per-block functions below run inside the worker daemons (the
tasks only send command packages).

(1) load, send, exec, render, collect: per-block isosurface drawn with OpenGL in the
    daemon (``exec_gl``), images depth-composited on the driver.
(2) cache and iterate: blocks cached once, smoothed N times (one package per
    partition per iteration).
(6) sort-last volume rendering: each block ray cast, the images grouped by depth
    (``gpu_shuffle(..., "key")``), composited per depth, then front to back.
(7) isosurface with halo: a halo shuffle fills the ghosts, then marching cubes per
    block (the registered kernel ``contour.marching_cubes``).
(8) iterative eikonal: a halo exchange every iteration, ``solvers.eikonal.update_block``
    per block; optional checkpoints every K iterations (``--kill-after`` kills the worker
    daemons mid-iteration, ``--kill-executor-after`` an executor JVM: the run recovers from
    the last checkpoint).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from insitu import Domain, to_host  # noqa: E402
from insitu.arrays import get_array_module  # noqa: E402

# --------------------------------------------------------------------------- data


def sphere_field(dims) -> np.ndarray:
    """Distance from the grid's centre, in cells (a sphere at every level)."""
    x, y, z = (np.arange(n, dtype=np.float64) - (n - 1) / 2 for n in dims)
    return np.sqrt(x[:, None, None] ** 2 + y[None, :, None] ** 2 + z[None, None, :] ** 2)


def padded_block(field: np.ndarray, domain: Domain, gid: int) -> np.ndarray:
    """Block `gid` with its interior from `field` and zero ghosts (filled by a halo shuffle)."""
    b = domain.block(gid)
    a = np.zeros(b.padded_shape)
    a[b.interior] = field[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))]
    return a


def load_sphere_block(gid, dims, nblocks):
    """A loader the daemons call: block `gid` of the sphere field (zero ghosts)."""
    dom = Domain.create(dims, nblocks=nblocks, ghost=1)
    return padded_block(sphere_field(dims), dom, gid)


# --------------------------------------------------------------------------- per-block functions (daemons)


def contour_block(block, gid, domain: Domain, level: float):
    """Marching cubes over the cells block `gid` owns (``contour.marching_cubes``)."""
    from insitu.pool.kernels import lookup

    b, g = domain.block(gid), domain.ghost
    hi = tuple(min(b.hi[a], domain.dims[a] - 1) - (b.lo[a] - g) for a in range(3))
    origin = tuple(domain.origin[a] + (b.lo[a] - g) * domain.spacing[a] for a in range(3))
    return lookup("contour.marching_cubes")(block, level, region=((g, g, g), hi), spacing=domain.spacing,
                                            origin=origin)


def draw_mesh(mesh, bounds, width: int, height: int):
    """Draw a mesh with OpenGL (the worker's context is current): (H, W, 5) rgba + depth."""
    from render.camera import Camera
    from render.surface import render_mesh

    verts, faces, normals = mesh[:3]
    if len(faces) == 0:
        out = get_array_module(verts).zeros((height, width, 5), np.float32)
        out[..., 4] = np.inf
        return out
    rgba, depth = render_mesh(verts, faces, normals, width=width, height=height,
                              camera=Camera.fit(bounds, azimuth=30, elevation=20))
    return get_array_module(rgba).concatenate([rgba, depth[..., None]], axis=-1)  # where it was drawn


def smooth(block):
    """One Jacobi smoothing sweep of the interior (ghosts kept)."""
    out = block.copy()
    out[1:-1, 1:-1, 1:-1] = (block[2:, 1:-1, 1:-1] + block[:-2, 1:-1, 1:-1] + block[1:-1, 2:, 1:-1]
                             + block[1:-1, :-2, 1:-1] + block[1:-1, 1:-1, 2:] + block[1:-1, 1:-1, :-2]) / 6
    return out


def volume_tf():
    from render.volume import TransferFunction

    return TransferFunction([(0.0, (1.0, 0.3, 0.1, 0.35)), (4.0, (0.2, 0.5, 1.0, 0.1)), (8.0, (0.1, 0.1, 0.9, 0.0))],
                            unit_length=1.0)


def volume_camera(domain: Domain):
    from render.camera import Camera

    last = [o + (n - 1) * s for o, n, s in zip(domain.origin, domain.dims, domain.spacing)]
    return Camera.fit([domain.origin[0], last[0], domain.origin[1], last[1], domain.origin[2], last[2]],
                      azimuth=35, elevation=25)


def ray_cast_block(block, gid, domain: Domain, width: int, height: int):
    """Block `gid` ray cast for sort-last compositing: (H, W, 5) rgba + depth."""
    from render.volume import ray_cast_blocks

    rgba, depth = ray_cast_blocks(domain, {gid: block}, volume_camera(domain), width, height, volume_tf(),
                                  early_termination=1.0)[gid]
    return get_array_module(rgba).concatenate([rgba, depth[..., None]], axis=-1)


def depth_level(gid, domain: Domain) -> int:
    """The visibility level of a block: the sum of its per-axis slab distances from the
    eye (``render.volume.visibility_order``'s sort key). No ray meets two blocks of one
    level, so a level's images composite in any order."""
    import bisect

    eye = volume_camera(domain).position
    level = 0
    for a in range(3):
        planes = [domain.origin[a] + o * domain.spacing[a] for o in domain.offsets[a][1:-1]]
        level += abs(domain.coords(gid)[a] - bisect.bisect_right(planes, eye[a]))
    return level


def composite_images(images):
    """Images (H, W, 5) given front to back, composited with "over" (depth: the nearest)."""
    from render.volume import over

    xp = get_array_module(images[0])
    out = images[0].copy()
    for im in images[1:]:
        out[..., :4] = over(out[..., :4], im[..., :4])
        out[..., 4] = xp.minimum(out[..., 4], im[..., 4])
    return out


def eikonal_block(gid, dims, nblocks, seed, two_layer: bool = True):
    """Block `gid` of an eikonal problem, stacked on axis 0: T, scratch, slowness, seeds."""
    dom = Domain.create(dims, nblocks=nblocks, ghost=1)
    b = dom.block(gid)
    speed = eikonal_speed(dims, two_layer)
    out = np.empty((4, *b.padded_shape))
    out[0] = np.inf
    out[2] = np.inf
    out[2][b.interior] = 1.0 / speed[tuple(slice(lo, hi) for lo, hi in zip(b.lo, b.hi))]
    out[3] = 0.0
    if all(lo <= s < hi for s, lo, hi in zip(seed, b.lo, b.hi)):
        loc = tuple(s - lo + 1 for s, lo in zip(seed, b.lo))
        out[0][loc] = 0.0
        out[3][loc] = 1.0
    out[1] = out[0]
    return out


def eikonal_speed(dims, two_layer: bool = True) -> np.ndarray:
    sp = np.ones(dims)
    if two_layer:
        sp[dims[0] // 2:] = 2.0
    return sp


def eikonal_step(block, spacing, iterations: int):
    """``solvers.eikonal.update_block`` on a stacked block; T stays in ``block[0]``."""
    from solvers.eikonal import update_block

    T, out, _ = update_block(block[0], block[1], block[2], block[3] != 0, spacing, iterations=iterations)
    if T is not block[0] and not np.shares_memory(T, block[0]):
        block[0][...] = T
    return block


# --------------------------------------------------------------------------- the listings


def _bounds(dims):
    return [0.0, dims[0] - 1.0, 0.0, dims[1] - 1.0, 0.0, dims[2] - 1.0]


def listing1(engine, *, dims=(24, 22, 20), nblocks=4, level=7.0, size=(64, 48), npartitions=2):
    """Load, send, exec, render, collect: (rgba, depth) of the composited surface, and per-block images."""
    from render.composite import depth_composite

    dom = Domain.create(dims, nblocks=nblocks, ghost=1)
    field = sphere_field(dims)
    data = {g: dom.extract(field, g) for g in range(dom.nblocks)}  # loaded on the driver, sent by Spark
    images = (engine.blocks(data, npartitions).send_gpu()
              .exec_gpu(contour_block, None, dom, level, with_key=True)
              .exec_gl(draw_mesh, _bounds(dims), *size)
              .recv_gpu())
    keys = sorted(images)
    rgba, depth = depth_composite([images[k][..., :4] for k in keys], [images[k][..., 4] for k in keys])
    return rgba, depth, images


def reference1(*, dims=(24, 22, 20), nblocks=4, level=7.0, size=(64, 48), device: int | None = None):
    """Listing 1 on the embedded engine (one in-process worker on `device`, as the Spark
    daemons are: meshes on a GPU are drawn by its rasterizer), same per-block functions."""
    from insitu.engine import EmbeddedEngine
    from render.composite import depth_composite

    dom = Domain.create(dims, nblocks=nblocks, ghost=1)
    field = sphere_field(dims)
    with EmbeddedEngine(None, device=device) as eng:
        images = (eng.blocks({g: dom.extract(field, g) for g in range(dom.nblocks)})
                  .exec_gpu(contour_block, None, dom, level, with_key=True)
                  .exec_gl(draw_mesh, _bounds(dims), *size).recv_gpu())
    images = {k: to_host(v) for k, v in images.items()}
    keys = sorted(images)
    rgba, depth = depth_composite([images[k][..., :4] for k in keys], [images[k][..., 4] for k in keys])
    return rgba, depth, images


def listing2(engine, *, dims=(16, 14, 12), nblocks=4, iterations=5, npartitions=2):
    """Cache and iterate: blocks loaded by the daemons, cached, smoothed `iterations` times."""
    blocks = engine.blocks(load_sphere_block, npartitions, keys=range(nblocks), args=(dims, nblocks)).cache_gpu()
    for _ in range(iterations):
        blocks = blocks.exec_gpu(smooth).cache_gpu(drop_sources=True)
    out = blocks.recv_gpu()
    blocks.drop_gpu()
    return out


def reference2(*, dims=(16, 14, 12), nblocks=4, iterations=5):
    out = {}
    for g in range(nblocks):
        a = load_sphere_block(g, dims, nblocks)
        for _ in range(iterations):
            a = smooth(a)
        out[g] = a
    return out


def listing6(engine, *, dims=(20, 18, 16), nblocks=8, size=(48, 40), npartitions=2):
    """Sort-last volume rendering: blocks ray cast, grouped by depth, composited: (H, W, 5)."""
    dom = Domain.create(dims, nblocks=nblocks, ghost=1)
    field = sphere_field(dims)
    blocks = engine.blocks({g: dom.extract(field, g) for g in range(dom.nblocks)}, npartitions)
    images = blocks.exec_gpu(ray_cast_block, None, dom, *size, with_key=True).cache_gpu()
    per_depth = engine.gpu_shuffle(images, "key", key=functools.partial(depth_level, domain=dom))
    layers = per_depth.exec_gpu(composite_images).cache_gpu()  # one image per depth level
    final = engine.gpu_shuffle(layers, "key", key=_zero).exec_gpu(composite_images).recv_gpu()
    images.drop_gpu()
    layers.drop_gpu()
    return final[0]


def _zero(_key):
    return 0


def reference6(*, dims=(20, 18, 16), nblocks=8, size=(48, 40)):
    """The whole field ray cast in one process: (H, W, 4) rgba."""
    from render.volume import ray_cast

    dom = Domain.create(dims, nblocks=nblocks, ghost=1)
    rgba, depth = ray_cast(sphere_field(dims), volume_camera(dom), *size, volume_tf(), early_termination=1.0)
    return to_host(rgba), to_host(depth)


def listing7(engine, *, dims=(20, 18, 16), nblocks=4, level=5.5, npartitions=2):
    """Isosurface with halo: (verts, faces) merged from the blocks' meshes."""
    dom = Domain.create(dims, nblocks=nblocks, ghost=1)
    field = sphere_field(dims)
    blocks = engine.blocks({g: padded_block(field, dom, g) for g in range(dom.nblocks)}, npartitions)
    meshes = (engine.gpu_shuffle(blocks, "halo", domain=dom)
              .exec_gpu(contour_block, None, dom, level, with_key=True).recv_gpu())
    return merge_meshes([meshes[g] for g in sorted(meshes)])


def merge_meshes(meshes):
    """Host meshes (as ``recv_gpu`` returns them) as one."""
    verts, faces, n = [], [], 0
    for m in meshes:
        verts.append(to_host(m[0]))
        faces.append(to_host(m[1]) + n)
        n += len(m[0])
    return np.concatenate(verts), np.concatenate(faces)


def reference7(*, dims=(20, 18, 16), level=5.5):
    from render.contour import marching_cubes

    v, f, _ = marching_cubes(sphere_field(dims), level)
    return to_host(v), to_host(f)


def listing8(engine, *, dims=(12, 10, 8), nblocks=4, seed=(2, 3, 1), iterations=24, local_iters=4,
             npartitions=2, checkpoint_every=None, checkpoint_dir=None, on_iteration=None, per_job=None):
    """Iterative eikonal with a halo exchange every iteration: the global travel time.
    With `per_job`, that many iterations run in each Spark job (``halo_iterate``; then
    `checkpoint_every` is a multiple of it and `on_iteration` is called per job)."""
    dom = Domain.create(dims, nblocks=nblocks, ghost=1)
    blocks = engine.blocks(eikonal_block, npartitions, keys=range(dom.nblocks), args=(dims, nblocks, seed))
    if per_job:
        blocks = engine.halo_iterate(blocks.cache_gpu(), eikonal_step, iterations, domain=dom, component=0,
                                     args=(dom.spacing, local_iters), per_job=per_job,
                                     checkpoint_every=checkpoint_every, checkpoint_dir=checkpoint_dir,
                                     on_job=on_iteration)
        out = blocks.recv_gpu()
        blocks.drop_gpu()
        return dom.assemble({g: a[0] for g, a in out.items()})

    def step(b, i):
        return (engine.gpu_shuffle(b, "halo", domain=dom, component=0)
                .exec_gpu(eikonal_step, None, dom.spacing, local_iters).cache_gpu(drop_sources=True))

    blocks = engine.iterate(blocks, step, iterations, checkpoint_every=checkpoint_every,
                            checkpoint_dir=checkpoint_dir, on_iteration=on_iteration)
    out = blocks.recv_gpu()
    blocks.drop_gpu()
    return dom.assemble({g: a[0] for g, a in out.items()})


def reference8(*, dims=(12, 10, 8), seed=(2, 3, 1)):
    from solvers.eikonal import solve

    return solve(eikonal_speed(dims), [seed])


# --------------------------------------------------------------------------- the program


def mesh_key(v, f, decimals=5):
    """Order-independent description of a mesh: its triangles by vertex position."""
    t = np.round(v[f].astype(np.float64), decimals)
    t = np.sort(t.view([("", t.dtype)] * 3).reshape(len(f), 3), axis=1)
    return sorted(map(bytes, t))


def kill_daemons(engine) -> list[int]:
    """SIGKILL the engine's daemons on this node, each waited for until it is gone;
    returns their pids."""
    from insitu.pool import DaemonWorker
    from insitu.pool.daemon import DaemonHandle

    pids = []
    for sock in engine.daemons():
        try:
            pid = DaemonWorker(sock, timeout=5).ping()
        except Exception:  # not running
            continue
        # kill() waits until it is gone: until the kernel has closed a daemon's sockets, a
        # task may still reach it and then see its connection reset mid-package.
        DaemonHandle(pid, sock).kill()
        pids.append(pid)
    return pids


def executor_pids(engine) -> list[int]:
    """Pids of the executor JVMs this driver started (local-cluster mode: the driver's JVM
    launches them), in pid order."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            todo.append(c)
            try:
                with open(f"/proc/{c}/cmdline", "rb") as f:
                    if b"CoarseGrainedExecutorBackend" in f.read():
                        out.append(c)
            except OSError:
                pass
    return sorted(out)


def kill_executor(engine, wait: float = 10.0) -> int | None:
    """SIGKILL one executor JVM of this driver (the highest pid) and wait until it is gone; its
    python workers go with it, the worker daemons (sessions of their own) stay."""
    import signal

    from insitu.pool.daemon import pid_alive

    pids = executor_pids(engine)
    if not pids:
        return None
    os.kill(pids[-1], signal.SIGKILL)
    deadline = time.monotonic() + wait
    while pid_alive(pids[-1]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pids[-1]


def _kill_executor_later(i, blocks, *, engine, at: int, delay: float):
    """on_iteration hook: after iteration `at`, kill an executor `delay` s later (mid-iteration)."""
    import threading

    def kill():
        engine._killed_executor = kill_executor(engine)

    if i == at and not getattr(engine, "_killed", False):
        engine._killed = True
        threading.Timer(delay, kill).start()


def _kill_daemons_later(i, blocks, *, engine, at: int, delay: float):
    """on_iteration hook: after iteration `at`, kill the daemons `delay` s later (mid-iteration)."""
    import threading

    if i == at and not getattr(engine, "_killed", False):
        engine._killed = True
        threading.Timer(delay, kill_daemons, args=(engine,)).start()


def run(listing: str, engine, *, kill_after: int | None = None, checkpoint_every: int | None = None,
        iterations: int | None = None, kill_executor_after: int | None = None, per_job: int | None = None) -> dict:
    """Run one listing and compare with its reference; returns {"ok": bool, "seconds": float, ...}.
    `iterations`: of listings 2 and 8 (default theirs; listing 8 compares with the converged
    travel time, reached after 8 halo exchanges at its default size)."""
    t0 = time.perf_counter()
    its = {} if iterations is None else {"iterations": iterations}
    if listing == "1":
        rgba, depth, _ = listing1(engine)
        ref = reference1(device=0 if engine._ctx.gpus and engine._ctx.gpu_workers else None)
        ok = np.allclose(rgba, ref[0], atol=1e-6) and np.array_equal(np.isinf(depth), np.isinf(ref[1]))
        extra = {"covered_pixels": int(np.isfinite(depth).sum())}
    elif listing == "2":
        got, ref = listing2(engine, **its), reference2(**its)
        ok = set(got) == set(ref) and all(np.array_equal(got[k], ref[k]) for k in ref)
        extra = {}
    elif listing == "6":
        got = listing6(engine)
        ref = reference6()
        ok = np.allclose(got[..., :4], ref[0], atol=1e-5)
        extra = {"max_diff": float(np.abs(got[..., :4] - ref[0]).max())}
    elif listing == "7":
        v, f = listing7(engine)
        rv, rf = reference7()
        ok = len(f) == len(rf) and mesh_key(v, f) == mesh_key(rv, rf)
        extra = {"faces": int(len(f))}
    elif listing == "8":
        on_iteration = None
        if kill_after is not None:
            on_iteration = functools.partial(_kill_daemons_later, engine=engine, at=kill_after, delay=0.05)
        elif kill_executor_after is not None:
            on_iteration = functools.partial(_kill_executor_later, engine=engine, at=kill_executor_after, delay=0.05)
        kw = {}
        if checkpoint_every:
            import tempfile

            kw = {"checkpoint_every": checkpoint_every, "checkpoint_dir": tempfile.mkdtemp(prefix="insitu-ckpt-")}
        got, ref = listing8(engine, on_iteration=on_iteration, per_job=per_job, **kw, **its), reference8()
        if kw:
            import shutil

            shutil.rmtree(kw["checkpoint_dir"], ignore_errors=True)
        ok = np.allclose(got, ref, rtol=0, atol=1e-12)
        extra = {"max_diff": float(np.abs(got - ref).max()), "recoveries": len(engine.recoveries)}
        if kill_executor_after is not None:
            extra["killed_executor"] = getattr(engine, "_killed_executor", None)
        if engine.recoveries:
            extra["recovery_s"] = float(sum(r["seconds"] for r in engine.recoveries))
            extra["lost_s"] = float(sum(r["lost_seconds"] for r in engine.recoveries))
    else:
        raise ValueError(f"unknown listing {listing!r}; expected 1, 2, 6, 7, 8 or all")
    return {"ok": bool(ok), "seconds": time.perf_counter() - t0, **extra}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="local[2]", help="Spark master URL (default local[2])")
    ap.add_argument("--listing", default="all", help="1, 2, 6, 7, 8 or all")
    ap.add_argument("--kill-after", type=int, default=None,
                    help="listing 8: SIGKILL the worker daemons during the iteration after this one "
                         "(use a master with retries, local[2,3])")
    ap.add_argument("--kill-executor-after", type=int, default=None,
                    help="listing 8: SIGKILL an executor JVM during the iteration after this one (local-cluster)")
    ap.add_argument("--checkpoint-every", type=int, default=None, help="listing 8: checkpoint every K iterations")
    ap.add_argument("--iterations", type=int, default=None,
                    help="listings 2 and 8: iterations (default 5 and 24; listing 8 converges after 8)")
    ap.add_argument("--per-job", type=int, default=None,
                    help="listing 8: iterations per Spark job (SparkEngine.halo_iterate; --kill-after and "
                         "--checkpoint-every then count jobs and iterations)")
    ap.add_argument("--gpus", action="store_true",
                    help="schedule GPUs as a Spark resource (insitu/engine/gpu_discovery.sh; not in local[N])")
    ap.add_argument("--fake-gpus", default=None, metavar="ADDRESSES",
                    help="with --gpus: pretend the node has these GPUs (e.g. 0,1), served by CPU daemons")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    args = ap.parse_args(argv)
    from insitu.engine.spark import SparkEngine

    which = ["1", "2", "6", "7", "8"] if args.listing == "all" else args.listing.split(",")
    conf = dict(kv.split("=", 1) for kv in args.conf)
    if args.gpus:
        if args.fake_gpus is not None:
            os.environ["INSITU_GPU_ADDRESSES"] = args.fake_gpus  # read by the discovery script
        conf = {**SparkEngine.gpu_conf(), **conf}
    engine = SparkEngine(args.master, app_name="insitu-listings", conf=conf,
                         gpu_workers=args.fake_gpus is None)
    failed = 0
    try:
        for n in which:
            r = run(n, engine, kill_after=args.kill_after, checkpoint_every=args.checkpoint_every,
                    iterations=args.iterations, kill_executor_after=args.kill_executor_after, per_job=args.per_job)
            failed += not r["ok"]
            print(f"listing {n} on {args.master}: {'OK' if r['ok'] else 'FAILED'} "
                  + " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items() if k != "ok"),
                  flush=True)
    finally:
        engine.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
