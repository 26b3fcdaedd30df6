"""insitu.domain: dims_create against MPI, decomposition invariants, extract/assemble."""

import itertools
import re
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import insitu
from insitu import Domain, dims_create
from insitu.domain import DIRECTIONS

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- dims_create


def _most_balanced(n, k):
    """Brute force: the non-increasing k-factorization of n with the least max - min.

    This is the standard's "as close to each other as possible"; it reproduces
    MPICH's MPI_Dims_create for every n < 3000, k in (2, 3).
    """

    def facs(n, k, cap):
        if k == 1:
            if n <= cap:
                yield (n,)
            return
        for f in range(min(n, cap), 0, -1):
            if n % f == 0:
                for rest in facs(n // f, k - 1, f):
                    yield (f, *rest)

    return min(facs(n, k, n), key=lambda t: t[0] - t[-1])


@pytest.mark.parametrize("n", range(1, 65))
def test_dims_create_matches_mpi(n):
    ours = insitu.dims_create(n, 3)
    assert ours == tuple(MPI.Compute_dims(n, 3))
    assert math.prod(ours) == n
    assert list(ours) == sorted(ours, reverse=True)


@pytest.mark.parametrize("n", range(2, 65, 2))
def test_dims_create_with_a_fixed_factor_matches_mpi(n):
    assert insitu.dims_create(n, 3, [0, 2, 0]) == tuple(MPI.Compute_dims(n, [0, 2, 0]))


@pytest.mark.parametrize("fixed", [[3, 0, 0], [0, 0, 4], [2, 0, 3], [1, 0, 0], [0, 1, 1]])
def test_dims_create_with_other_fixed_factors_matches_mpi(fixed):
    step = math.prod(d for d in fixed if d)
    for n in range(step, 65, step):
        assert insitu.dims_create(n, 3, fixed) == tuple(MPI.Compute_dims(n, fixed)), n


def test_dims_create_fully_fixed_and_other_ndims():
    assert insitu.dims_create(12, 3, [3, 2, 2]) == (3, 2, 2)
    for n in range(1, 65):
        for k in (1, 2, 4):
            assert insitu.dims_create(n, k) == tuple(MPI.Compute_dims(n, k)), (n, k)


@pytest.mark.parametrize("k", [3, 2])
def test_dims_create_is_most_balanced_for_large_counts(k):
    # MPI_Dims_create: "dimensions are set to be as close to each other as possible".
    # Placing primes greedily on the smallest factor is not enough: 432 = 9*8*6, not 12*6*6.
    wrong = []
    for n in range(1, 1001):
        ours, best = insitu.dims_create(n, k), _most_balanced(n, k)
        assert math.prod(ours) == n
        if ours[0] - ours[-1] > best[0] - best[-1]:
            wrong.append(f"dims_create({n}, {k}) = {ours}, most balanced {best}, "
                         f"MPI gives {tuple(MPI.Compute_dims(n, k))}")
    assert not wrong, f"{len(wrong)} unbalanced factorizations:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "args,match",
    [
        ((0, 3), r"nnodes must be >= 1, got 0"),
        ((6, 3, [0, 0]), r"dims has 2 entries, ndims is 3"),
        ((6, 3, [4, 0, 0]), r"fixed dims \[4, 0, 0\] do not divide 6"),
        ((6, 3, [-1, 0, 0]), r"fixed dims \[-1, 0, 0\] do not divide 6"),
        ((12, 3, [3, 2, 1]), r"dims \[3, 2, 1\] multiply to 6, not 12"),
    ],
)
def test_dims_create_errors(args, match):
    with pytest.raises(ValueError, match=r"^dims_create: " + match):
        dims_create(*args)


# --------------------------------------------------------------------------- strategies


def _offsets_for(dims_a):
    """Strictly increasing split points 0 = o0 < ... < on = dims_a (at most 5 blocks)."""
    inner = (st.lists(st.integers(1, dims_a - 1), max_size=min(4, dims_a - 1), unique=True) if dims_a > 1
             else st.just([]))
    return inner.map(lambda cuts: (0, *sorted(cuts), dims_a))


