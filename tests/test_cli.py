"""The ``insitu`` command: info, --version, check (with the adaptor's own bad configurations)."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml

import adaptors
from insitu.cli import info, main, read_mesh
from test_adaptor import ROOT, R, config, sphere_mesh
from test_faults_config import BAD_CONFIG


def test_info_reports_the_cpu_stack(capsys):
    d = info()
    assert d["numpy"] != "" and not d["numpy"].startswith("not available")
    assert d["mpi"].startswith(("MPICH", "Open MPI"))
    assert d["mpi cuda-aware"] in ("True", "False")
    assert main(["info"]) == 0
    assert "mpi4py" in capsys.readouterr().out


def test_unknown_command_is_refused():
    p = subprocess.run([sys.executable, "-m", "insitu.cli", "frobnicate"], capture_output=True, text=True)
    assert p.returncode == 2 and "invalid choice: 'frobnicate'" in p.stderr


# -- --version, python -m insitu ----------------------------------------------------------------

def test_version_from_the_module_and_the_script():
    from insitu import __version__

    p = subprocess.run([sys.executable, "-m", "insitu", "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"insitu {__version__}", (p.stdout, p.stderr)
    script = os.path.join(os.path.dirname(sys.executable), "insitu")
    if os.path.exists(script):  # the console script of the installed package
        q = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
        assert q.stdout == p.stdout
    r = subprocess.run([sys.executable, "-m", "insitu", "frobnicate"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage: insitu" in r.stderr and "invalid choice: 'frobnicate'" in r.stderr


# -- insitu check ---------------------------------------------------------------------------------

def _write(tmp_path, cfg, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _adaptor_refuses(path) -> str:
    with pytest.raises(adaptors.ConfigError) as err:
        adaptors.Adaptor(path)
    return str(err.value)


def test_check_prints_what_each_step_does(capsys):
    assert main(["check", os.path.join(ROOT, "examples", "eikonal_insitu.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("eikonal_insitu.yaml: valid")
    body = "\n".join(out)
    for part in ["engine: embedded; exceptions: catch",
                 "pipeline front (when a due scene draws it): contour(field=T, iso_values=[0.35])",
                 "scene view (every step):", "plot surface: pseudocolor of pipeline front, field speed",
                 "plot medium: volume of the mesh, field speed", "render frame: 480x360 -> frame_%04d.png",
                 "extract frames (every step): adios2(filename=frames.bp, engine=BP5"]:
        assert part in body, (part, body)
    # the adaptor's order: pipelines, then scenes, then extracts
    assert body.index("pipeline front") < body.index("scene view") < body.index("extract frames")


def test_check_orders_queries_and_triggers_first(tmp_path, capsys):
    cfg = config(tmp_path, queries={"q": {"params": {"expression": "max(field('r'))", "name": "rmax"}}},
                 triggers={"t": {"condition": "rmax > 1", "actions": ["s"]}})
    assert main(["check", _write(tmp_path, cfg)]) == 0
    body = capsys.readouterr().out
    assert body.index("query q: rmax = max(field('r'))") < body.index("trigger t: when rmax > 1 -> runs s") \
        < body.index("pipeline pl") < body.index("scene s (when triggered):")


# The adaptor's own bad configurations (tests/test_faults_config.py, tests/test_adaptor.py).
_ADAPTOR_BAD = {
    "pipelines": {"pl": {"c": {"type": "contour", "params": {"fild": "r", "iso_values": [0.5]}},
                         "d": {"type": "smooth"}}},
    "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "nope"}},
                     "renders": {"r": {"image_width": 0}}}},
    "triggers": {"t": {"condition": "__import__('os')", "actions": ["x"]}},
    "exceptions": "ignore",
    "colour": 1,
}


@pytest.mark.parametrize("case", range(len(BAD_CONFIG) + 3))
def test_check_rejects_what_the_adaptor_rejects_with_its_message(tmp_path, capsys, case):
    if case < len(BAD_CONFIG):
        change, where = BAD_CONFIG[case]
        cfg = config(tmp_path)
        change(cfg)
        path = _write(tmp_path, cfg)
    elif case == len(BAD_CONFIG):
        path, where = _write(tmp_path, _ADAPTOR_BAD), "unknown key 'colour'"
    elif case == len(BAD_CONFIG) + 1:
        path, where = str(tmp_path / "bad.yaml"), "bad.yaml: not valid YAML/JSON"
        (tmp_path / "bad.yaml").write_text("pipelines: {pl: [unclosed")
    else:
        path, where = str(tmp_path / "missing.yaml"), "cannot read"
    message = _adaptor_refuses(path)
    assert re.search(where, message), (where, message)
    assert main(["check", path]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"insitu check: {path}: {message}\n" and captured.out == ""


def _record(tmp_path, mesh) -> str:
    """The mesh as an hdf5 extract of the adaptor writes it (step 3)."""
    cfg = {"extracts": {"h": {"type": "hdf5", "params": {"path": str(tmp_path / "rec_%02d.h5")}}}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(3, 0.5, mesh)
    return str(tmp_path / "rec_03.h5")


def test_a_recorded_mesh_reads_back_as_the_adaptor_parsed_it(tmp_path):
    from adaptors.mesh import parse

    mesh = sphere_mesh(ghost=((1, 0), (0, 2), (0, 0)))
    mesh["fields"]["e"] = {"association": "element", "topology": "mesh", "values": R[:-1, :-1, :-1].copy()}
    domains, step, time = read_mesh(_record(tmp_path, mesh))
    assert (step, time) == (3, 0.5)
    (got,), (want,) = parse(domains, cells=True), parse(mesh, cells=True)
    assert got.dims == want.dims and got.cells == want.cells and sorted(got.fields) == sorted(want.fields) == ["e", "r"]
    np.testing.assert_array_equal(got.origin, want.origin)
    np.testing.assert_array_equal(got.spacing, want.spacing)
    for name in ("e", "r"):
        assert got.fields[name].association == want.fields[name].association
        np.testing.assert_array_equal(got.fields[name].values, want.fields[name].values)


def test_check_against_a_recorded_mesh(tmp_path, capsys):
    rec = _record(tmp_path, sphere_mesh())
    cfg = config(tmp_path, triggers={"t": {"condition": "max(field('r')) > 1", "actions": ["s"]}})
    assert main(["check", _write(tmp_path, cfg), "--mesh", rec]) == 0
    out = capsys.readouterr().out
    assert f"on {rec} (step 3, 1 domain(s), fields r): runs s" in out
    cfg["triggers"]["t"]["condition"] = "max(field('r')) > 100"
    assert main(["check", _write(tmp_path, cfg), "--mesh", rec]) == 0
    assert "fields r): runs nothing" in capsys.readouterr().out
    assert main(["check", _write(tmp_path, cfg), "--mesh", str(tmp_path / "none.h5")]) == 2
    assert "cannot read" in capsys.readouterr().err


# Configurations valid on their own that fail on the mesh: the adaptor's execute (exceptions:
# forward) and `insitu check --mesh` give the same error.
MESH_BAD = [
    (("pipelines", "pl", "c", "params", "field"), "nope", "pipelines/pl/c: no field 'nope' in the mesh; fields: r"),
    (("scenes", "s", "plots", "p"), {"type": "pseudocolor", "field": "T"},
     "scenes/s/plots/p: no field 'T' in the mesh; fields: r"),
    (("triggers",), {"t": {"condition": "max(field('nope')) > 1", "actions": ["s"]}}, "no field 'nope'"),
]


@pytest.mark.parametrize("path,value,where", MESH_BAD, ids=[w for _, _, w in MESH_BAD])
def test_check_against_a_mesh_rejects_what_execute_rejects(tmp_path, capsys, path, value, where):
    rec = _record(tmp_path, sphere_mesh())
    cfg = config(tmp_path, exceptions="forward")
    node = cfg
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    cfg_path = _write(tmp_path, cfg)
    with adaptors.Adaptor(cfg_path) as a:
        with pytest.raises(Exception) as err:
            a.execute(3, 0.5, sphere_mesh())
    assert where in str(err.value), str(err.value)
    assert main(["check", cfg_path, "--mesh", rec]) == 1
    e = capsys.readouterr().err
    assert e == f"insitu check: {cfg_path} on {rec}: {type(err.value).__name__}: {err.value}\n", e
