"""Sort-last compositing: the local references, the schedules, and mpiexec runs against them."""

import numpy as np
import pytest
from mpi4py import MPI

from insitu import MismatchError
from render._compositor import Layout
from render.composite import _make_plan, _pairs, composite, depth_composite, over_composite, plan_rounds

MPI_ENV = {"NUMBA_NUM_THREADS": "1"}  # several ranks on 2 cores


def rgba(r, g, b, a, shape=(2, 3)):
    """A constant premultiplied image."""
    return np.broadcast_to(np.array([r, g, b, a], np.float32), (*shape, 4)).copy()


# --------------------------------------------------------------------------- references


def test_over_opaque_front_hides_back():
    front, back = rgba(0.2, 0.3, 0.4, 1.0), rgba(0.9, 0.8, 0.7, 1.0)
    np.testing.assert_array_equal(over_composite([front, back]), front)


def test_over_empty_front_shows_back():
    np.testing.assert_array_equal(over_composite([rgba(0, 0, 0, 0), rgba(0.5, 0.1, 0.2, 0.5)]),
                                  rgba(0.5, 0.1, 0.2, 0.5))


def test_over_half_transparent_front():
    out = over_composite([rgba(0.5, 0.0, 0.0, 0.5), rgba(0.0, 0.0, 0.8, 0.8)])
    np.testing.assert_allclose(out, rgba(0.5, 0.0, 0.4, 0.9), rtol=0, atol=1e-7)


def test_over_is_order_dependent_but_associative():
    rng = np.random.default_rng(1)
    ims = []
    for _ in range(4):
        a = rng.random((5, 4, 1)).astype(np.float32)
        ims.append(np.concatenate([rng.random((5, 4, 3)).astype(np.float32) * a, a], axis=2))
    left = over_composite(ims)
    grouped = over_composite([over_composite(ims[:2]), over_composite(ims[2:])])
    np.testing.assert_allclose(left, grouped, atol=1e-6)
    assert not np.allclose(left, over_composite(ims[::-1]))


def test_over_does_not_modify_inputs():
    a, b = rgba(0.2, 0.2, 0.2, 0.4), rgba(0.5, 0.5, 0.5, 1.0)
    a0, b0 = a.copy(), b.copy()
    over_composite([a, b])
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_depth_nearest_wins_and_ties_go_to_the_earlier_image():
    c = [rgba(1, 0, 0, 1, (1, 4)), rgba(0, 1, 0, 1, (1, 4)), rgba(0, 0, 1, 1, (1, 4))]
    d = [np.array([[1.0, 2.0, np.inf, 3.0]], np.float32),
         np.array([[0.5, 2.0, np.inf, 3.0]], np.float32),
         np.array([[0.7, 1.0, np.inf, 3.0]], np.float32)]
    col, dep = depth_composite(c, d)
    np.testing.assert_array_equal(dep, [[0.5, 1.0, np.inf, 3.0]])
    # pixel 0: image 1 nearest; 1: image 2; 2: nothing hit (image 0 by the tie rule); 3: tie -> image 0
    winners = [1, 2, 0, 0]
    for px, w in enumerate(winners):
        np.testing.assert_array_equal(col[0, px], c[w][0, px])


def test_reference_errors():
    with pytest.raises(ValueError, match=r"over_composite: images: \[1\] is \(2, 4, 4\) float32, \[0\] is \(2, 3, 4\)"):
        over_composite([rgba(0, 0, 0, 1), rgba(0, 0, 0, 1, (2, 4))])
    with pytest.raises(ValueError, match="over_composite: images must be \\(height, width, 4\\) RGBA"):
        over_composite([np.zeros((2, 3, 3), np.float32)])
    with pytest.raises(ValueError, match="need one depth per image, got 2 images and 1 depths"):
        depth_composite([rgba(0, 0, 0, 1)] * 2, [np.zeros((2, 3), np.float32)])
    with pytest.raises(ValueError, match=r"depth shape \(3, 2\) does not match image shape \(2, 3, 4\)"):
        depth_composite([rgba(0, 0, 0, 1)], [np.zeros((3, 2), np.float32)])


# --------------------------------------------------------------------------- schedules