@st.composite
def domains(draw, max_dim=40):
    dims = tuple(draw(st.integers(1, max_dim)) for _ in range(3))
    ghost = draw(st.integers(0, 3))
    periodic = tuple(draw(st.booleans()) for _ in range(3))
    nranks = draw(st.integers(1, 5))
    how = draw(st.sampled_from(["nblocks", "blocks", "offsets"]))
    kw = dict(ghost=ghost, periodic=periodic, nranks=nranks)
    if how == "nblocks":
        nblocks = draw(st.integers(1, 12))
        try:
            d = Domain.create(dims, nblocks=nblocks, **kw)
        except ValueError as e:
            # Only legitimate when some axis got more blocks than samples.
            f = dims_create(nblocks, 3)
            assert "cannot split axis" in str(e)
            assert max(f) > min(dims), (dims, nblocks, str(e))
            assume(False)
        assert math.prod(d.blocks) == nblocks
        assert sorted(d.blocks) == sorted(dims_create(nblocks, 3))
        # Largest factor on the longest axis.
        for a, b in itertools.permutations(range(3), 2):
            if dims[a] > dims[b]:
                assert d.blocks[a] >= d.blocks[b], (dims, d.blocks)
    elif how == "blocks":
        blocks = tuple(draw(st.integers(1, min(n, 5))) for n in dims)
        d = Domain.create(dims, blocks=blocks, **kw)
        assert d.blocks == blocks
    else:
        offsets = tuple(draw(_offsets_for(n)) for n in dims)
        d = Domain.create(dims, offsets=offsets, **kw)
        assert d.offsets == offsets
    assert d.dims == dims and d.ghost == ghost and d.periodic == periodic
    return d


def _owner_of(d, idx):
    """Reference for locate: scan the blocks' [lo, hi) boxes."""
    hits = [b.gid for b in d if all(b.lo[a] <= idx[a] < b.hi[a] for a in range(3))]
    assert len(hits) == 1, (idx, hits)
    return hits[0]


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(d=domains(), data=st.data())
def test_blocks_partition_the_grid_and_locate_finds_the_owner(d, data):
    cover = np.zeros(d.dims, dtype=np.int32)
    for gid, b in enumerate(d):
        assert b.gid == gid and d.block(gid) == b
        assert all(l < h for l, h in zip(b.lo, b.hi))
        assert b.shape == tuple(h - l for l, h in zip(b.lo, b.hi))
        assert b.padded_shape == tuple(n + 2 * d.ghost for n in b.shape)
        assert d.coords(gid) == b.coords and d.gid(b.coords) == gid
        cover[tuple(slice(l, h) for l, h in zip(b.lo, b.hi))] += 1
    assert cover.min() == 1 and cover.max() == 1

    # locate: every block's corners, plus random samples, plus every sample of small grids.
    points = set()
    for b in d:
        for corner in itertools.product(*[(b.lo[a], b.hi[a] - 1) for a in range(3)]):
            points.add(corner)
    idx = st.tuples(*[st.integers(0, n - 1) for n in d.dims])
    points.update(data.draw(st.lists(idx, max_size=20)))
    if math.prod(d.dims) <= 512:
        points.update(itertools.product(*map(range, d.dims)))
    for p in points:
        g = d.locate(p)
        b = d.block(g)
        assert all(b.lo[a] <= p[a] < b.hi[a] for a in range(3)), (p, g)
        assert g == _owner_of(d, p)


@SETTINGS
@given(d=domains())
def test_neighbors_agree_with_geometry_and_are_symmetric(d):
    for b in d:
        nbrs = d.neighbors(b.gid)
        expected_count = 1
        for a in range(3):
            ok = [s for s in (-1, 0, 1) if d.periodic[a] or 0 <= b.coords[a] + s < d.blocks[a]]
            expected_count *= len(ok)
        assert len(nbrs) == expected_count - 1
        if all(d.periodic) or all(0 < b.coords[a] < d.blocks[a] - 1 for a in range(3)):
            assert len(nbrs) == 26 and set(nbrs) == set(DIRECTIONS)
        for direc in DIRECTIONS:
            n = d.neighbor(b.gid, direc)
            assert nbrs.get(direc) == n
            # Reference: the block holding the sample just past b's face/edge/corner.
            probe, outside = [], False
            for a in range(3):
                i = {-1: b.lo[a] - 1, 0: b.lo[a], 1: b.hi[a]}[direc[a]]
                if not 0 <= i < d.dims[a]:
                    if not d.periodic[a]:
                        outside = True
                        break
                    i %= d.dims[a]
                probe.append(i)
            if outside:
                assert n is None, (b.gid, direc)
                continue
            assert n == _owner_of(d, probe), (b.gid, direc)
            assert d.neighbor(n, tuple(-s for s in direc)) == b.gid
            for a in range(3):  # never leaves a non-periodic axis
                if not d.periodic[a]:
                    assert d.block(n).coords[a] == b.coords[a] + direc[a]


