"""The paper's halo steps for blocks on workers: ``extract_halo`` cuts, from each block,
the slabs its neighbours need as ghosts; after a shuffle, ``append_halo`` writes the
slabs a block received into its ghost layers. (A whole exchange in one call, over the
transports, is :class:`insitu.halo.HaloExchange`.)
"""

from __future__ import annotations

from typing import Mapping

from insitu import arrays
from insitu.domain import Domain

__all__ = ["append_halo", "extract_halo"]


def _slab(g: int, n: int, d: int, *, ghost_side: bool) -> slice:
    """Along one axis of a padded block (interior n, ghost g): the interior face towards
    direction d (the slab sent), or with `ghost_side` the ghost layer on side d."""
    if d == 0:
        return slice(g, g + n)
    if ghost_side:
        return slice(0, g) if d < 0 else slice(g + n, 2 * g + n)
    return slice(g, 2 * g) if d < 0 else slice(n, n + g)


def extract_halo(block, gid: int, domain: Domain) -> dict:
    """Slabs of padded `block` for its neighbours: ``{(neighbour gid, direction from the
    neighbour to this block): slab copy}`` (copies on the block's device)."""
    b = domain.block(gid)
    a = arrays.asarray(block, name=f"block {gid}")
    if a.shape != b.padded_shape:
        raise ValueError(f"extract_halo: block {gid} has shape {tuple(a.shape)}, expected {b.padded_shape}")
    out = {}
    for d, n in domain.neighbors(gid).items():
        sl = tuple(_slab(domain.ghost, b.shape[i], d[i], ghost_side=False) for i in range(3))
        out[(n, tuple(-x for x in d))] = a[sl].copy()
    return out


def append_halo(block, gid: int, domain: Domain, slabs: Mapping) -> object:
    """Write received slabs into the ghost layers of `block` (in place; returned).

    `slabs`: ``{direction from this block to the sender: slab}`` as
    :func:`extract_halo` keyed them for this gid.
    """
    b = domain.block(gid)
    a = arrays.asarray(block, name=f"block {gid}")
    for d, slab in slabs.items():
        sl = tuple(_slab(domain.ghost, b.shape[i], d[i], ghost_side=True) for i in range(3))
        want = a[sl].shape
        if tuple(slab.shape) != want:
            raise ValueError(f"append_halo: block {gid}, direction {d}: slab of shape {tuple(slab.shape)}, "
                             f"the ghost region is {want}")
        a[sl] = slab
    return a