def _simulate(plan, h):
    """Replay a plan on intervals of the visibility order: check every merge joins
    adjacent intervals front to back, and the final strips tile the image."""
    n = len(plan.order)
    held = {p: (p, p + 1) for p in range(n)}  # position -> interval of the order it holds
    for s, r in plan.folds:
        assert held[r][1] == held[s][0], (s, r)
        held[r] = (held[r][0], held[s][1])
    nv = len(plan.active)
    for t in range(len(plan.radices)):
        new = {}
        for v in range(nv):
            members, d = plan.group(v, t)
            assert members[d] == v and all(0 <= m < nv for m in members)
            ivs = [held[plan.active[m]] for m in members]
            assert all(a[1] == b[0] for a, b in zip(ivs, ivs[1:])), (t, v, ivs)
            # the group splits one strip the same way
            assert len({tuple(plan.strips(m, h)[t][0]) for m in members}) == 1
            new[v] = (ivs[0][0], ivs[-1][1])
        for v, iv in new.items():
            held[plan.active[v]] = iv
    for v in range(len(plan.active)):
        assert held[plan.active[v]] == (0, n)
    tiles = sorted(plan.final_rows(v, h) for v in range(len(plan.active)))
    assert tiles[0][0] == 0 and tiles[-1][1] == h
    assert all(a[1] == b[0] for a, b in zip(tiles, tiles[1:]))


@pytest.mark.parametrize("method", ["direct-send", "binary-swap", "radix-k", "auto"])
@pytest.mark.parametrize("n", list(range(1, 18)) + [24, 27, 31, 32, 36])
def test_schedule_keeps_intervals_contiguous(method, n):
    order = list(np.random.default_rng(n).permutation(n))
    for h in (1, 3, n, 37):
        _simulate(_make_plan(order, method), h)


def test_plan_rounds():
    assert plan_rounds(4) == {"method": "direct-send", "folds": [], "radices": [4], "active": [0, 1, 2, 3]}
    assert plan_rounds(5)["method"] == "binary-swap"
    assert plan_rounds(6, "binary-swap", order=[5, 4, 3, 2, 1, 0]) == {
        "method": "binary-swap", "folds": [(4, 5), (2, 3)], "radices": [2, 2], "active": [5, 3, 1, 0]}
    assert plan_rounds(12, "radix-k")["radices"] == [4, 3]
    assert plan_rounds(7, "radix-k")["radices"] == [7]
    with pytest.raises(ValueError, match="unknown method 'tree'; known: auto, direct-send"):
        plan_rounds(4, "tree")


# --------------------------------------------------------------------------- one rank, in process


class FakeNccl:
    """Looks like a cupy.cuda.nccl.NcclCommunicator from outside."""

    def __init__(self, rank, size):
        self.rank_id, self.size = (lambda: rank), (lambda: size)

    def send(self, *a):
        raise AssertionError("must not be used")

    recv = send


def test_single_rank_returns_a_copy():
    c, d = rgba(0.1, 0.2, 0.3, 0.4), np.ones((2, 3), np.float32)
    out_c, out_d = composite(c, d, comm=MPI.COMM_SELF)
    np.testing.assert_array_equal(out_c, c)
    np.testing.assert_array_equal(out_d, d)
    assert out_c is not c
    info = {}
    out = composite(c, comm=MPI.COMM_SELF, mode="over", info=info)
    np.testing.assert_array_equal(out, c)
    assert info["transport"] == "local" and info["method"] == "none" and info["transports"] == {}


