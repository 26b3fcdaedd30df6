"""Queries on an mpirun job: reductions and histograms are global (equal NumPy's over the whole field).

Usage: mpiexec -n N python tests/mpi/queries_check.py

The field is split along x among the ranks, one ghost cell beyond each block's real cells
(marked in ``ascent_ghosts``, holding values that would win every reduction if read). Rank 0
has two domains, the last rank none when N > 2 (a rank without data still takes part).
Every rank checks its results()["queries"] against NumPy; prints "OK ranks=N" on rank 0.
"""

import sys

import numpy as np
from mpi4py import MPI

import adaptors

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
dims = (25, 12, 10)  # nodes
h = np.array([0.1, 0.2, 0.3])
origin = np.array([-1.0, 0.5, 2.0])
rng = np.random.default_rng(3)
p = rng.normal(size=dims)  # vertex field
e = rng.uniform(0.0, 10.0, size=tuple(n - 1 for n in dims))  # element field
e[3, 4, 5] = np.nan
e[7, 1, 2] = np.inf

# Cell ranges along x: rank 0 takes two pieces when N > 1; the last rank none when N > 2.
pieces = {1: 1, 2: 3}.get(size, size)
owners = {1: [0], 2: [0, 0, 1]}.get(size, [0, 0, *range(1, size - 1)])
edges = np.linspace(0, dims[0] - 1, pieces + 1).round().astype(int)
mine = [i for i, o in enumerate(owners) if o == rank]


def block(i):
    c0, c1 = edges[i], edges[i + 1]
    g0, g1 = max(c0 - 1, 0), min(c1 + 1, dims[0] - 1)  # one ghost cell each side where there is a neighbour
    pv = p[g0:g1 + 1].copy()
    ev = e[g0:g1].copy()
    ghost = ((c0 - g0, g1 - c1), (0, 0), (0, 0))
    if c0 > g0:
        pv[0], ev[0] = 1e6, 1e6  # a ghost layer: left out of every reduction
    if g1 > c1:
        pv[-1], ev[-1] = -1e6, -1e6
    return adaptors.uniform({"p": pv, "e": ev}, origin=origin + [g0 * h[0], 0, 0], spacing=h, ghost=ghost,
                            element=("e",), domain_id=i)


queries = {
    "q1": {"params": {"expression": "max(field('p'))", "name": "max_p"}},
    "q2": {"params": {"expression": "min(field('p'))", "name": "min_p"}},
    "q3": {"params": {"expression": "max(field('e'))", "name": "max_e"}},
    "q4": {"params": {"expression": "sum(field('e'))", "name": "sum_e"}},
    "q5": {"params": {"expression": "avg(field('p'))", "name": "avg_p"}},
    "q6": {"params": {"expression": "histogram(field('e'), num_bins=32, min_val=0, max_val=10)", "name": "h"}},
    "q7": {"params": {"expression": "entropy(histogram(field('e'), num_bins=32, min_val=0, max_val=10))",
                      "name": "ent"}},
    "q8": {"params": {"expression": "field_nan_count(field('e'))", "name": "nans"}},
    "q9": {"params": {"expression": "field_inf_count(field('e'))", "name": "infs"}},
    "q10": {"params": {"expression": "entropy(histogram(field('p'), num_bins=16))", "name": "ent_p"}},
}
bad = []
with adaptors.Adaptor({"queries": queries}, comm) as a:
    ok = a.execute(4, 0.5, [block(i) for i in mine])
    got = a.results()["queries"]
    if not ok:
        bad.append(f"execute failed: {a.results()['errors']}")

if not bad:
    finite = e[np.isfinite(e)]
    ijk = np.unravel_index(np.argmax(p), p.shape)
    want_pos = origin + np.asarray(ijk) * h
    if got["max_p"]["value"] != p.max() or not np.allclose(got["max_p"]["position"], want_pos, rtol=0, atol=1e-12):
        bad.append(f"max_p {got['max_p']} != {p.max()} at {want_pos}")
    ijk = np.unravel_index(np.argmin(p), p.shape)
    if got["min_p"]["value"] != p.min() or not np.allclose(got["min_p"]["position"], origin + np.asarray(ijk) * h,
                                                           rtol=0, atol=1e-12):
        bad.append(f"min_p {got['min_p']} != {p.min()}")
    if got["max_e"]["value"] != np.inf:
        bad.append(f"max_e {got['max_e']['value']} != inf")
    vals = e[~np.isnan(e) & ~np.isinf(e)]
    want_sum = vals.sum() + np.inf
    if got["sum_e"] != want_sum:
        bad.append(f"sum_e {got['sum_e']} != {want_sum}")
    # p is a vertex field: the nodes of a seam between blocks are real in both (as in Ascent without ghosts)
    seams = [edges[i] for i in range(1, pieces)]
    total = p.sum() + sum(p[s].sum() for s in seams)
    count = p.size + len(seams) * p[0].size
    if abs(got["avg_p"] - total / count) > 1e-12:
        bad.append(f"avg_p {got['avg_p']} != {total / count}")
    b = np.clip(((np.clip(e[~np.isnan(e)], 0, 10) - 0) * 3.2).astype(np.int64), 0, 31)
    want_h = np.bincount(b, minlength=32).astype(float)
    if got["h"]["value"] != want_h.tolist() or sum(got["h"]["value"]) != finite.size + 1:
        bad.append(f"histogram {got['h']['value']} != {want_h.tolist()}")
    q = want_h[want_h > 0] / want_h.sum()
    if abs(got["ent"] - float(-(q * np.log(q)).sum())) > 1e-12:
        bad.append(f"entropy {got['ent']}")
    if got["nans"] != 1 or got["infs"] != 1:
        bad.append(f"nan/inf counts {got['nans']} {got['infs']}")
    allp = np.concatenate([p.ravel()] + [p[s].ravel() for s in seams])
    c = np.histogram(allp, 16, (p.min(), p.max()))[0]
    q = c[c > 0] / c.sum()
    if abs(got["ent_p"] - float(-(q * np.log(q)).sum())) > 1e-12:
        bad.append(f"entropy of p {got['ent_p']}")

everyone = comm.gather(bad, root=0)
if rank == 0:
    for r, b in enumerate(everyone):
        for line in b:
            print(f"FAIL rank {r}: {line}", flush=True)
    print(f"{'OK' if not any(everyone) else 'FAILED'} ranks={size}", flush=True)
sys.exit(1 if bad else 0)