@SETTINGS
@given(d=domains())
def test_owners_are_contiguous_balanced_runs(d):
    nranks = max(d.owners) + 1
    assert list(d.owners) == sorted(d.owners)
    assert d.owners[0] == 0
    seen = []
    sizes = []
    for r in range(nranks + 2):
        mine = d.blocks_of(r)
        assert mine == sorted(mine)
        if mine:
            assert mine == list(range(mine[0], mine[-1] + 1))  # contiguous run
        assert all(d.block(g).owner == r for g in mine)
        seen += mine
        if r < nranks:
            sizes.append(len(mine))
    assert sorted(seen) == list(range(d.nblocks))  # blocks_of partitions the gids
    assert len(seen) == d.nblocks
    if d.nblocks >= nranks:
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("nblocks,nranks", [(8, 1), (8, 2), (8, 3), (12, 5), (4, 4), (2, 5)])
def test_default_owners_distribution(nblocks, nranks):
    d = Domain.create((24, 24, 24), nblocks=nblocks, nranks=nranks)
    per_rank = [len(d.blocks_of(r)) for r in range(nranks)]
    assert sum(per_rank) == nblocks
    assert max(per_rank) - min(per_rank) <= 1
    assert [r for r in range(nranks) for _ in d.blocks_of(r)] == list(d.owners)


def test_explicit_owners():
    d = Domain.create((8, 8, 8), blocks=(2, 2, 1), owners=[1, 0, 1, 0], nranks=2)
    assert d.blocks_of(0) == [1, 3] and d.blocks_of(1) == [0, 2]
    assert [b.owner for b in d] == [1, 0, 1, 0]


@SETTINGS
@given(d=domains(), data=st.data())
def test_global_local_round_trip(d, data):
    g = d.ghost
    for b in d:
        # Interior samples, corners plus a few random ones.
        pts = list(itertools.product(*[(b.lo[a], b.hi[a] - 1) for a in range(3)]))
        pts += data.draw(st.lists(st.tuples(*[st.integers(b.lo[a], b.hi[a] - 1) for a in range(3)]), max_size=3))
        for p in pts:
            loc = d.global_to_local(b.gid, p)
            assert loc == tuple(p[a] - b.lo[a] + g for a in range(3))
            assert all(g <= loc[a] < g + b.shape[a] for a in range(3))
            assert d.local_to_global(b.gid, loc) == tuple(p)
        # Ghost samples: wrapped on periodic axes, left as is on the others.
        for loc in itertools.product(*[(0, b.padded_shape[a] - 1) for a in range(3)]):
            raw = [loc[a] + b.lo[a] - g for a in range(3)]
            want = tuple(raw[a] % d.dims[a] if d.periodic[a] else raw[a] for a in range(3))
            got = d.local_to_global(b.gid, loc)
            assert got == want
            for a in range(3):
                if d.periodic[a]:
                    assert 0 <= got[a] < d.dims[a]


def test_local_to_global_wraps_on_periodic_axes_only():
    d = Domain.create((10, 6, 4), blocks=(2, 1, 1), ghost=2, periodic=(True, False, True))
    # Block 0 covers x in [0, 5): padded index 0 is x = -2 -> 8 on the periodic axis.
    assert d.local_to_global(0, (0, 0, 0)) == (8, -2, 2)
    assert d.local_to_global(1, (8, 9, 7)) == (1, 7, 1)
    assert d.global_to_local(1, (5, 0, 0)) == (2, 2, 2)


# --------------------------------------------------------------------------- extract / assemble


def _padded_reference(G, ghost, periodic):
    """np.pad axis by axis: wrap on periodic axes, zeros elsewhere."""
    out = G
    for a in range(3):
        width = [(0, 0)] * 3
        width[a] = (ghost, ghost)
        out = np.pad(out, width, mode="wrap" if periodic[a] else "constant")
    return out