@pytest.mark.parametrize("kwargs,message", [
    (dict(mode="depth"), "rank 0: mode='depth' needs depth="),
    (dict(mode="over", order=[1]), r"rank 0: order must be a permutation of the ranks 0..0, got \[1\]"),
    (dict(mode="over", order=[0, 0]), r"order must be a permutation of the ranks 0..0, got \[0, 0\]"),
    (dict(mode="over", order=3), r"order must be a permutation of the ranks 0..0, got 3"),
    (dict(mode="sum"), "unknown mode 'sum'; known: depth, over"),
    (dict(mode="over", method="tree"), "unknown method 'tree'; known: auto, direct-send, binary-swap, radix-k"),
    (dict(mode="over", root=1), r"root 1 is not a rank of the communicator \(0..0\)"),
    (dict(mode="over", depth=np.ones((2, 3), np.float32)), "mode='over' composes by `order`, not depth"),
    (dict(mode="depth", depth=np.ones((3, 2), np.float32)), r"depth must be a float array of shape \(2, 3\)"),
    (dict(mode="over", nccl=object()), "rank 0: nccl= must be a NCCL communicator with send/recv, got object"),
    (dict(mode="over", nccl=FakeNccl(rank=1, size=2)), r"the NCCL communicator's rank_id\(\) is 1, the MPI"),
    (dict(mode="over", transport="ucx"), "rank 0: unknown transport 'ucx'; known transports: inproc, mpi, nccl"),
    (dict(mode="over", transport="inproc"), "transport 'inproc' serves only blocks of the same rank"),
    (dict(mode="over", transport={"1": "mpi"}), r"transport= maps peer ranks \(int\) to names, got keys \[\"'1'\"\]"),
    (dict(mode="over", transport=3), "transport must be a name or a {peer rank: name} mapping, got int"),
])
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        composite(rgba(0, 0, 0, 1), comm=MPI.COMM_SELF, **kwargs)


def test_nccl_booleans_are_deprecated_and_ignored_for_host_images():
    info = {}
    with pytest.warns(DeprecationWarning, match=r"nccl=True/False is deprecated; pass transport='nccl' \(for True\)"):
        out = composite(rgba(0.1, 0.2, 0.3, 0.4), comm=MPI.COMM_SELF, mode="over", nccl=True, info=info)
    np.testing.assert_array_equal(out, rgba(0.1, 0.2, 0.3, 0.4))
    assert info["transport"] == "local"


@pytest.mark.parametrize("cdtype,ddtype,channels", [
    (np.float32, np.float32, 4), (np.float64, np.float32, 4), (np.float32, np.float64, 3), (np.float16, np.float64, 1),
    (np.float32, None, 4),
])
def test_layout_keeps_colour_and_depth_of_a_row_band_in_one_segment(cdtype, ddtype, channels):
    h, w = 7, 5
    rng = np.random.default_rng(3)
    c = rng.random((h, w, channels) if channels > 1 else (h, w)).astype(cdtype)
    d = None if ddtype is None else rng.random((h, w)).astype(ddtype)
    lay = Layout.of(c, d)
    assert lay.rowbytes % max(np.dtype(cdtype).itemsize, np.dtype(ddtype or cdtype).itemsize) == 0
    area = np.zeros(lay.rowbytes * (h + 3), np.uint8)
    wc, wd = lay.frag(area, 0, h)
    wc[...] = c
    if d is not None:
        wd[...] = d
    np.testing.assert_array_equal(wc, c)  # colour and depth do not overlap
    if d is not None:
        np.testing.assert_array_equal(wd, d)
    # Rows 2..5 moved as one segment land as rows 2..5 of a fragment elsewhere in the area.
    lay.segment(area, h, 3)[...] = lay.segment(area, 2, 3)
    bc, bd = lay.frag(area, h, 3)
    np.testing.assert_array_equal(bc, c[2:5])
    if d is not None:
        np.testing.assert_array_equal(bd, d[2:5])
    assert lay.segment(area, 2, 3).flags.c_contiguous and lay.segment(area, 2, 3).nbytes == 3 * lay.rowbytes


@pytest.mark.parametrize("method", ["direct-send", "binary-swap", "radix-k"])
@pytest.mark.parametrize("n", [2, 3, 5, 6, 8, 12])
def test_pairs_are_every_pair_the_schedule_makes_talk(method, n):
    order = list(np.random.default_rng(n).permutation(n))
    plan = _make_plan(order, method)
    root = n - 1
    pairs = _pairs(plan, root)
    assert all(a < b for a, b in pairs)
    assert {(min(plan.order[s], plan.order[r]), max(plan.order[s], plan.order[r])) for s, r in plan.folds} <= pairs
    talks_to_root = {plan.rank_of(u) for u in range(len(plan.active))} - {root}
    assert {(min(r, root), max(r, root)) for r in talks_to_root} <= pairs
    if method == "direct-send":
        assert len(pairs) == n * (n - 1) // 2


