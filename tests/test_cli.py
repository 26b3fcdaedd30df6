"""The ``insitu`` command: info, --version, check (with the adaptor's own bad configurations)."""

import io
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import yaml

import adaptors
import insitu
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
    assert re.search(where.split(": ")[0], message), (where, message)  # the case's fault, by its path
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


# -- insitu warmup --------------------------------------------------------------------------------

def test_warmup_meshes_hold_every_field_the_configuration_reads():
    from adaptors.config import load
    from adaptors.pipelines import added_fields
    from insitu.cli import _warmup_fields, _warmup_meshes

    cfg = load({
        "pipelines": {
            "a": {"c": {"type": "contour", "params": {"field": "T", "iso_values": [5.0, 7.0]}}},
            "b": {"e": {"type": "eikonal", "params": {"speed": "s", "seeds": [[3.0, 0.0, 0.0]]}},
                  "c": {"type": "contour", "params": {"field": "arrival_time", "iso_values": [0.5]}}},
            "c": {"m": {"type": "vector_magnitude", "params": {"field": "vel"}},
                  "g": {"type": "gradient", "params": {"field": "vel_magnitude"}}},
        },
        "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "a", "field": "rho", "min_value": -2,
                                         "max_value": 2}}}},
        "queries": {"q": {"params": {"expression": "max(field('P'))", "name": "pmax"}}},
    })
    ranges, vectors = _warmup_fields(cfg, added_fields)
    assert sorted(ranges) == ["P", "T", "rho", "s", "vel"] and vectors == {"vel"}  # produced fields left out
    assert ranges["T"][0] < 5.0 and ranges["T"][1] > 7.0  # every iso value inside the field's range
    assert ranges["rho"][0] < -2 and ranges["rho"][1] > 2 and ranges["s"][0] > 0  # a speed stays positive
    (label, grid), (glabel, ghosts), (hlabel, hexes), _ = _warmup_meshes(cfg, added_fields, "float32", cells=True)
    assert (label, glabel, hlabel) == ("grid float32", "grid float32, ghost cells", "hexahedra float32, int32 ids")
    assert grid["fields"]["T"]["values"].dtype == np.float32 and set(grid["fields"]["vel"]["values"]) == set("xyz")
    c = grid["coordsets"]["coords"]
    assert c["origin"]["x"] + (c["dims"]["i"] - 1) * c["spacing"]["dx"] > 3.0  # the eikonal seed is inside
    assert ghosts["fields"]["ascent_ghosts"]["values"].sum() > 0
    assert hexes["topologies"]["mesh"]["elements"]["connectivity"].dtype == np.int32
    for _, mesh in _warmup_meshes(cfg, added_fields, "float64", cells=True):
        adaptors.mesh.parse(mesh, cells=True)  # the adaptor reads every one


def test_warmup_runs_every_scene_of_a_configuration(tmp_path, capsys, monkeypatch):
    from insitu.cli import warmup_config

    monkeypatch.chdir(tmp_path)  # where a cinema render would write its database
    cfg = config(tmp_path, extracts={"h": {"type": "hdf5", "params": {"path": str(tmp_path / "x.h5")}}},
                 triggers={"t": {"every": 100, "actions": ["s", "h"]}})
    cfg["scenes"]["s"]["renders"]["named"] = {"image_name": str(tmp_path / "named")}
    cfg["scenes"]["s"]["renders"]["cinema"] = {"type": "cinema", "phi": 2, "theta": 2, "db_name": "db"}
    out = warmup_config(_write(tmp_path, cfg), dtypes=("float64",))
    assert out["errors"] == [] and [label for label, _ in out["runs"]] == ["grid float64", "grid float64, ghost cells"]
    assert out["frames"] == 2 * 3  # the triggered scene's three renders ran on both meshes
    assert sorted(os.listdir(tmp_path)) == ["cfg.yaml"]  # no extract, no image left behind
    assert main(["warmup", _write(tmp_path, cfg), "--dtype", "float64"]) == 0
    out = capsys.readouterr().out
    assert "insitu warmup: done in" in out
    why = insitu.arrays._cupy_status()[1]
    if why:  # a CPU machine: says why no CUDA kernel was compiled
        assert f"insitu warmup: CPU kernels only, no CUDA kernels: {why}" in out
        assert main(["warmup", _write(tmp_path, cfg), "--dtype", "float64", "--gpu"]) == 1
        assert f"insitu warmup: --gpu: no CUDA kernels can be compiled here: {why}" in capsys.readouterr().err
    bad = config(tmp_path)
    bad["scenes"]["s"]["renders"]["r"]["image_width"] = 0
    assert main(["warmup", _write(tmp_path, bad)]) == 1
    assert "image_width: must be 1..16384" in capsys.readouterr().err


