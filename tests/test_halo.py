"""Halo exchange in one process: ghost cells against np.pad, and input errors."""

import numpy as np
import pytest

from insitu import Domain, HaloExchange, MismatchError, exchange_halos
from insitu.halo import _mirror_pairs, halo_messages


def _blocks(dom, G, fill=-1.0):
    out = {}
    for b in dom:
        a = np.full(b.padded_shape, fill, G.dtype)
        a[b.interior] = G[tuple(slice(l, h) for l, h in zip(b.lo, b.hi))]
        out[b.gid] = a
    return out


@pytest.mark.parametrize("blocks", [(1, 1, 1), (2, 1, 1), (1, 3, 2), (3, 3, 3)])
@pytest.mark.parametrize("g", [1, 2, 3])
def test_periodic_ghosts_equal_wrapped_array(blocks, g):
    rng = np.random.default_rng(0)
    G = rng.random((13, 11, 12)).astype(np.float32)
    dom = Domain.create(G.shape, blocks=blocks, ghost=g, periodic=True)
    arrs = _blocks(dom, G)
    exchange_halos(dom, arrs)
    P = np.pad(G, g, mode="wrap")
    for b in dom:
        np.testing.assert_array_equal(arrs[b.gid], P[tuple(slice(l, l + n) for l, n in zip(b.lo, b.padded_shape))])


def test_nonperiodic_outer_ghosts_untouched():
    G = np.arange(6 * 6 * 6, dtype=np.float64).reshape(6, 6, 6)
    dom = Domain.create(G.shape, blocks=(2, 2, 2), ghost=1)
    arrs = _blocks(dom, G, fill=np.nan)
    HaloExchange(dom).exchange(arrs)
    P = np.pad(G, 1, mode="constant", constant_values=np.nan)
    for b in dom:
        want = P[tuple(slice(l, l + n) for l, n in zip(b.lo, b.padded_shape))]
        np.testing.assert_array_equal(arrs[b.gid], want)


def test_every_ghost_cell_written_exactly_once():
    # Ghost regions of the 26 messages tile each block's ghost shell without overlap.
    dom = Domain.create((10, 9, 8), blocks=(2, 3, 2), ghost=2, periodic=True)
    for b in dom:
        hits = np.zeros(b.padded_shape, int)
        for m in halo_messages(dom):
            if m.dst == b.gid:
                hits[m.recv] += 1
        shell = np.ones(b.padded_shape, bool)
        shell[b.interior] = False
        assert (hits[shell] == 1).all() and (hits[~shell] == 0).all()


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("blocks", [(2, 2, 2), (1, 2, 3), (3, 1, 1)])
def test_mirror_pairs_for_the_device_copy(periodic, blocks):
    # The GPU copy kernel runs each pair with the same threads, reading both sources
    # before writing: valid only if no pair writes where the other member reads.
    dom = Domain.create((7, 8, 9), blocks=blocks, ghost=2, periodic=periodic)
    msgs = halo_messages(dom)
    out, pairs = _mirror_pairs(msgs)
    assert sorted(map(id, out)) == sorted(map(id, msgs))
    assert len(pairs) * 2 == len(msgs)  # every copy has its mirror in this domain
    for a, b in pairs:
        ma, mb = out[a], out[b]
        assert b == a + 1 and (mb.src, mb.dst) == (ma.dst, ma.src) and ma.shape == mb.shape
        assert mb.direction == tuple(-x for x in ma.direction)
        for w, r in ((ma, mb), (mb, ma)):
            if w.dst == r.src:
                written = np.zeros(dom.block(w.dst).padded_shape, bool)
                written[w.recv] = True
                assert not written[r.send].any()


def test_ghost_zero_is_a_no_op():
    dom = Domain.create((4, 4, 4), blocks=(2, 1, 1), ghost=0)
    arrs = {b.gid: np.full(b.padded_shape, b.gid, np.int32) for b in dom}
    HaloExchange(dom).exchange(arrs)
    assert all((a == g).all() for g, a in arrs.items())


