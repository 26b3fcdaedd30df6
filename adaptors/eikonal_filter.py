"""The eikonal filter: arrival times from seed points over the simulation's own domains.

The domains of all ranks must tile one uniform grid in a regular (tensor-product)
split, as the domain decompositions of structured solvers do. From them the filter
builds an :class:`insitu.Domain` over the global nodes (each node owned by one block,
ghost width 1), copies the speed into padded blocks on the fields' device, and
iterates :func:`solvers.eikonal.update_block` with a halo exchange per step until no
node changes by more than ``tol`` (the solver's block-Jacobi scheme, so the answer
does not depend on the split). The result is a vertex field shaped like each domain.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from insitu import arrays
from insitu.domain import Domain as Grid
from insitu.halo import HaloExchange

from .config import is_number
from .mesh import Domain
from .pipelines import Context

__all__ = ["arrival_times"]


def _layout(domains: list[Domain], ctx: Context):
    """Global node grid and this rank's blocks in it: (grid, {local index: gid}, origin, spacing)."""
    mine = [(d.node_origin, d.spacing, np.asarray(d.cells[1]) - np.asarray(d.cells[0])) for d in domains]
    everyone = ctx.allgather(mine, what="eikonal layout")
    spacings = {tuple(np.round(s, 12)) for per in everyone for _, s, _ in per}
    if len(spacings) != 1:
        raise ValueError(f"eikonal: the domains have different spacings {sorted(spacings)}; one grid is needed")
    spacing = everyone[0][0][1] if everyone[0] else next(per[0][1] for per in everyone if per)
    g0 = np.min([o for per in everyone for o, _, _ in per], axis=0)
    boxes = []  # (rank, local index, node lo, cells)
    for r, per in enumerate(everyone):
        for i, (o, _, n) in enumerate(per):
            lo = np.rint((o - g0) / spacing).astype(int)
            boxes.append((r, i, lo, n))
    ncells = np.max([lo + n for _, _, lo, n in boxes], axis=0)
    splits = [sorted({int(lo[a]) for _, _, lo, _ in boxes}) + [int(ncells[a]) + 1] for a in range(3)]
    nblocks = int(np.prod([len(s) - 1 for s in splits]))
    cover_ok = len(boxes) == nblocks
    for _, _, lo, n in boxes:
        for a in range(3):
            k = splits[a].index(int(lo[a]))
            end = int(lo[a] + n[a]) + (1 if lo[a] + n[a] == ncells[a] else 0)
            cover_ok &= splits[a][k + 1] == end
    if not cover_ok:
        raise ValueError("eikonal: the domains do not form a regular split of one grid "
                         "(each axis cut at the same places for every block)")
    owners_by_lo = {tuple(int(v) for v in lo): (r, i) for r, i, lo, _ in boxes}
    probe = Grid.create(tuple(int(n) + 1 for n in ncells), offsets=splits, ghost=1)
    owners, local = [], {}
    for g in range(probe.nblocks):
        r, i = owners_by_lo[tuple(probe.block(g).lo)]
        owners.append(r)
        if r == ctx.rank:
            local[i] = g
    grid = Grid.create(tuple(int(n) + 1 for n in ncells), offsets=splits, ghost=1, spacing=tuple(spacing),
                       origin=tuple(g0), nranks=ctx.size, owners=owners)
    return grid, local, g0, spacing


def arrival_times(domains: list[Domain], params: Mapping, ctx: Context) -> list:
    """Arrival times (vertex arrays, one per domain, NaN outside the solved nodes)."""
    from solvers.eikonal import update_block

    error, grid = None, None
    try:
        grid, local, g0, spacing = _layout(domains, ctx)
    except ValueError as e:
        error = e
    ctx.agree(error, "pipelines: eikonal layout")
    speed = params["speed"]
    xp = arrays.get_array_module(next(iter(domains[0].fields.values())).values) if domains else np
    seeds = [np.clip(np.rint((np.asarray(p) - g0) / spacing).astype(int), 0, np.asarray(grid.dims) - 1)
             for p in params["seeds"]]
    T, out, w, frozen = {}, {}, {}, {}
    error = None
    try:
        for i, d in enumerate(domains):
            g = local[i]
            b = grid.block(g)
            inner = tuple(slice(0, n) for n in b.shape)  # owned nodes = the first of the real ones
            if is_number(speed):
                f = float(speed)
                sp = xp.full(b.shape, f)
            else:
                sp = d.vertex_values(speed)[inner].astype(xp.float64)
            if not bool(xp.all(xp.isfinite(sp) & (sp > 0))):
                raise ValueError(f"eikonal: speed {speed!r} must be positive and finite on every node "
                                 f"(domain {d.domain_id})")
            wb = xp.full(b.padded_shape, xp.inf)
            wb[b.interior] = 1.0 / sp
            tb = xp.full(b.padded_shape, xp.inf)
            fb = xp.zeros(b.padded_shape, bool)
            for s in seeds:
                if all(lo <= v < hi for v, lo, hi in zip(s, b.lo, b.hi)):
                    loc = tuple(int(v - lo + 1) for v, lo in zip(s, b.lo))
                    fb[loc] = True
                    tb[loc] = 0.0
            T[g], w[g], frozen[g], out[g] = tb, wb, fb, tb.copy()
    except Exception as e:
        error = e
    ctx.agree(error, "pipelines: eikonal set-up")
    with HaloExchange(grid, ctx.comm, timeout=ctx.timeout) as halo:
        for _ in range(int(params["max_iter"])):
            halo.exchange(T)
            change = 0.0
            for g in T:
                T[g], out[g], c = update_block(T[g], out[g], w[g], frozen[g], spacing, iterations=4)
                change = max(change, float(arrays.scalar_to_host(c)) if xp is not np else float(c))
            if ctx.allreduce(change, "max") <= float(params["tol"]):
                break
        halo.exchange(T)  # the +1 ghost layer: the last real node of each block
    result = []
    for i, d in enumerate(domains):
        b = grid.block(local[i])
        first = np.rint((d.origin - g0) / spacing).astype(int)  # global index of the domain's node 0
        res = xp.full(d.dims, xp.nan)
        src_lo = np.asarray(b.lo) - 1  # global index of the padded block's first node
        lo = np.maximum(first, src_lo)
        hi = np.minimum(first + np.asarray(d.dims), src_lo + np.asarray(b.padded_shape))
        if (hi > lo).all():
            res[tuple(slice(a - f, z - f) for a, z, f in zip(lo, hi, first))] = \
                T[local[i]][tuple(slice(a - s, z - s) for a, z, s in zip(lo, hi, src_lo))]
        res[~xp.isfinite(res)] = xp.nan
        result.append(res)
    return result