class _FakeCupy:
    """Stands in for CuPy on a CPU machine: "device" arrays are marked copies of host ones."""

    class ndarray(np.ndarray):
        pass

    @staticmethod
    def asarray(a):
        return np.array(a).view(_FakeCupy.ndarray)


def test_warmup_runs_the_meshes_again_from_device_arrays_where_cupy_has_a_device(tmp_path, monkeypatch):
    import insitu.cli as cli

    monkeypatch.setattr(cli, "_warmup_gpu", lambda gpu: (_FakeCupy, ""))
    handed = []
    execute = adaptors.Adaptor.execute
    monkeypatch.setattr(adaptors.Adaptor, "execute", lambda a, step, t, mesh: handed.append(mesh) or execute(
        a, step, t, mesh))
    out = cli.warmup_config(_write(tmp_path, config(tmp_path)), dtypes=("float32",))
    assert [label for label, _ in out["runs"]] == [
        "grid float32", "grid float32, ghost cells", "grid float32, device", "grid float32, ghost cells, device",
        "grid float32, 48^3, device", "grid float32, ghost cells, 48^3, device"]
    assert out["errors"] == [] and out["gpu"] is None
    # A job-sized mesh too: its arrays pass 1024 elements, where CuPy's block reductions change kernel.
    assert handed[4]["coordsets"]["coords"]["dims"] == {"i": 48, "j": 48, "k": 48}
    assert all(type(f["values"]) is _FakeCupy.ndarray for f in handed[5]["fields"].values())
    host, device = handed[0]["fields"], handed[2]["fields"]
    assert set(host) == set(device) and all(type(f["values"]) is np.ndarray for f in host.values())
    for name, f in device.items():
        assert type(f["values"]) is _FakeCupy.ndarray and f["values"].dtype == np.float32
        np.testing.assert_array_equal(f["values"], host[name]["values"])
    assert type(handed[3]["fields"]["ascent_ghosts"]["values"]) is _FakeCupy.ndarray
    assert handed[2]["coordsets"] == handed[0]["coordsets"]  # plain numbers stay as they are


