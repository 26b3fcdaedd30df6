"""Adaptor domains cut from global arrays along an :class:`insitu.Domain`'s blocks, shared by
the eikonal filter tests of both backends (NumPy in tests/, CuPy in tests/gpu/).

Import as ``from blocks import block_domains`` (``tests/`` is on ``sys.path`` through pytest's
rootdir conftest, as for :mod:`eikonal_checks`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

import adaptors
from insitu import Domain


def block_domains(dom: Domain, fields: Mapping[str, np.ndarray], xp: Any = np) -> tuple[list[dict], list[tuple]]:
    """Blueprint domains of `dom`'s blocks and the global slices of their real nodes.

    Each domain holds the block's real cells up to the next block's first node, plus one
    ghost node beyond them where the grid goes on, with `fields` (global node arrays)
    cut to it as arrays of `xp` (NumPy or CuPy).

    Returns
    -------
    domains : list of dict
        One Blueprint dict per block, in gid order (``domain_id`` is the gid).
    real : list of tuple of slice
        Per block, the global node slices its real cells span.
    """
    out, real = [], []
    for g in range(dom.nblocks):
        b = dom.block(g)
        lo = [max(a - 1, 0) for a in b.lo]
        hi = [min(a + 1, n) for a, n in zip(b.hi, dom.dims)]
        sl = tuple(slice(a, c) for a, c in zip(lo, hi))
        ghost = tuple((a - l, c - (a2 + 1 if a2 < n else a2)) for a, l, c, a2, n in zip(b.lo, lo, hi, b.hi, dom.dims))
        out.append(adaptors.uniform({k: xp.asarray(v[sl]) for k, v in fields.items()},
                                    origin=[o + l * h for o, l, h in zip(dom.origin, lo, dom.spacing)],
                                    spacing=dom.spacing, ghost=ghost, domain_id=g))
        real.append(tuple(slice(a, min(c + 1, n)) for a, c, n in zip(b.lo, b.hi, dom.dims)))
    return out, real