@pytest.mark.parametrize("periodic,mode", [(True, "wrap"), (False, "constant")])
@pytest.mark.parametrize("ghost", [0, 1, 2, 3])
@pytest.mark.parametrize("dims,kw", [
    ((9, 7, 5), dict(nblocks=8)),
    ((6, 5, 4), dict(blocks=(3, 1, 2))),
    ((7, 6, 5), dict(offsets=[(0, 1, 7), (0, 4, 5, 6), (0, 5)])),
    ((2, 3, 1), dict(blocks=(2, 3, 1))),  # blocks thinner than the ghost width
])
def test_extract_matches_np_pad(periodic, mode, ghost, dims, kw):
    rng = np.random.default_rng(0)
    G = rng.standard_normal(dims).astype(np.float32)
    d = Domain.create(dims, ghost=ghost, periodic=periodic, **kw)
    P = np.pad(G, ghost, mode=mode)
    parts = {}
    for b in d:
        blk = d.extract(G, b.gid)
        assert blk.shape == b.padded_shape and blk.dtype == G.dtype
        np.testing.assert_array_equal(blk, P[tuple(slice(l, h + 2 * ghost) for l, h in zip(b.lo, b.hi))])
        assert not np.shares_memory(blk, G)
        np.testing.assert_array_equal(blk[b.interior], G[tuple(slice(l, h) for l, h in zip(b.lo, b.hi))])
        parts[b.gid] = blk
    np.testing.assert_array_equal(d.assemble(parts), G)


@SETTINGS
@given(d=domains(max_dim=12), seed=st.integers(0, 2**32 - 1))
def test_extract_and_assemble_property(d, seed):
    G = np.random.default_rng(seed).integers(-1000, 1000, d.dims).astype(np.int64)
    P = _padded_reference(G, d.ghost, d.periodic)
    parts = {}
    for b in d:
        blk = d.extract(G, b.gid)
        ref = P[tuple(slice(l, h + 2 * d.ghost) for l, h in zip(b.lo, b.hi))]
        np.testing.assert_array_equal(blk, ref)
        inner = d.extract(G, b.gid, ghost=False)
        np.testing.assert_array_equal(inner, G[tuple(slice(l, h) for l, h in zip(b.lo, b.hi))])
        parts[b.gid] = blk
    # Assembly ignores order.
    shuffled = dict(sorted(parts.items(), key=lambda kv: (kv[0] * 7919) % (d.nblocks + 1)))
    np.testing.assert_array_equal(d.assemble(shuffled), G)


def test_extract_mixed_periodicity_by_hand():
    G = np.arange(4 * 3 * 2).reshape(4, 3, 2) + 1
    d = Domain.create(G.shape, blocks=(1, 1, 1), ghost=1, periodic=(True, False, False))
    blk = d.extract(G, 0)
    assert blk.shape == (6, 5, 4)
    np.testing.assert_array_equal(blk[0, 1:-1, 1:-1], G[-1])  # wrapped along axis 0
    np.testing.assert_array_equal(blk[-1, 1:-1, 1:-1], G[0])
    assert (blk[:, 0] == 0).all() and (blk[:, -1] == 0).all()  # zeros along axis 1
    assert (blk[:, :, 0] == 0).all() and (blk[:, :, -1] == 0).all()


