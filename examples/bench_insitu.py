"""End-to-end in-situ benchmark: the paper's workloads through the public API.

    mpirun -n R python examples/bench_insitu.py insitu --n 512 1024 1344 [--size 1024 1024] [--iters 10]
    mpirun -n R python examples/bench_insitu.py mandelbulb --n 1024 2048
    mpirun -n R python examples/bench_insitu.py volume --n 1024 --res 512 1024 2048 4096
    (--weak: the grid grows with the ranks, (R*n, n, n); --md FILE appends the tables)

``insitu`` (the paper's Table 4): each iteration is one halo-synchronized eikonal sweep
(:class:`solvers.eikonal.EikonalSolver`, ``local_iters=1``), the hand-off of the travel
time (unreached nodes clamped) and the speed as Blueprint domains, and
``adaptors.execute`` with an isosurface of the front coloured by speed, rendered,
composited across ranks and streamed out over ADIOS2 SST (no reader: frames are
dropped after they are written). Stages are timed with CUDA events (``profile: true``
in the adaptor, ``StageTimer`` around the solver and the hand-off); each stage is set
against its floor: the bytes it must move over the device-to-device copy bandwidth
measured in the same run. ``--hand-off float64 float32 fused`` measures the ways of
handing the travel time over: a clamped copy made after the step in float64 or float32
(which halves what the contour reads), or ``fused``: the float32 clamped copy written by
the solver's last sweep itself (:meth:`EikonalSolver.display_copy`), handed over with the
per-tile ranges the same sweep writes (:meth:`EikonalSolver.display_ranges`), so the
contour reads only the tiles its level crosses. ``--at start end``: the iterations early
in the run (a small front) and once the front has filled the box (steps until every node
is reached; the iso value then half the largest travel time, a large surface).

``mandelbulb`` (Table 3): marching cubes of the Mandelbulb field at level 11, split
along x over the ranks with one ghost layer. ``volume`` (Tables 5-6): ray casting of the
Mandelbulb field per rank's block and "over" compositing of the block images.

Runs on GPUs (one per rank) when CuPy has one, else on the CPU path (small sizes in CI).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import adaptors  # noqa: E402
from insitu import Domain, arrays  # noqa: E402
from insitu.log import Progress  # noqa: E402
from insitu.profile import StageTimer  # noqa: E402

#: Stages of an in-situ iteration, in the order they run.
STAGES = ("halo", "eikonal", "handoff", "mesh", "ranges", "contour", "render", "composite", "extracts")
PAPER = {"insitu": "1.47 s per iteration at 1344^3 on 16 GPUs (eikonal 0.23 s of it)",
         "mandelbulb": "about 1 billion triangles from a 3200^3 volume in 1.46 s on 16 GPUs",
         "volume": "see the paper's Tables 5-6 (volume rendering with compositing on 16 GPUs)"}


class Bench:
    """What every workload needs: ranks, the array module, timing, bandwidths."""

    def __init__(self, args) -> None:
        from mpi4py import MPI

        self.comm, self.args = MPI.COMM_WORLD, args
        self.rank, self.size = self.comm.rank, self.comm.size
        self.gpu = arrays.select_device(self.comm) is not None
        if self.gpu:
            import cupy as cp

            self.xp = cp
            self.device = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
        else:
            self.xp = np
            self.device = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
        self.copy_bw, self.d2h_bw = self._bandwidths()
        # On stderr, rank 0, where it is a terminal (or --progress): one unit per measured run or iteration.
        self.bar = Progress(_units(args), f"bench {args.workload}", enabled=args.progress if self.rank == 0 else False)

    def sync(self) -> None:
        if self.gpu:
            self.xp.cuda.Device().synchronize()

    def timed(self, fn, reps: int) -> tuple[float, object]:
        """Median seconds of `fn()` over `reps` runs after one warm-up (slowest rank), and its last result."""
        out = fn()
        ts = []
        for _ in range(reps):
            self.comm.Barrier()
            self.sync()
            t0 = time.perf_counter()
            out = fn()
            self.sync()
            ts.append(time.perf_counter() - t0)
        return self.comm.allreduce(float(np.median(ts)), op=_max()), out

    def _bandwidths(self) -> tuple[float, float]:
        """Device copy bandwidth (bytes read + written per second) and device->host."""
        xp = self.xp
        n = (256 << 20) // 4 if self.gpu else (16 << 20) // 4
        a = xp.ones(n, xp.float32)
        b = xp.empty_like(a)
        t, _ = self.timed(lambda: b.__setitem__(Ellipsis, a), 5)
        copy = 2 * a.nbytes / t
        if not self.gpu:
            return copy, float("inf")
        small = a[: (64 << 20) // 4]
        t, _ = self.timed(lambda: small.get(), 3)
        return copy, small.nbytes / t

    def header(self, title: str, command: str) -> str:
        return (f"#### {title}\n\nDevice: {self.size} x {self.device}; date {datetime.date.today()}; commit "
                f"{_commit()}; command `{command}`; device copy bandwidth {self.copy_bw / 1e9:.0f} GB/s "
                f"(read + write), device->host {self.d2h_bw / 1e9:.1f} GB/s, measured in the same run. "
                f"The paper: {PAPER[self.args.workload]}.\n\n")

    def emit(self, text: str) -> None:
        if self.rank != 0:
            return
        self.bar.write(text, file=sys.stdout)  # above the bar where one is drawn
        if self.args.md:
            with open(self.args.md, "a") as f:
                f.write(text + "\n")


def _units(args) -> int:
    """What the progress bar counts: iterations of every in-situ run, measured sizes otherwise."""
    if args.workload == "insitu":
        runs = len(args.n) * len(args.precision) * len(args.slowness) * len(args.at) * len(args.hand_off)
        return runs * (args.warmup + args.iters)
    return len(args.n) * (len(args.res) if args.workload == "volume" else 1)


def _max():
    from mpi4py import MPI

    return MPI.MAX


def _commit() -> str:
    env = os.environ.get("INSITU_COMMIT")
    if env:
        return env
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _dims(b: Bench, n: int) -> tuple[int, int, int]:
    return (n * b.size, n, n) if b.args.weak else (n, n, n)


def _ms(t: float) -> str:
    return f"{t * 1e3:.2f}"


# -- Table 4: eikonal with in-situ isosurface rendering --------------------------------------


def insitu(b: Bench) -> None:
    from solvers.eikonal import EikonalSolver, seeds_from_fractions
    from solvers.eikonal.speed import speed_model

    args, xp = b.args, b.xp
    rows, floors = [], []
    for n in args.n:
        dims = _dims(b, n)
        h = 1.0 / (n - 1)
        dom = Domain.create(dims, blocks=(b.size, 1, 1), nranks=b.size, ghost=1, spacing=(h, h, h))
        model = speed_model("two-layer")
        mine = dom.blocks_of(b.rank)
        speed = {}
        for g in mine:  # the colour field, float32, on the device
            x, y, z = (xp.asarray(c) for c in dom.coordinates(g))
            speed[g] = xp.ascontiguousarray(xp.broadcast_to(
                model(x[:, None, None], y[None, :, None], z[None, None, :]), dom.block(g).padded_shape)
                .astype(xp.float32))
        warm = max(4, n // 8)
        # The iso surface lies where the front has been for a while (a Jacobi sweep moves
        # it one node along each axis; the sphere's L1 radius stays inside that).
        iso = 0.4 * warm * h
        for precision, slowness in ((p, s) for p in args.precision for s in args.slowness):
            solver = EikonalSolver(dom, model, seeds_from_fractions([(0.3, 0.4, 0.5)], dims), b.comm, xp=xp,
                                   local_iters=1, slowness=slowness, precision=precision)
            for _ in range(warm):  # a front well inside the box
                solver.step()
            for at in args.at:
                if at == "end":
                    iso = _fill_box(b, solver, mine)
                for mode in sorted(args.hand_off, key=lambda m: m == "fused"):  # fused last: it stays on
                    rows.append(_insitu_run(b, dom, solver, speed, mine, iso, dims, mode, floors) | {"at": at})
            solver.close()
            solver = None
            if b.gpu:
                xp.get_default_memory_pool().free_all_blocks()
        speed = None
        if b.gpu:
            xp.get_default_memory_pool().free_all_blocks()
    cmd = (f"mpirun -n {b.size} python examples/bench_insitu.py insitu --n {' '.join(map(str, args.n))} "
           f"--size {args.size[0]} {args.size[1]} --iters {args.iters} --hand-off {' '.join(args.hand_off)} "
           f"--slowness {' '.join(args.slowness)} --precision {' '.join(args.precision)} --at {' '.join(args.at)}"
           + (" --weak" if args.weak else ""))
    head = b.header(f"In-situ iteration: eikonal sweep + isosurface rendering + streaming, {b.size} rank(s)"
                    + (", weak scaling" if args.weak else ""), cmd)
    table = ("Median ms per iteration over the iterations (slowest rank per stage); `other` is the adaptor's "
             "own work (mesh checks, scene set-up) beyond its timed stages.\n\n"
             "| grid | ranks | solver (T, 1/speed) | hand-off | run | triangles | iteration | "
             + " | ".join(STAGES) + " | other |\n"
             "| --- | ---: | --- | --- | --- | ---: | ---: | " + " | ".join("---:" for _ in STAGES) + " | ---: |\n")
    for r in rows:
        table += (f"| {r['grid']} | {b.size} | {r['slowness']} | {r['dtype']} | {r['at']} | {r['triangles']} | "
                  f"{_ms(r['iteration'])} | "
                  + " | ".join(_ms(r['stages'].get(s, 0.0)) for s in STAGES) + f" | {_ms(r['other'])} |\n")
    table += ("\nEach stage against its floor (bytes it must move per rank / measured device copy bandwidth; "
              "extracts: the frame over device->host):\n\n"
              "| grid | solver (T, 1/speed) | hand-off | stage | ms | MB moved | floor, ms | x floor |\n"
              "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n")
    for grid, sl, dtype, stage, t, nbytes, floor in floors:
        table += (f"| {grid} | {sl} | {dtype} | {stage} | {_ms(t)} | {nbytes / 1e6:.1f} | {_ms(floor)} | "
                  f"{t / floor:.1f} |\n" if floor > 0 else
                  f"| {grid} | {sl} | {dtype} | {stage} | {_ms(t)} | - | - | - |\n")
    b.emit(head + table)


def _fill_box(b: Bench, solver, mine) -> float:
    """Step until every node of the box is reached (the front has filled it); returns half
    the largest travel time, an iso value with a large surface."""
    xp, dom = b.xp, solver.domain
    inner = {g: dom.block(g).interior for g in mine}  # outer ghost layers stay unreached
    while True:
        for _ in range(32):
            solver.step()
        reached = all(bool(xp.isfinite(solver.blocks[g][inner[g]]).all()) for g in mine)
        if b.comm.allreduce(reached, op=_min()):
            break
    top = max((float(solver.blocks[g][inner[g]].max()) for g in mine), default=0.0)
    return 0.5 * float(b.comm.allreduce(top, op=_max()))


def _min():
    from mpi4py import MPI

    return MPI.MIN


def _insitu_run(b: Bench, dom, solver, speed, mine, iso, dims, mode: str, floors) -> dict:
    from render.contour import marching_cubes

    args, xp = b.args, b.xp
    w, hgt = args.size
    fused = mode == "fused"
    dtype = np.dtype(np.float32 if fused else mode)
    # Unreached nodes are +inf: clamped to a time beyond the iso value, either by the
    # solver's last sweep (fused: EikonalSolver.display_copy) or by a pass of our own,
    # straight into the buffer the adaptor gets (no further copy).
    shown = solver.display_copy(clip=10.0) if fused else {g: xp.empty(dom.block(g).padded_shape, dtype) for g in mine}
    ranges = solver.display_ranges() if fused else {}

    def hand_off():
        meshes = []
        for g in mine:
            blk = dom.block(g)
            if not fused:
                xp.minimum(solver.blocks[g], 10.0, out=shown[g])
            ghost = tuple((1, 1 if hi == n else 0) for hi, n in zip(blk.hi, dims))
            origin = [o + (lo - 1) * s for o, lo, s in zip(dom.origin, blk.lo, dom.spacing)]
            meshes.append(adaptors.uniform({"T": shown[g], "speed": speed[g]}, origin=origin, spacing=dom.spacing,
                                           ghost=ghost, domain_id=g,
                                           tile_ranges={"T": ranges[g]} if fused else None))
        return meshes

    cfg = {"profile": True,
           "pipelines": {"front": {"c": {"type": "contour", "params": {"field": "T", "iso_values": [iso]}}}},
           "scenes": {"view": {"plots": {"p": {"type": "pseudocolor", "pipeline": "front", "field": "speed",
                                               "min_value": 1.0, "max_value": 2.0}},
                               "renders": {"r": {"image_width": w, "image_height": hgt,
                                                 "camera": {"azimuth": 30, "elevation": 20}}}}},
           "extracts": {"live": {"type": "adios2", "params": {
               "filename": os.path.join(args.tmp, f"bench-frames-{os.getpid()}"), "engine": "SST",
               "steering": False}}}}
    prof = StageTimer(True)
    samples = []
    with adaptors.Adaptor(cfg, b.comm) as a:
        for it in range(args.warmup + args.iters):
            b.comm.Barrier()
            b.sync()
            t0 = time.perf_counter()
            solver.step(prof)
            with prof.stage("handoff"):
                meshes = hand_off()
            if not a.execute(it, float(it), meshes):
                raise RuntimeError(f"execute failed: {a.results()['errors']}")
            b.sync()
            total = time.perf_counter() - t0
            st = {**prof.times(), **a.results()["timings"]}
            st["iteration"] = total
            if it >= args.warmup:
                samples.append(st)
            b.bar.update(note=f"{dims[0]}x{dims[1]}x{dims[2]} {mode}")
    med = {k: float(np.median([s.get(k, 0.0) for s in samples])) for k in set().union(*samples)}
    every = b.comm.allgather(med)  # ranks time different stages (rank 0 alone streams the frames)
    med = {k: max(m.get(k, 0.0) for m in every) for k in sorted(set().union(*every))}
    adaptor_stages = ("mesh", "pipelines", "ranges", "contour", "render", "volume", "composite", "png", "extracts")
    other = max(0.0, med.get("execute", 0.0) - sum(med.get(s, 0.0) for s in adaptor_stages))
    # Triangles of the last frame's surface (counted once, outside the timed loop).
    tris = verts = 0
    for g in mine:
        blk = dom.block(g)
        # Real cells as the hand-off marks them: up to the next block's first node.
        region = ((1, 1, 1), tuple(1 + s - (1 if hb == n else 0) for s, hb, n in zip(blk.shape, blk.hi, dims)))
        mesh = marching_cubes(shown[g], iso, spacing=dom.spacing, region=region)
        tris, verts = tris + int(mesh[1].shape[0]), verts + int(mesh[0].shape[0])
        del mesh
    tris, verts = b.comm.allreduce(tris), b.comm.allreduce(verts)
    grid = "x".join(map(str, dims)) if len(set(dims)) > 1 else f"{dims[0]}^3"
    nodes = max(int(np.prod(dom.block(g).padded_shape)) for g in mine) if mine else 0
    ghost_bytes = 2 * sum(int(np.prod(dom.block(g).padded_shape)) // dom.block(g).padded_shape[0] * 8
                          for g in mine if b.size > 1)
    item = dtype.itemsize
    t_item, w_item = np.dtype(solver.precision).itemsize, np.dtype(solver.slowness).itemsize
    slowness = f"{solver.precision}, {solver.slowness}"
    ghost_bytes = ghost_bytes * t_item // 8
    moved = {"halo": ghost_bytes, "eikonal": (2 * t_item + w_item + 1 + (item if fused else 0)) * nodes,
             "handoff": 0 if fused else (t_item + item) * nodes, "contour": item * nodes,
             "render": (tris * 12 + verts * 28) // max(b.size, 1) + w * hgt * 8,
             "composite": w * hgt * 20}
    for stage in STAGES:
        t = med.get(stage, 0.0)
        if stage == "extracts":
            nbytes = w * hgt * 5  # the frame's RGBA and its luminance cross together
            floor = nbytes / b.d2h_bw if b.gpu else 0.0
        else:
            nbytes = moved.get(stage, 0)
            floor = nbytes / b.copy_bw
        floors.append((grid, slowness, mode, stage, t, nbytes, floor))
    shown.clear()  # the buffers go back to the pool before the next run
    return {"grid": grid, "slowness": slowness, "dtype": mode, "triangles": tris, "iteration": med["iteration"],
            "stages": med, "other": other}


# -- Table 3: Mandelbulb isosurfaces ---------------------------------------------------------


def _mandelbulb_block(b: Bench, n: int):
    """This rank's x-slab of the n^3 Mandelbulb field (one ghost layer): the domain, the
    block id, the slab, its first x index, its real cells and the grid spacing."""
    from mandelbulb import mandelbulb

    dom = Domain.create((n, n, n), blocks=(b.size, 1, 1), nranks=b.size, ghost=1)
    g = dom.blocks_of(b.rank)[0]
    whole = mandelbulb(n, xp=b.xp)
    blk = dom.block(g)
    lo, hi = max(blk.lo[0] - 1, 0), min(blk.hi[0] + 1, n)
    part = b.xp.ascontiguousarray(whole[lo:hi])
    del whole
    # Real cells: from this block's first node to the next block's first node.
    region = ((blk.lo[0] - lo, 0, 0), (min(blk.hi[0], n - 1) - lo, n - 1, n - 1))
    return dom, g, part, lo, region, 2.4 / (n - 1)


def mandelbulb_table(b: Bench) -> None:
    from render.contour import marching_cubes

    args, xp = b.args, b.xp
    rows = []
    for n in args.n:
        dom, g, vol, lo, region, h = _mandelbulb_block(b, n)
        t, out = b.timed(lambda: marching_cubes(vol, 11.0, spacing=(h, h, h), origin=(-1.2 + lo * h, -1.2, -1.2),
                                                region=region), args.reps)
        faces = b.comm.allreduce(int(out[1].shape[0]))
        rows.append((n, faces, t, vol.nbytes / b.copy_bw))  # one read: the bytes once at (read + write) bandwidth
        b.bar.update(note=f"{n}^3")
        vol = out = None
        if b.gpu:
            xp.get_default_memory_pool().free_all_blocks()
    cmd = f"mpirun -n {b.size} python examples/bench_insitu.py mandelbulb --n {' '.join(map(str, args.n))}"
    text = b.header(f"Mandelbulb isosurface (level 11), {b.size} rank(s)", cmd)
    text += ("| grid | ranks | faces | marching cubes, ms (slowest rank) | Gvoxels/s | Mfaces/s | "
             "one read of the block at copy bandwidth, ms | x one read |\n"
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
    for n, faces, t, read in rows:
        text += (f"| {n}^3 | {b.size} | {faces} | {_ms(t)} | {n ** 3 / t / 1e9:.1f} | {faces / t / 1e6:.0f} | "
                 f"{_ms(read)} | {t / read:.1f} |\n")
    b.emit(text)


# -- Tables 5-6: volume rendering with compositing -------------------------------------------


def volume_table(b: Bench) -> None:
    from render.camera import Camera
    from render.composite import composite
    from render.volume import TransferFunction, ray_cast, visibility_order

    args, xp = b.args, b.xp
    rows = []
    for n in args.n:
        dom, g, vol, lo, region, h = _mandelbulb_block(b, n)
        bounds = (-1.2, 1.2) * 3
        blk = dom.block(g)
        extent = (-1.2 + blk.lo[0] * h, -1.2 + min(blk.hi[0], n - 1) * h, -1.2, 1.2, -1.2, 1.2)
        cam = Camera.fit(bounds, azimuth=30, elevation=20)
        tf = TransferFunction.from_colormap("plasma", 0.0, 12.0, opacity=[(0.0, 0.0), (8.0, 0.2), (12.0, 1.0)],
                                            unit_length=2.4 / 64)
        order = visibility_order(dom, list(range(dom.nblocks)), cam)
        owners = [dom.block(x).owner for x in order]
        for res in args.res:
            def cast():
                return ray_cast(vol, cam, res, res, tf, spacing=(h, h, h), origin=(-1.2 + lo * h, -1.2, -1.2),
                                extent=extent, bounds=bounds)[0]

            t_cast, img = b.timed(cast, args.reps)
            t_comp = 0.0
            if b.size > 1:
                img = xp.ascontiguousarray(img.astype(xp.float32))
                t_comp, _ = b.timed(lambda: composite(img, comm=b.comm, mode="over", order=owners), args.reps)
            rows.append((n, res, t_cast, t_comp))
            b.bar.update(note=f"{n}^3 {res}^2")
        vol = None
        if b.gpu:
            xp.get_default_memory_pool().free_all_blocks()
    cmd = (f"mpirun -n {b.size} python examples/bench_insitu.py volume --n {' '.join(map(str, args.n))} "
           f"--res {' '.join(map(str, args.res))}")
    text = b.header(f"Volume rendering of the Mandelbulb field with compositing, {b.size} rank(s)", cmd)
    text += ("| grid | image | ranks | ray casting, ms (slowest rank) | compositing, ms | total, ms | Mrays/s |\n"
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
    for n, res, tc, tm in rows:
        text += (f"| {n}^3 | {res}^2 | {b.size} | {_ms(tc)} | {_ms(tm)} | {_ms(tc + tm)} | "
                 f"{res * res / (tc + tm) / 1e6:.0f} |\n")
    b.emit(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=("insitu", "mandelbulb", "volume"))
    ap.add_argument("--n", type=int, nargs="+", default=[64])
    ap.add_argument("--size", type=int, nargs=2, default=(1024, 1024), help="insitu: image width height")
    ap.add_argument("--res", type=int, nargs="+", default=[512], help="volume: image sizes (square)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--hand-off", nargs="+", default=["float64"], choices=("float64", "float32", "fused"))
    ap.add_argument("--slowness", nargs="+", default=["float64"], choices=("float64", "float32"),
                    help="insitu: how the eikonal solver keeps 1/speed")
    ap.add_argument("--precision", nargs="+", default=["float64"], choices=("float64", "float32"),
                    help="insitu: how the eikonal solver keeps the travel times")
    ap.add_argument("--at", nargs="+", default=["start"], choices=("start", "end"),
                    help="insitu: iterations early in the run and/or once the front has filled the box")
    ap.add_argument("--weak", action="store_true")
    ap.add_argument("--tmp", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--md")
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="a progress bar on stderr (default: when stderr is a terminal)")
    args = ap.parse_args(argv)
    if any(n < 8 for n in args.n):
        ap.error("--n: grids of at least 8^3")
    b = Bench(args)
    with b.bar:
        {"insitu": insitu, "mandelbulb": mandelbulb_table, "volume": volume_table}[args.workload](b)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
