"""Ascent's expression language (adaptors.expressions) with the mesh side (adaptors.queries.MeshData):
expressions written as Ascent's documentation writes them, values computed here with NumPy."""

import math

import numpy as np
import pytest
import yaml

from adaptors import MeshError
from adaptors.context import Context
from adaptors.expressions import FieldRef, Histogram, Env, ValuePosition, Vector, evaluate, parse, plain
from adaptors.mesh import parse as parse_mesh
from adaptors.mesh import uniform
from adaptors.queries import MeshData

ORIGIN = np.array([1.0, -2.0, 0.5])
SPACING = np.array([0.1, 0.2, 0.25])
DIMS = (14, 11, 9)
GHOST = 1
rng = np.random.default_rng(25)
BRAID = rng.normal(size=DIMS)
CELLS = rng.uniform(-3.0, 5.0, size=tuple(n - 1 for n in DIMS))
VEL = {c: rng.normal(size=DIMS) for c in "xyz"}
# Each ghost layer holds the field's largest and smallest values: a reduction that read ghosts would find them.
BRAID[0, 0, 0], BRAID[-1, -1, -1] = 100.0, -100.0
CELLS[0, 0, 0], CELLS[-1, 3, 2] = 100.0, -100.0
# Real nodes: 1..n-2 of each axis (one ghost cell each side); real cells: 1..n-3.
RN = (slice(1, DIMS[0] - 1), slice(1, DIMS[1] - 1), slice(1, DIMS[2] - 1))
RC = (slice(1, DIMS[0] - 2), slice(1, DIMS[1] - 2), slice(1, DIMS[2] - 2))


def domains(braid=BRAID):
    m = uniform({"braid": braid, "energy": CELLS}, origin=ORIGIN, spacing=SPACING, ghost=GHOST,
                element=("energy",))
    m["fields"]["velocity"] = {"association": "vertex", "topology": "mesh", "values": dict(VEL)}
    return parse_mesh(m)


def env(doms=None, *, cycle=200, time=0.25, history=None):
    return Env(cycle, time, MeshData(domains() if doms is None else doms, Context(None)), history or {})


def node_position(ijk):
    return ORIGIN + np.asarray(ijk) * SPACING


def test_state_functions_as_the_documentation_writes_them():
    assert evaluate("cycle()", env(cycle=42)) == 42
    assert evaluate("time()", env(time=0.75)) == 0.75
    assert evaluate("cycle() % 100 == 0", env(cycle=200)) is True
    assert evaluate("cycle() % 100 == 0", env(cycle=201)) is False
    assert evaluate("if cycle() > 100 then 1 else 0", env(cycle=101)) == 1
    assert evaluate("if cycle() > 100 then 1 else 0", env(cycle=100)) == 0
    assert evaluate("1+1", env()) == 2
    assert evaluate("1e300", env()) == 1e300
    # insitu's older form keeps working
    assert evaluate("cycle % 10 == 0 and time < 1", env(cycle=30, time=0.5)) is True


def test_max_and_min_of_a_vertex_field_give_the_value_and_the_node_position():
    real = BRAID[RN]
    for op, arg in (("max", np.argmax), ("min", np.argmin)):
        got = evaluate(f"{op}(field('braid'))", env())
        ijk = np.unravel_index(arg(real), real.shape)
        assert isinstance(got, ValuePosition)
        assert got.value == real[ijk]  # the ghost layer's +-100 is left out
        want = node_position(np.asarray(ijk) + 1)
        np.testing.assert_allclose(got.position.plain(), want, rtol=1e-12)
        assert evaluate(f"{op}(field('braid')).value", env()) == real[ijk]
        assert evaluate(f"{op}(field('braid')).position.y", env()) == pytest.approx(want[1], rel=1e-12)
    # the documentation's: "max(field('density')).value" and "max_density - min(field('density')).value"
    hist = {"max_density": [evaluate("max(field('braid')).value", env())]}
    d = evaluate("max_density - min(field('braid')).value", env(history=hist))
    assert d == pytest.approx(real.max() - real.min())


