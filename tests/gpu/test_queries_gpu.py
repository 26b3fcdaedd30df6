"""adaptors.queries.MeshData with CuPy fields: every reduction an expression asks for (max/min
with positions, sum, avg, NaN/inf counts, histograms, entropy) equals the CPU's on the same
values; nothing is uploaded, and a histogram's counts come to the host in one copy."""

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from adaptors.context import Context  # noqa: E402
from adaptors.expressions import Env, evaluate, plain  # noqa: E402
from adaptors.mesh import parse, uniform  # noqa: E402
from adaptors.queries import MeshData  # noqa: E402
from insitu import arrays  # noqa: E402

DIMS = (20, 17, 13)
rng = np.random.default_rng(5)
P = rng.normal(size=DIMS)
E = rng.uniform(0, 10, size=tuple(n - 1 for n in DIMS)).astype(np.float32)
E[3, 4, 5] = np.nan
E[6, 2, 1] = np.inf
Q = P.copy()  # a NaN in the row of the largest real value: the device's row-wise search must not stop at it
_i, _j, _k = (int(a) + 1 for a in np.unravel_index(np.argmax(P[1:-1, 1:-1, 1:-1]), tuple(n - 2 for n in DIMS)))
Q[_i, _j, 1 if _k != 1 else 2] = np.nan


def data(xp):
    m = uniform({"p": xp.asarray(P), "e": xp.asarray(E), "q": xp.asarray(Q)}, origin=(0.5, -1.0, 2.0),
                spacing=(0.1, 0.2, 0.3), ghost=1, element=("e",))
    return MeshData(parse(m), Context(None))


EXPRESSIONS = ["max(field('p'))", "min(field('p'))", "max(field('q'))", "min(field('q'))", "max(field('e'))",
               "min(field('e'))", "sum(field('p'))",
               "avg(field('e'))", "field_nan_count(field('e'))", "field_inf_count(field('e'))",
               "histogram(field('p'), num_bins=64)", "histogram(field('e'), num_bins=16, min_val=0, max_val=10)",
               "entropy(histogram(field('p'), num_bins=32))", "bounds()"]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_reductions_on_the_device_equal_the_cpus(text):
    cpu = plain(evaluate(text, Env(0, 0.0, data(np))))
    gpu_data = data(cupy)
    with arrays.count_transfers() as c:
        gpu = plain(evaluate(text, Env(0, 0.0, gpu_data)))
    assert c.h2d_calls == 0
    assert c.d2h_calls == (1 if "histogram" in text else 0)  # the counts, once; everything else: scalar reads
    if isinstance(cpu, dict):
        assert cpu.keys() == gpu.keys()
        for k in cpu:
            if k == "value" and isinstance(cpu[k], list):
                np.testing.assert_array_equal(gpu[k], cpu[k])
            elif isinstance(cpu[k], (list, float)):
                np.testing.assert_allclose(gpu[k], cpu[k], rtol=1e-12)
            else:
                assert gpu[k] == cpu[k], k
    else:
        assert gpu == pytest.approx(cpu, rel=1e-9, abs=1e-9)  # sums: another order of additions


PTS = rng.uniform(-1, 1, size=(60, 3))
CONN = rng.integers(0, 60, size=(45, 4)).ravel()
PV, CV = rng.normal(size=60), rng.normal(size=45)
GH = (np.arange(45) % 7 == 0).astype(np.int32)


def cell_data(xp):
    from adaptors.mesh import unstructured

    m = unstructured(PTS, CONN, "tet", {"pv": xp.asarray(PV), "cv": xp.asarray(CV)}, element=("cv",), ghosts=GH)
    return MeshData(parse(m, cells=True), Context(None))


@pytest.mark.parametrize("text", ["max(field('pv'))", "min(field('cv'))", "max(field('cv'))",
                                  "histogram(field('cv'), num_bins=8)", "avg(field('pv'))", "bounds()"])
def test_reductions_of_cell_meshes_on_the_device_equal_the_cpus(text):
    cpu = plain(evaluate(text, Env(0, 0.0, cell_data(np))))
    gpu_data = cell_data(cupy)
    with arrays.count_transfers() as c:
        gpu = plain(evaluate(text, Env(0, 0.0, gpu_data)))
    assert c.h2d_calls == 0
    if isinstance(cpu, dict):
        for k in cpu:
            if isinstance(cpu[k], (list, float)):
                np.testing.assert_allclose(gpu[k], cpu[k], rtol=1e-12)
            else:
                assert gpu[k] == cpu[k], k
    else:
        assert gpu == pytest.approx(cpu, rel=1e-9, abs=1e-9)