def test_extract_rejects_wrong_shape():
    d = Domain.create((4, 5, 6), nblocks=2)
    with pytest.raises(ValueError, match=r"global array has shape \(4, 5, 7\), domain dims are \(4, 5, 6\)"):
        d.extract(np.zeros((4, 5, 7)), 0)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args,kw,exc,match",
    [
        (((8, 8),), {}, ValueError, r"dims must have 3 entries \(one per axis\), got 2"),
        (((8, 8, 8, 8),), {}, ValueError, r"dims must have 3 entries \(one per axis\), got 4"),
        (((8, 0, 8),), {}, ValueError, r"dims must be positive, got \(8, 0, 8\)"),
        (((8, 8, 8),), dict(ghost=-1), ValueError, r"ghost must be an integer >= 0, got -1"),
        (((8, 8, 8),), dict(ghost=1.5), ValueError, r"ghost must be an integer >= 0, got 1.5"),
        (((3, 8, 8),), dict(blocks=(4, 1, 1)), ValueError, r"cannot split axis 0 of 3 samples into 4 blocks"),
        (((8, 8, 2),), dict(blocks=(1, 1, 3)), ValueError, r"cannot split axis 2 of 2 samples into 3 blocks"),
        (((2, 2, 2),), dict(nblocks=27), ValueError, r"cannot split axis \d of 2 samples into 3 blocks"),
        (((8, 8, 8),), dict(offsets=[(1, 4, 8), (0, 8), (0, 8)]), ValueError,
         r"offsets\[0\] must increase strictly from 0 to dims\[0\]=8, got \[1, 4, 8\]"),
        (((8, 8, 8),), dict(offsets=[(0, 8), (0, 4, 4, 8), (0, 8)]), ValueError,
         r"offsets\[1\] must increase strictly from 0 to dims\[1\]=8, got \[0, 4, 4, 8\]"),
        (((8, 8, 8),), dict(offsets=[(0, 8), (0, 8), (0, 5, 3, 8)]), ValueError,
         r"offsets\[2\] must increase strictly from 0 to dims\[2\]=8, got \[0, 5, 3, 8\]"),
        (((8, 8, 6),), dict(offsets=[(0, 8), (0, 8), (0, 3, 7)]), ValueError,
         r"offsets\[2\] must increase strictly from 0 to dims\[2\]=6, got \[0, 3, 7\]"),
        (((8, 8, 8),), dict(offsets=[(0, 8), (0, 8), (0, 4)]), ValueError,
         r"offsets\[2\] must increase strictly from 0 to dims\[2\]=8, got \[0, 4\]"),
        (((8, 8, 8),), dict(offsets=[(0, 8), (0, 8), (0,)]), ValueError,
         r"offsets\[2\] must increase strictly from 0 to dims\[2\]=8, got \[0\]"),
        (((8, 8, 8),), dict(offsets=[(0, 8), (0, 8)]), ValueError, r"offsets needs one sequence per axis \(3\), got 2"),
        (((8, 8, 8),), dict(nblocks=4, owners=[0, 1, 2]), ValueError, r"owners has 3 entries for 4 blocks"),
        (((8, 8, 8),), dict(nblocks=4, owners=[0, 1, 2, 3, 4]), ValueError, r"owners has 5 entries for 4 blocks"),
        (((8, 8, 8),), dict(nranks=0, nblocks=2), ValueError, r"nranks must be >= 1, got 0"),
        (((8, 8, 8),), dict(periodic=(True, False)), ValueError, r"periodic must have 3 entries"),
        (((8, 8, 8),), dict(blocks=(2, 2)), ValueError, r"blocks must have 3 entries"),
    ],
)
def test_create_errors(args, kw, exc, match):
    with pytest.raises(exc, match=match):
        Domain.create(*args, **kw)


@pytest.mark.parametrize("gid", [-1, 8, 100])
def test_gid_out_of_range(gid):
    d = Domain.create((8, 8, 8), nblocks=8)
    msg = rf"block id {gid} out of range \[0, 8\)"
    for call in (d.block, d.coords, d.neighbors, lambda g: d.neighbor(g, (1, 0, 0)),
                 lambda g: d.global_to_local(g, (0, 0, 0)), lambda g: d.local_to_global(g, (0, 0, 0)),
                 lambda g: d.extract(np.zeros((8, 8, 8)), g)):
        with pytest.raises(IndexError, match=msg):
            call(gid)


@pytest.mark.parametrize("idx", [(-1, 0, 0), (0, 9, 0), (0, 0, 7), (8, 9, 7), (0, 0, -1)])
def test_locate_outside_domain(idx):
    d = Domain.create((8, 9, 7), nblocks=6, periodic=True)
    with pytest.raises(IndexError, match=rf"index {re.escape(str(idx))} is outside the domain \(8, 9, 7\)"):
        d.locate(idx)


def test_locate_inside_edges():
    d = Domain.create((8, 9, 7), offsets=[(0, 3, 8), (0, 9), (0, 1, 2, 7)])
    assert d.locate((0, 0, 0)) == 0
    assert d.locate((2, 8, 0)) == 0
    assert d.locate((3, 0, 0)) == d.gid((1, 0, 0))
    assert d.locate((7, 8, 6)) == d.nblocks - 1
    assert d.locate((7, 8, 1)) == d.gid((1, 0, 1))