def test_max_of_an_element_field_is_at_the_cell_centre():
    real = CELLS[RC]
    got = evaluate("max(field('energy'))", env())
    ijk = np.unravel_index(np.argmax(real), real.shape)
    assert got.value == real[ijk] and got.assoc == "element"
    np.testing.assert_allclose(got.position.plain(), ORIGIN + (np.asarray(ijk) + 1 + 0.5) * SPACING, rtol=1e-12)
    full = np.asarray(ijk) + 1
    assert got.index == full[0] + (DIMS[0] - 1) * (full[1] + (DIMS[1] - 1) * full[2])  # i fastest


def test_sum_avg_and_nan_inf_counts():
    real = BRAID[RN]
    assert evaluate("sum(field('braid'))", env()) == pytest.approx(real.sum(), rel=1e-12)
    assert evaluate("avg(field('braid'))", env()) == pytest.approx(real.mean(), rel=1e-12)
    bad = BRAID.copy()
    bad[2, 3, 4] = bad[5, 5, 5] = np.nan
    bad[3, 3, 3] = np.inf
    bad[4, 4, 4] = -np.inf
    bad[0, 5, 5] = np.nan  # a ghost node: not counted
    doms = domains(bad)
    assert evaluate("field_nan_count(field('braid'))", env(doms)) == 2
    assert evaluate("field_inf_count(field('braid'))", env(doms)) == 2
    r = bad[RN]
    finite = r[np.isfinite(r)]
    top, bottom = evaluate("max(field('braid'))", env(doms)), evaluate("min(field('braid'))", env(doms))
    assert (top.value, bottom.value) == (np.inf, -np.inf)  # NaN ignored, inf is a value
    np.testing.assert_allclose(top.position.plain(), node_position((3, 3, 3)), rtol=1e-12)
    np.testing.assert_allclose(bottom.position.plain(), node_position((4, 4, 4)), rtol=1e-12)
    assert evaluate("avg(field('braid'))", env(domains(np.where(np.isinf(bad), 0.0, bad)))) == pytest.approx(
        np.concatenate([finite, [0.0, 0.0]]).mean(), rel=1e-12)


def test_histogram_entropy_pdf_cdf_and_bins_as_the_documentation_writes_them():
    real = BRAID[RN].ravel()
    lo, hi = real.min(), real.max()
    h = evaluate('histogram(field("braid"), num_bins=128)', env())
    want, edges = np.histogram(real, bins=128, range=(lo, hi))
    assert isinstance(h, Histogram) and h.num_bins == 128 and (h.min_val, h.max_val) == (lo, hi)
    np.testing.assert_array_equal(h.value, want)
    p = want[want > 0] / want.sum()
    assert evaluate('entropy(histogram(field("braid"), num_bins=128))', env()) == pytest.approx(
        -(p * np.log(p)).sum(), rel=1e-12)
    c = np.histogram(real, 256, (lo, hi))[0]  # 256 bins by default
    p = c[c > 0] / real.size
    assert evaluate("entropy(histogram(field('braid')))", env()) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)
    np.testing.assert_allclose(evaluate("pdf(histogram(field('braid'), num_bins=16)).value", env()),
                               np.histogram(real, 16, (lo, hi))[0] / real.size, rtol=1e-12)
    np.testing.assert_allclose(evaluate("cdf(histogram(field('braid'), num_bins=16)).value", env()),
                               np.cumsum(np.histogram(real, 16, (lo, hi))[0]) / real.size, rtol=1e-12)
    # values outside [min_val, max_val] are clamped into the end bins (Ascent's histograms clamp)
    h = evaluate("histogram(field('braid'), num_bins=4, min_val=-1, max_val=1)", env())
    b = np.clip(((np.clip(real, -1, 1) + 1) * 2).astype(int), 0, 3)
    np.testing.assert_array_equal(h.value, np.bincount(b, minlength=4))
    assert evaluate("bin(histogram(field('braid'), num_bins=4, min_val=-1, max_val=1), 2)", env()) == h.value[2]
    assert evaluate("bin(histogram(field('braid'), num_bins=4, min_val=-1, max_val=1), val=0.75)", env()) == \
        h.value[3]
    assert evaluate("histogram(field('braid'), num_bins=4, min_val=-1, max_val=1).value[0]", env()) == h.value[0]
    assert evaluate("max(histogram(field('braid'), num_bins=4, min_val=-1, max_val=1).value)", env()) == \
        h.value.max()
    q = evaluate("quantile(cdf(histogram(field('braid'), num_bins=64)), 0.5)", env())
    assert abs(q - np.median(real)) < 2 * (hi - lo) / 64