def test_wrong_shape_is_named():
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1), ghost=1)
    arrs = {b.gid: np.zeros(b.padded_shape, np.float32) for b in dom}
    arrs[1] = np.zeros((4, 8, 8), np.float32)
    with pytest.raises(ValueError, match=r"block 1: array has shape \(4, 8, 8\), expected \(6, 10, 10\)"):
        HaloExchange(dom).exchange(arrs)


def test_missing_and_foreign_blocks_are_named():
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1), ghost=1)
    with pytest.raises(ValueError, match=r"expected blocks \[0, 1\], got \[0\] \(missing \[1\]\)"):
        HaloExchange(dom).exchange({0: np.zeros(dom.block(0).padded_shape)})
    with pytest.raises(ValueError, match=r"not owned here: \[7\]"):
        HaloExchange(dom).exchange({**{g: np.zeros(dom.block(g).padded_shape) for g in (0, 1)}, 7: np.zeros(3)})


def test_mixed_dtypes_rejected():
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1), ghost=1)
    arrs = {0: np.zeros(dom.block(0).padded_shape, np.float32), 1: np.zeros(dom.block(1).padded_shape, np.float64)}
    with pytest.raises(MismatchError, match=r"mixed dtypes \['float32', 'float64'\]"):
        HaloExchange(dom).exchange(arrs)


def test_neighbour_thinner_than_ghost():
    dom = Domain.create((8, 8, 8), offsets=((0, 1, 8), (0, 8), (0, 8)), ghost=2)
    with pytest.raises(ValueError, match="block 0 is 1 samples thick along axis 0, less than the ghost width 2"):
        HaloExchange(dom)


def test_unknown_transport_lists_known():
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1))
    with pytest.raises(ValueError, match=r"unknown transport 'tcp'; known transports: inproc, mpi, nccl, ipc, p2p"):
        HaloExchange(dom, transport="tcp")
    with pytest.raises(ValueError, match="serves only blocks of the same rank"):
        HaloExchange(dom, transport="inproc")


def test_transport_of_the_wrong_kind_is_refused_up_front():
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1))
    with pytest.raises(ValueError, match=r"transport must be a name or a \{peer rank: name\} mapping, got list"):
        HaloExchange(dom, transport=["mpi"])
    with pytest.raises(ValueError, match="unknown transport 'tcp'"):
        HaloExchange(dom, transport={1: "tcp"})


def test_owners_beyond_job_size():
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1), nranks=2)
    with pytest.raises(ValueError, match=r"assigns blocks to rank\(s\) \[1\], but the job has 1 rank"):
        HaloExchange(dom)


def test_list_instead_of_array():
    dom = Domain.create((2, 2, 2), blocks=(1, 1, 1), ghost=0)
    with pytest.raises(TypeError, match="block 0: expected an array"):
        HaloExchange(dom).exchange({0: [[[0.0] * 2] * 2] * 2})


def test_reshaped_array_is_caught_on_a_later_call():
    # The per-call check is cached for the same array objects; an in-place change of
    # shape must still be caught before any copy runs.
    dom = Domain.create((8, 8, 8), blocks=(2, 1, 1), ghost=1)
    arrs = {b.gid: np.zeros(b.padded_shape, np.float32) for b in dom}
    ex = HaloExchange(dom)
    ex.exchange(arrs)
    arrs[1].shape = (10, 6, 10)
    with pytest.raises(ValueError, match=r"block 1: array has shape \(10, 6, 10\), expected \(6, 10, 10\)"):
        ex.exchange(arrs)


def test_exchange_halos_accepts_a_per_peer_transport_map():
    dom = Domain.create((6, 6, 6), blocks=(2, 1, 1), ghost=1, periodic=True)
    G = np.arange(216, dtype=np.float64).reshape(6, 6, 6)
    arrs = _blocks(dom, G)
    exchange_halos(dom, arrs, transport={})  # an (empty) per-peer map is a valid override
    P = np.pad(G, 1, mode="wrap")
    for b in dom:
        np.testing.assert_array_equal(arrs[b.gid], P[tuple(slice(l, l + n) for l, n in zip(b.lo, b.padded_shape))])
