"""The eikonal filter: arrival times from seed points over the simulation's own domains.

The domains of all ranks must tile one uniform grid in a regular (tensor-product)
split, as the domain decompositions of structured solvers do. From them the filter
builds an :class:`insitu.Domain` over the global nodes (each node owned by one block,
ghost width 1) and runs :class:`solvers.eikonal.EikonalSolver` on it, with the speed
of each block taken from the fields where they live and the job's
:class:`~adaptors.context.Context` for its reduction and set-up agreement (deadlines,
failures told to every rank), until no node changes by more than ``tol`` or
``max_iter`` steps passed. The result is a vertex field shaped like each domain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import numpy as np

from insitu import arrays
from insitu.domain import Domain as Grid
from solvers.eikonal import EikonalSolver

from .config import is_number
from .mesh import MeshDomain
from .context import Context

__all__ = ["arrival_times"]


def _layout(domains: list[MeshDomain], ctx: Context):
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


class _BlockSpeeds(Mapping):
    """Block id -> the speeds of this rank's block, read from its domain when the solver
    asks (so a failure to read them is agreed by the solver's set-up like any other)."""

    def __init__(self, domains: list[MeshDomain], local: dict[int, int], grid: Grid, speed: str, xp) -> None:
        self._by_gid = {g: domains[i] for i, g in local.items()}
        self._grid, self._speed, self._xp = grid, speed, xp

    def __getitem__(self, gid: int):
        d, shape = self._by_gid[gid], self._grid.block(gid).shape
        if is_number(self._speed):
            return self._xp.full(shape, float(self._speed))
        inner = tuple(slice(0, n) for n in shape)  # owned nodes = the first of the real ones
        return d.vertex_values(self._speed)[inner]

    def __contains__(self, gid: object) -> bool:  # without reading the field, as Mapping's would
        return gid in self._by_gid

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_gid)

    def __len__(self) -> int:
        return len(self._by_gid)


def arrival_times(domains: list[MeshDomain], params: Mapping[str, Any], ctx: Context) -> list:
    """Arrival times from ``params["seeds"]`` over this rank's `domains`; collective.

    Parameters
    ----------
    domains : list of MeshDomain
        This rank's domains; those of all ranks tile one grid in a regular split.
    params : mapping
        The filter's checked parameters: ``speed`` (field name or constant), ``seeds``
        (world points), ``tol``, ``max_iter``.
    ctx : Context
        The job: its communicator, deadline and agreement on failures.

    Returns
    -------
    list of (X, Y, Z) float64 arrays
        One per domain, of its vertex shape and array backend; NaN where no seed reaches.
    """
    error, grid = None, None
    try:
        grid, local, g0, spacing = _layout(domains, ctx)
    except ValueError as e:
        error = e
    ctx.agree(error, "pipelines: eikonal layout")
    xp = arrays.get_array_module(next(iter(domains[0].fields.values())).values) if domains else np
    seeds = [np.clip(np.rint((np.asarray(p) - g0) / spacing).astype(int), 0, np.asarray(grid.dims) - 1)
             for p in params["seeds"]]
    speeds = _BlockSpeeds(domains, local, grid, params["speed"], xp)
    with EikonalSolver(grid, speeds, seeds, ctx.comm, xp=xp, timeout=ctx.timeout, collectives=ctx) as solver:
        solver.solve(float(params["tol"]), int(params["max_iter"]), on_limit="stop")
        solver.refresh_ghosts()  # the +1 ghost layer: the last real node of each block
        T = solver.blocks
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