def test_vectors_magnitude_components_and_bounds():
    mag = np.sqrt(sum(v ** 2 for v in VEL.values()))[RN]
    assert evaluate("max(magnitude(field('velocity'))).value", env()) == pytest.approx(mag.max(), rel=1e-12)
    assert evaluate("min(field('velocity', 'x')).value", env()) == VEL["x"][RN].min()
    assert evaluate("max(field('velocity').y).value", env()) == VEL["y"][RN].max()
    assert evaluate("magnitude(vector(3, 4, 12))", env()) == 13
    d = evaluate("magnitude(max(field('braid')).position - min(field('braid')).position)", env())
    real = BRAID[RN]
    a = node_position(np.asarray(np.unravel_index(np.argmax(real), real.shape)) + 1)
    b = node_position(np.asarray(np.unravel_index(np.argmin(real), real.shape)) + 1)
    assert d == pytest.approx(np.linalg.norm(a - b), rel=1e-12)
    box = evaluate("bounds()", env())
    np.testing.assert_allclose(box.min.plain(), ORIGIN + SPACING, rtol=1e-12)  # real cells only
    np.testing.assert_allclose(box.max.plain(), ORIGIN + (np.asarray(DIMS) - 2) * SPACING, rtol=1e-12)


def test_scalar_functions_and_operators():
    e = env()
    assert evaluate("max(2, 3.5)", e) == 3.5 and evaluate("min(2, 3.5)", e) == 2
    assert evaluate("abs(-3)", e) == 3 and evaluate("pow(2, 10)", e) == 1024
    assert evaluate("exp(1)", e) == pytest.approx(math.e) and evaluate("log(exp(2))", e) == pytest.approx(2)
    assert evaluate("not 1 > 2 and (3 >= 3 or 1 / (cycle() - cycle()) > 1)", e) is True  # or: lazy
    assert evaluate("if 1 > 2 then 10 else if 2 > 1 then 20 else 30", e) == 20
    assert evaluate("2 * if cycle() > 1 then 3 else 4", e) == 6
    # assignments before the expression, separated by newlines or semicolons
    assert evaluate("a = 2; b = a * 3\nb + cycle()", env(cycle=1)) == 7
    text = yaml.safe_load('expression: |\n  du = 1 + 1\n  dv = du * 3\n  dv - du\n')["expression"]
    assert evaluate(text, e) == 4


def test_history_as_the_documentation_describes_it():
    past = {"max_pressure": [1.0, 5.0, 120.0], "val": [10, 20, 35]}
    e = env(history=past)
    # the documentation's YAML (a plain scalar folded onto one line)
    q2 = yaml.safe_load('expression: "max_pressure - history(max_pressure, relative_index = 1)\n'
                        '           > 100"')["expression"]
    assert evaluate(q2, e) is True  # 120 - 5
    assert evaluate("max_pressure > history(max_pressure, relative_index = 1) + 100", e) is True
    assert evaluate("val - history(val, absolute_index=0)", e) == 25
    assert evaluate("val - history(val, relative_index=1)", e) == 15
    assert evaluate("history(val, 2)", e) == 10  # unnamed: relative_index
    assert evaluate("history(val, relative_index=7)", e) == 35  # too far back: clamped (as Ascent)
    with pytest.raises(ValueError, match="found only 3 values"):
        evaluate("history(val, absolute_index=3)", e)
    with pytest.raises(ValueError, match="exactly one of relative_index or absolute_index"):
        evaluate("history(val)", e)
    with pytest.raises(ValueError, match="unknown identifier 'nope'"):
        evaluate("nope + 1", e)