def test_over_needs_rgba():
    with pytest.raises(ValueError, match=r"mode='over' needs \(height, width, 4\) premultiplied RGBA, got shape"):
        composite(np.zeros((4, 4), np.float32), comm=MPI.COMM_SELF, mode="over")


# --------------------------------------------------------------------------- under mpiexec


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 5, 8])
def test_distributed_equals_reference(mpi, nranks):
    # Every method x {depth, over in rank / permuted / reversed order} x sizes 37x53,
    # 256x256 and 3x5 (fewer rows than strips), with the root moving around.
    p = mpi(nranks, "composite_check.py", env=MPI_ENV, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK ranks={nranks} backend=numpy" in p.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("args", [["--transport", "mpi", "--rgba-dtype", "float64"], ["--evict-on-rank", "1"]])
def test_forced_transport_mixed_dtypes_and_uneven_caches_equal_reference(mpi, args):
    # float64 colour beside float32 depth in one row; a rank that forgot its kept
    # configurations makes every rank build anew, not wait for a set-up the others skip.
    p = mpi(3, "composite_check.py", "--sizes", "37x53", "3x5", *args, env=MPI_ENV, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK ranks=3 backend=numpy" in p.stdout and "transports=['mpi'] host_transfers=0" in p.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("fault,nranks,message", [
    ("shape", 3, "composite: rank 2 has image (9, 8, 4) float32 + depth (9, 8) float32 (numpy), rank 0 has "
                 "(9, 7, 4) float32 + depth (9, 7) float32 (numpy); all ranks must pass the same image shape"),
    ("dtype", 2, "composite: rank 1 has image (9, 7, 4) float64"),
    ("order", 3, "ValueError: composite: rank 0: order must be a permutation of the ranks 0..2, got [0, 0, 0]"),
    ("nodepth", 3, "ValueError: composite: rank 2: mode='depth' needs depth="),
    ("mode", 2, "composite: rank 1 has mode 'over', rank 0 has 'depth'"),
    ("hostipc", 2, "ValueError: composite: transport 'ipc' moves device arrays; host (NumPy) images move over 'mpi'"),
    ("peers", 2, "MismatchError: composite: rank 0 chose transport 'mpi' for rank 1, rank 1 chose 'ipc' for rank 0"),
])
def test_mismatch_is_a_clear_error_on_every_rank(mpi, fault, nranks, message):
    p = mpi(nranks, "composite_check.py", "--fault", fault, env=MPI_ENV, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(nranks):
        assert f"rank {r}: " in p.stdout and "no error" not in p.stdout, p.stdout
    assert message in p.stdout, p.stdout
    if fault in ("shape", "dtype", "mode", "peers"):
        assert "MismatchError" in p.stdout and issubclass(MismatchError, ValueError)


@pytest.mark.mpi
def test_absent_rank_times_out(mpi):
    p = mpi(2, "composite_check.py", "--fault", "absent", env=MPI_ENV, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0: PeerTimeoutError: composite on rank 0 (waiting for every rank): some rank of the " \
           "communicator did not answer in time" in p.stdout


@pytest.mark.mpi
def test_rank_that_stops_mid_exchange_is_named(mpi):
    p = mpi(3, "composite_check.py", "--fault", "stall", env=MPI_ENV, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    # direct-send: ranks 0 and 1 each wait for rank 2's strip.
    for r in (0, 1):
        assert f"rank {r}: PeerTimeoutError: MPI compositing on rank {r}: rank(s) [2] did not answer in time" \
            in p.stdout, p.stdout


@pytest.mark.mpi
def test_rank_arriving_after_the_others_gave_up_times_out_too(mpi):
    # Rank 0 gives up after 1 s; rank 1 calls 3 s late with 2 s to spare. What rank 0
    # left pending (its part of the agreement) must not pair with rank 1's and leave it
    # waiting in a collective rank 0 never enters.
    p = mpi(2, "composite_check.py", "--fault", "late", env=MPI_ENV, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in (0, 1):
        assert f"rank {r}: PeerTimeoutError: composite on rank {r} (waiting for every rank)" in p.stdout, p.stdout