@pytest.mark.parametrize("rank", [None, "1"])
def test_the_first_compile_of_a_process_is_announced_once_at_the_adaptors_default_level(tmp_path, rank):
    # The adaptor's default `log: errors` shows WARNING and above; two kernels compile, one line says
    # so, on rank 0 only (every rank compiles the same kernels).
    code = textwrap.dedent("""
        import numba
        import insitu.log
        insitu.log.enable("WARNING")
        insitu.log.watch_jit("insitu_test_first")
        ns = {"__name__": "insitu_test_first.kernels", "numba": numba}
        exec("@numba.njit\\ndef f(x):\\n    return x + 1\\n@numba.njit\\ndef g(x):\\n    return x * 2\\n", ns)
        assert ns["f"](1) == 2 and ns["g"](2.0) == 4.0 and ns["f"](1.5) == 2.5
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "OMPI_COMM_WORLD_RANK": rank or ""})
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    if rank:
        assert lines == []
        return
    assert len(lines) == 1 and "WARNING insitu_test_first.kernels: first run: compiling kernels" in lines[0], lines
    assert "`insitu warmup` does this ahead of a job" in lines[0]


# -- insitu replay --------------------------------------------------------------------------------

def test_replay_with_another_configuration_draws_the_live_frames(tmp_path, capsys):
    from render.image import read_png

    meshes = [sphere_mesh(ghost=1), sphere_mesh(R * 1.25, ghost=((1, 0), (0, 1), (2, 0)))]
    record = {"extracts": {"h": {"type": "hdf5", "params": {"path": str(tmp_path / "rec" / "m_%03d")}}}}
    with adaptors.Adaptor(record) as a:
        for step, mesh in enumerate(meshes):
            assert a.execute(step * 10, step * 0.5, mesh)
    live = config(tmp_path / "live", iso=0.9)
    with adaptors.Adaptor(live) as a:
        for step, mesh in enumerate(meshes):
            assert a.execute(step * 10, step * 0.5, mesh)
    again = _write(tmp_path, config(tmp_path / "replay", iso=0.9))
    assert main(["replay", str(tmp_path / "rec"), "--config", again]) == 0
    out, err = capsys.readouterr()
    # stderr is not a terminal here: a line per step, no bar.
    assert err == "" and "\r" not in out and "[" not in out, (out, err)
    lines = out.splitlines()
    assert [re.sub(r"\d+\.\d+ s", "T s", s) for s in lines] == [
        "insitu replay: step 0 ok (T s)", "insitu replay: step 10 ok (T s)",
        "insitu replay: 2 steps replayed on 1 rank(s) in T s, 0 failed"]
    for step in (0, 10):
        a = read_png(tmp_path / "live" / f"frame_{step:03d}.png")
        b = read_png(tmp_path / "replay" / f"frame_{step:03d}.png")
        assert (a[..., 3] > 0).mean() > 0.05  # a sphere was drawn
        np.testing.assert_array_equal(a, b)
    assert main(["replay", str(tmp_path / "rec" / "m_01*.h5"), "--config", again, "--steps", "5:", "--progress"]) == 0
    out, err = capsys.readouterr()
    # --progress: the bar on stderr (redrawn with \r, ended by a newline) stands for the step lines.
    assert out.startswith("insitu replay: 1 steps replayed") and "step 10 ok" not in out, out
    assert err.startswith("\rinsitu replay [" + "#" * 30 + "] 1/1 ") and err.endswith("\n"), repr(err)
    assert main(["replay", str(tmp_path / "nothing*.h5"), "--config", again]) == 2
    assert "no recorded files" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal_only():
    from insitu.log import Progress

    term, pipe = _Terminal(), io.StringIO()
    for stream in (term, pipe):
        with Progress(4, "job", stream=stream, width=8, interval=0.0) as bar:
            bar.update(note="a")
            bar.write("a line above", file=stream)
            bar.update(3, note="b")
    assert pipe.getvalue() == "a line above\n"  # no bar where the stream is no terminal
    frames = term.getvalue().split("\r")
    assert re.fullmatch(r"job \[##\.{6}\] 1/4 \d+\.\d s a", frames[1]), frames
    # write(): the bar wiped, the line, the bar again below it
    assert frames[2].strip() == "" and frames[3] == "a line above\n" and frames[4].startswith("job [##......] 1/4")
    assert re.fullmatch(r"job \[#{8}\] 4/4 \d+\.\d s b", frames[5]), frames
    assert frames[6].startswith("job [########] 4/4") and frames[6].endswith("\n") and len(frames) == 7
    quiet = _Terminal()
    with Progress(2, stream=quiet, enabled=False) as bar:
        bar.update(2)
    assert quiet.getvalue() == ""
    with pytest.raises(ValueError, match="total: expected an int >= 0, got -1"):
        Progress(-1)


@pytest.mark.mpi
def test_replay_of_a_4_rank_run_under_mpiexec_draws_the_live_frames(mpi, tmp_path):
    # The demo records its blocks on 4 ranks (an hdf5 extract only); the same run drawing another
    # configuration live, and `insitu replay` of the recording with it on 4 ranks, give the same frames.
    from render.image import read_png

    script = os.path.join(ROOT, "examples", "eikonal_insitu.py")
    common = ["--shape", 20, 18, 16, "--steps", 2]
    rec = {"extracts": {"h": {"type": "hdf5", "params": {"path": str(tmp_path / "rec" / "s%02d")}}}}
    record = _write(tmp_path, rec, "record.yaml")
    p = mpi(4, script, *common, "--config", record, "--out", tmp_path / "unused")
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(os.listdir(tmp_path / "rec")) == 8  # 2 steps x 4 ranks
    draw = {"pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "T", "iso_values": [0.3]}}}},
            "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl", "field": "speed"}},
                             "renders": {"r": {"image_width": 64, "image_height": 48,
                                               "camera": {"azimuth": 30, "elevation": 20},
                                               "image_prefix": str(tmp_path / "replay" / "frame_%04d")}}}}}
    p = mpi(4, script, *common, "--config", _write(tmp_path, draw, "draw.yaml"), "--out", tmp_path / "live")
    assert p.returncode == 0, p.stdout + p.stderr
    p = mpi(4, "-m", "insitu", "replay", tmp_path / "rec", "--config", tmp_path / "draw.yaml")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 steps replayed on 4 rank(s)" in p.stdout
    for step in (0, 1):
        live = read_png(tmp_path / "live" / f"frame_{step:04d}.png")
        assert (live[..., 3] > 0).mean() > 0.02
        np.testing.assert_array_equal(read_png(tmp_path / "replay" / f"frame_{step:04d}.png"), live)