def test_what_ascent_has_and_insitu_does_not_is_refused_by_name():
    # the documentation's curl example (derived fields)
    curl = ("du = gradient(field('velocity', 'u'))\ndv = gradient(field('velocity', 'v'))\n"
            "dw = gradient(field('velocity', 'w'))\nw_x = dw.y - dv.z\nw_y = du.z - dw.x\nw_z = dv.x - du.y\n"
            "vector(w_x, w_y, w_z)")
    for text, name in [(curl, "gradient"), ("sum(topo('mesh').cell.volume)", "topo"),
                       ("curl(field('velocity'))", "curl"), ("lineout(10, vector(0,0,0), vector(1,1,1))", "lineout"),
                       ("binning('', 'pdf', [axis('x', num_bins=10)])", "binning")]:
        with pytest.raises(ValueError, match=f"Ascent's {name}\\(\\) is not supported"):
            parse(text)
    with pytest.raises(ValueError, match="derived fields are not supported"):
        evaluate("field('energy') + 1", env())
    with pytest.raises(ValueError, match="unknown function 'frobnicate'"):
        parse("frobnicate(1)")
    with pytest.raises(ValueError, match="cycle\\(\\) takes at most 0"):
        parse("cycle(1)")
    with pytest.raises(ValueError, match="'colour' is not an attribute of value_position; attributes: value, position"):
        evaluate("max(field('braid')).colour", env())
    with pytest.raises(MeshError, match="no field 'nope'"):
        evaluate("max(field('nope'))", env())
    with pytest.raises(ValueError, match="min_val .* must be smaller than max_val"):
        evaluate("histogram(field('braid'), min_val=2, max_val=1)", env())


def test_plain_values_for_results():
    assert plain(ValuePosition(2.0, Vector(1, 2, 3)))["position"] == [1, 2, 3]
    assert plain(Histogram(np.array([1.0, 2.0]), 0.0, 1.0, 2))["value"] == [1.0, 2.0]
    assert plain(FieldRef("T")) == {"type": "field", "value": "T"}
    assert plain(np.float64(2.5)) == 2.5 and plain(3) == 3


def test_meshes_of_cells_points_and_cell_centres():
    from adaptors.mesh import unstructured

    pts = rng.uniform(-1, 1, size=(40, 3))
    conn = rng.integers(0, 40, size=(30, 4))  # tetrahedra (their shape does not matter to reductions)
    pv, cv = rng.normal(size=40), rng.normal(size=30)
    ghosts = np.zeros(30, np.int32)
    ghosts[np.argmax(cv)] = 1  # the largest cell value is a ghost's: left out
    doms = parse_mesh(unstructured(pts, conn.ravel(), "tet", {"pv": pv, "cv": cv}, element=("cv",), ghosts=ghosts),
                      cells=True)
    e = env(doms)
    got = evaluate("max(field('pv'))", e)
    assert got.value == pv.max() and got.index == np.argmax(pv)
    np.testing.assert_allclose(got.position.plain(), pts[np.argmax(pv)], rtol=1e-12)
    real = np.flatnonzero(ghosts == 0)
    c = real[np.argmax(cv[real])]
    got = evaluate("max(field('cv'))", e)
    assert got.value == cv[c] and got.index == c
    np.testing.assert_allclose(got.position.plain(), pts[conn[c]].mean(axis=0), rtol=1e-12)
    got = evaluate("min(field('cv'))", e)
    assert got.value == cv.min()
    np.testing.assert_allclose(got.position.plain(), pts[conn[np.argmin(cv)]].mean(axis=0), rtol=1e-12)
    h = evaluate("histogram(field('cv'), num_bins=8)", e)
    lo, hi = cv[real].min(), cv[real].max()
    np.testing.assert_array_equal(h.value, np.histogram(cv[real], 8, (lo, hi))[0])
    assert evaluate("avg(field('pv'))", e) == pytest.approx(pv.mean(), rel=1e-12)
    np.testing.assert_allclose(evaluate("bounds()", e).max.plain(), pts.max(axis=0), rtol=1e-12)
