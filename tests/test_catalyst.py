"""The Catalyst 2 implementation libcatalyst-insitu (adaptors/src/catalyst_insitu.c, adaptors/catalyst.py).

A Catalyst client written against catalyst.h and Conduit's C API only
(examples/catalyst_c/grid.c: an image-data mesh with a point field, a cell field and an
interleaved 3-component velocity) runs under mpiexec with CATALYST_IMPLEMENTATION_NAME=insitu;
its frames and HDF5 extracts must equal those of the same mesh handed to adaptors.execute
from Python (this file run as a script, the reference below: NumPy arrays built from the
same formulas, the velocity as three scalar fields). Unset, the same program runs on
Catalyst's stub. examples/catalyst_c/bad_nodes.c passes malformed nodes on one rank: every
rank gets a Catalyst error code for that step and the next step runs.

Catalyst comes from ``make catalyst`` (built once into ~/.cache/insitu/catalyst-<tarball
hash>; ``make test`` passes its prefix as INSITU_CATALYST_PREFIX). The project and both
examples are built with CMake into a temporary directory once for this module.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPI_DIR = os.path.join(ROOT, "tests", "capi")
sys.path.insert(0, CAPI_DIR)
import capi_build  # noqa: E402

from insitu.launch import mpiexec  # noqa: E402

pytestmark = pytest.mark.mpi

TARBALL = os.path.join(os.path.dirname(ROOT), "shared", "third_party", "catalyst-2.0-pre-src.tar.gz")
N, STEPS = 14, 3  # nodes per axis and steps of the runs compared
OK, NO_IMPLEMENTATION, NOT_FOUND, INCOMPLETE, UNSUPPORTED = 0, 1, 3, 5, 6  # catalyst_status


def _catalyst_prefix() -> str | None:
    """Where `make catalyst` installed Catalyst (None: not built)."""
    given = os.environ.get("INSITU_CATALYST_PREFIX")
    if given:
        if not os.path.exists(os.path.join(given, ".complete")):
            pytest.fail(f"INSITU_CATALYST_PREFIX={given} holds no finished Catalyst install (run `make catalyst`)")
        return given
    if not os.path.exists(TARBALL):
        return None
    with open(TARBALL, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    prefix = os.path.join(os.path.expanduser("~"), ".cache", "insitu", f"catalyst-{digest}")
    return prefix if os.path.exists(os.path.join(prefix, ".complete")) else None


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> types.SimpleNamespace:
    """libcatalyst-insitu built and installed, and both example programs built against Catalyst."""
    prefix = _catalyst_prefix()
    if prefix is None:
        pytest.skip(f"Catalyst 2 is not built: run `make catalyst` (builds {TARBALL} into ~/.cache/insitu)")
    missing = capi_build.missing_tools()
    if missing:
        pytest.fail("building libcatalyst-insitu needs " + ", ".join(missing))
    catalyst_dir = os.path.join(prefix, "lib", "cmake", "catalyst-2.0")
    top = tmp_path_factory.mktemp("catalyst")
    run = capi_build.run
    run(["cmake", "-S", ROOT, "-B", top / "lib", f"-DPython3_EXECUTABLE={sys.executable}", "-DINSITU_FORTRAN=OFF",
         f"-Dcatalyst_DIR={catalyst_dir}", f"-DMPI_C_COMPILER={capi_build.mpicc()}", "-DCMAKE_BUILD_TYPE=Release"],
        top)
    run(["cmake", "--build", top / "lib", "-j", "2"], top)
    run(["cmake", "--install", top / "lib", "--prefix", top / "prefix"], top)
    impl_dir = top / "prefix" / "lib" / "catalyst"
    assert (impl_dir / "libcatalyst-insitu.so").exists(), os.listdir(top / "prefix" / "lib")
    run(["cmake", "-S", os.path.join(ROOT, "examples", "catalyst_c"), "-B", top / "ex",
         f"-Dcatalyst_DIR={catalyst_dir}", f"-DMPI_C_COMPILER={capi_build.mpicc()}",
         "-DCMAKE_BUILD_TYPE=Release"], top)
    run(["cmake", "--build", top / "ex", "-j", "2"], top)
    return types.SimpleNamespace(impl_dir=str(impl_dir), grid=str(top / "ex" / "grid"),
                                 bad_nodes=str(top / "ex" / "bad_nodes"), idle=str(top / "ex" / "idle_execute"))


def _env(built, implementation: str | None = "insitu") -> dict:
    return capi_build.env(CATALYST_IMPLEMENTATION_NAME=implementation,
                          CATALYST_IMPLEMENTATION_PATHS=built.impl_dir if implementation else None,
                          INSITU_PYTHON=sys.executable, NUMBA_NUM_THREADS="1")


def _launch(n: int, args: list, cwd, env: dict) -> subprocess.CompletedProcess:
    p = subprocess.run([*mpiexec(), "-n", str(n), *map(str, args)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def _statuses(stdout: str) -> dict:
    """{(rank, call or step): status} from the programs' "rank R <call> status S" lines."""
    return {(int(r), int(s) if s else call): int(st)
            for r, s, call, st in re.findall(r"^rank (\d+) (?:step (\d+)|(\w+)) status (\d+)$", stdout, re.M)}


def _block(stdout: str, name: str) -> dict:
    import yaml

    m = re.search(rf"^--- {name}\n(.*?)^--- end$", stdout, re.M | re.S)
    assert m, stdout
    return yaml.safe_load(m.group(1)) or {}


def _config(path, out: str) -> str:
    """The comparison's configuration: a contour coloured by a velocity component, a volume of
    the cell field, an HDF5 extract of every field."""
    cfg = {"params": {"gain": 1.0},
           "pipelines": {"surface": {"iso": {"type": "contour", "params": {"field": "T", "iso_values": [0.5]}}}},
           "scenes": {"blobs": {"plots": {"s": {"type": "pseudocolor", "pipeline": "surface", "field": "velocity/y"}},
                                "renders": {"r1": {"image_width": 64, "image_height": 48,
                                                   "image_prefix": f"{out}/blobs_%04d",
                                                   "camera": {"azimuth": 30, "elevation": 20}}}},
                      "pressure": {"plots": {"p": {"type": "volume", "field": "pressure"}},
                                   "renders": {"r1": {"image_width": 48, "image_height": 40,
                                                      "image_prefix": f"{out}/pressure_%04d"}}}},
           "extracts": {"fields": {"type": "hdf5", "params": {"path": f"{out}/fields_%04d"}}}}
    path.write_text(json.dumps(cfg))
    return str(path)


# --------------------------------------------------------------------------- the reference


def reference_mesh(n: int, step: int, rank: int, size: int) -> dict:
    """This rank's slab as examples/catalyst_c/grid.c builds it, as a Blueprint dict for
    adaptors.execute (velocity as three scalar fields ``velocity/x|y|z``). math.exp, like the
    C program's libm exp, so that the values are the same to the last bit."""
    from adaptors import uniform

    h = 1.0 / (n - 1)
    k0 = rank * (n - 1) // size
    nk = (rank + 1) * (n - 1) // size - k0 + 1
    shift = 0.04 * step
    x, y, z = (a * h for a in np.meshgrid(np.arange(n), np.arange(n), k0 + np.arange(nk), indexing="ij"))

    def blob(dx, dy, dz, s):
        return np.vectorize(math.exp)(-(dx * dx + dy * dy + dz * dz) / (2 * s * s))

    T = blob(x - 0.35 - shift, y - 0.5, z - 0.5, 0.14) + blob(x - 0.65, y - 0.5, z - 0.55, 0.12)
    cx, cy, cz = ((np.arange(m) + off + 0.5) * h for m, off in ((n - 1, 0), (n - 1, 0), (nk - 1, k0)))
    cx, cy, cz = np.meshgrid(cx, cy, cz, indexing="ij")
    pressure = (cx * cy + cz + 0.1 * step).astype(np.float32)
    fields = {"T": T, "pressure": pressure, "velocity/x": -(y - 0.5), "velocity/y": x - 0.5 + 0.1 * step,
              "velocity/z": 0.25 * z}
    return uniform(fields, origin=(0.0, 0.0, k0 * h), spacing=(h, h, h), domain_id=rank, element=("pressure",))


def _reference_main(config: str, n: int, steps: int) -> None:
    """The reference run (this file under mpiexec): the same meshes through adaptors.execute."""
    from mpi4py import MPI

    import adaptors

    comm = MPI.COMM_WORLD
    adaptors.initialize(config, comm=comm)
    for step in range(steps):
        assert adaptors.execute(step, 0.1 * step, reference_mesh(n, step, comm.rank, comm.size)), \
            adaptors.results()["errors"]
    adaptors.finalize()


def _outputs(out) -> dict:
    """{file name: PNG bytes or {dataset path: array}} of a run's frames and HDF5 extracts."""
    import h5py

    got: dict = {}
    for path in sorted(glob.glob(os.path.join(out, "*"))):
        name = os.path.basename(path)
        if path.endswith(".png"):
            got[name] = open(path, "rb").read()
        elif path.endswith(".h5"):
            with h5py.File(path) as f:
                data = {"attrs": {k: np.asarray(v).tolist() for k, v in f.attrs.items()}}
                f.visititems(lambda k, o: data.__setitem__(k, o[()] if isinstance(o, h5py.Dataset) else
                                                           {a: np.asarray(v).tolist() for a, v in o.attrs.items()}))
                got[name] = data
    return got


# --------------------------------------------------------------------------- tests


def test_the_module_provides_the_catalyst_entry_points(built):
    nm = subprocess.run(["nm", "-D", "--defined-only", os.path.join(built.impl_dir, "libcatalyst-insitu.so")],
                        capture_output=True, text=True, check=True).stdout
    names = set(re.findall(r"\b(catalyst_\w+)$", nm, re.M))
    want = {"catalyst_api_impl"} | {f"catalyst_{f}_insitu" for f in ("initialize", "execute", "finalize", "about",
                                                                     "results")}
    assert want <= names, nm
    # no second Conduit inside: the node is read through libcatalyst's
    assert not any("conduit" in n for n in names) and "conduit_node" not in nm


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_catalyst_program_draws_what_adaptors_execute_draws(built, tmp_path, ranks):
    run_dir, ref_dir = tmp_path / "catalyst", tmp_path / "reference"
    run_dir.mkdir()
    ref_dir.mkdir()
    p = _launch(ranks, [built.grid, _config(run_dir / "insitu.json", "out"), "--n", N, "--steps", STEPS,
                        "--param", "gain=2.5"], run_dir, _env(built))
    calls = _statuses(p.stdout)
    assert calls == {(r, c): OK for r in range(ranks) for c in ("initialize", "finalize", *range(STEPS))}, p.stdout
    about = _block(p.stdout, "about")
    assert about["catalyst"]["implementation"] == "insitu" and about["catalyst"]["use_mpi"] == 1
    assert "uniform" in about["insitu"]["coordset_types"] and about["insitu"]["channel_types"] == ["mesh",
                                                                                                   "multimesh"]
    # results: the steering values come back into the node (the parameter from catalyst/state/parameters)
    res = _block(p.stdout, "results")["insitu"]
    assert res["step"] == STEPS - 1 and res["stop"] == 0 and res["nerrors"] == 0
    assert res["params"] == {"gain": 2.5} and res["iso_values"] == {"surface": 0.5}
    assert res["frames"] == [f"out/blobs_{STEPS - 1:04d}.png", f"out/pressure_{STEPS - 1:04d}.png"]
    # host memory in, host memory out: the library copied nothing between host and device
    assert res["transfers"] == dict.fromkeys(("h2d_calls", "h2d_bytes", "d2h_calls", "d2h_bytes"), 0)

    script = os.path.abspath(__file__)
    ref = subprocess.run([*mpiexec(), "-n", str(ranks), sys.executable, script, "reference",
                          _config(ref_dir / "insitu.json", "out"), str(N), str(STEPS)], cwd=ref_dir,
                         env=capi_build.env(NUMBA_NUM_THREADS="1", PYTHONPATH=ROOT), capture_output=True, text=True,
                         timeout=240)
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]
    got, want = _outputs(run_dir / "out"), _outputs(ref_dir / "out")
    names = {f"{kind}_{s:04d}.png" for kind in ("blobs", "pressure") for s in range(STEPS)}
    names |= {f"fields_{s:04d}{'' if ranks == 1 else f'.rank{r}'}.h5" for s in range(STEPS) for r in range(ranks)}
    assert set(got) == set(want) == names
    for name in sorted(names):
        if name.endswith(".png"):
            assert got[name] == want[name], name
            continue
        assert got[name].keys() == want[name].keys(), name
        for key, v in want[name].items():
            if not isinstance(v, np.ndarray):  # attributes (step, time; dims, origin, spacing of a domain)
                assert got[name][key] == v, (name, key)
            else:
                assert got[name][key].dtype == v.dtype, (name, key)
                np.testing.assert_array_equal(got[name][key], v, err_msg=f"{name}:{key}")
    # the extract holds the C program's values (the velocity's interleaved components, the float32 cells)
    d = want[f"fields_0002{'' if ranks == 1 else '.rank0'}.h5"]
    assert d["domain_000000/pressure"].dtype == np.float32 and d["domain_000000/velocity/y"][3, 0, 0] == \
        pytest.approx(3 / (N - 1) - 0.5 + 0.2)


def test_unset_the_program_runs_on_catalysts_stub(built, tmp_path):
    p = _launch(2, [built.grid, _config(tmp_path / "insitu.json", "out"), "--n", N, "--steps", 2], tmp_path,
                _env(built, None))
    assert _block(p.stdout, "about")["catalyst"]["implementation"] == "stub"
    assert set(_statuses(p.stdout).values()) == {OK}
    assert not (tmp_path / "out").exists() and "insitu" not in p.stderr


BAD_CONFIG = {"timeout": 10, "pipelines": {"p1": {"f1": {"type": "contour", "params": {"field": "T",
                                                                                        "iso_values": [0.2]}}}},
              "scenes": {"s1": {"plots": {"p1": {"type": "pseudocolor", "pipeline": "p1", "field": "T"}},
                                "renders": {"r1": {"image_width": 40, "image_height": 32,
                                                   "image_prefix": "frames/f_%04d"}}}}}


@pytest.mark.parametrize("kind,bad_rank,says", [
    ("missing-channel", 1, "catalyst/channels: missing"),
    ("wrong-dtype", 1, "catalyst/channels/grid/data/fields/T/values: expected a 12x12x7 array"),
    ("string-timestep", 0, "catalyst/state/timestep: expected an integer, got char8_str"),
    ("null-data", 1, "catalyst/channels/grid/data/fields/T/values: data is NULL (1008 float64 values)"),
    ("channel-type", 0, "catalyst/channels/grid/type: 'amr'; insitu reads mesh, multimesh"),
])
def test_a_bad_node_on_one_rank_fails_the_step_on_every_rank_and_the_next_step_runs(built, tmp_path, kind, bad_rank,
                                                                                    says):
    cfg = tmp_path / "bad.json"
    cfg.write_text(json.dumps(BAD_CONFIG))
    p = _launch(2, [built.bad_nodes, cfg, kind, bad_rank], tmp_path, _env(built))
    calls = _statuses(p.stdout)
    out = p.stdout[-3000:] + p.stderr[-3000:]
    for r in (0, 1):
        assert [calls[(r, c)] for c in ("initialize", 0, 1, 2, "finalize")] == [OK, OK, INCOMPLETE, OK, OK], out
    assert f"rank {bad_rank}: MeshError: {says}" in p.stderr, out
    assert "did not answer" not in out  # agreed, not timed out
    frames = sorted(os.listdir(tmp_path / "frames"))
    assert frames == ["f_0000.png", "f_0002.png"], frames  # no frame for the failed step


@pytest.mark.parametrize("kind,status,says", [
    ("py-script", UNSUPPORTED, "'pipeline.py' is a ParaView Python script; insitu runs insitu configurations: "
                               ".yaml, .yml or .json files"),
    ("missing-script", NOT_FOUND, "'no/such/insitu.yaml' does not exist or is not readable"),
])
def test_a_script_insitu_cannot_run_is_refused_and_the_program_goes_on(built, tmp_path, kind, status, says):
    cfg = tmp_path / "bad.json"
    cfg.write_text(json.dumps(BAD_CONFIG))
    p = _launch(1, [built.bad_nodes, cfg, kind, 0], tmp_path, _env(built))
    calls = _statuses(p.stdout)
    assert [calls[(0, c)] for c in ("initialize", 0, 1, 2, "finalize")] == [status] + [NO_IMPLEMENTATION] * 4
    assert f"catalyst_initialize: catalyst/scripts/main: {says}" in p.stderr, p.stderr
    assert "catalyst_execute: called before a successful catalyst_initialize" in p.stderr
    assert p.stderr.count("catalyst_execute:") == 1  # a failure repeated every step is printed once


def test_an_idle_execute_costs_at_most_20_microseconds(built, tmp_path):
    """A step where nothing is due (the only trigger fires every 10^9 steps): the node's
    channels are not read; the call is one Python call. Best of 3 passes (a shared CI machine)."""
    cfg = tmp_path / "idle.json"
    cfg.write_text(json.dumps({**BAD_CONFIG, "triggers": {"t1": {"every": 10**9, "actions": ["s1"]}}}))
    p = _launch(1, [built.idle, cfg, 3000, 3], tmp_path, _env(built))
    passes = [(float(us), int(failed)) for us, failed in re.findall(r"^pass \d us_per_call ([\d.]+) failed (\d+)$",
                                                                    p.stdout, re.M)]
    assert len(passes) == 3 and all(f == 0 for _, f in passes), p.stdout + p.stderr
    assert min(us for us, _ in passes) <= 20.0, p.stdout
    assert not (tmp_path / "frames").exists()  # nothing was drawn


# --------------------------------------------------------------------------- translation (pure)


def test_channels_become_blueprint_domains_keyed_by_their_node_path():
    from adaptors.catalyst import mesh_from_channels
    from adaptors.errors import MeshError

    vel = np.arange(24.0).reshape(8, 3)
    vx, vy, vz = vel[:, 0], vel[:, 1], vel[:, 2]
    dom = {"coordsets": {"coords": {"type": "uniform", "dims": {"i": 2, "j": 2, "k": 2}}},
           "topologies": {"mesh": {"type": "uniform", "coordset": "coords"}},
           "fields": {"v": {"association": "vertex", "topology": "mesh",
                            "values": {"x": vx, "y": vy, "z": vz}}}}
    got = mesh_from_channels({"grid": {"type": "mesh", "data": dom}}, rank=3, size=4)
    d = got["catalyst/channels/grid/data"]
    assert d["state"]["domain_id"] == 3 and set(d["fields"]) == {"v/x", "v/y", "v/z"}
    assert d["fields"]["v/y"]["values"] is vy  # the component itself, no copy
    two = {"a": dom, "b": {**dom, "state": {"domain_id": 7}}}
    multi = mesh_from_channels({"m": {"type": "multimesh", "data": two}})
    assert [v["state"]["domain_id"] for v in multi.values()] == [0, 7] and list(multi) == [
        "catalyst/channels/m/data/a", "catalyst/channels/m/data/b"]
    with pytest.raises(MeshError, match="catalyst/channels/m/data/a/state/domain_id: missing"):
        mesh_from_channels({"m": {"type": "multimesh", "data": {"a": dom}}}, rank=0, size=2)
    with pytest.raises(MeshError, match=r"catalyst/channels/g/data: missing"):
        mesh_from_channels({"g": {"type": "mesh"}})
    with pytest.raises(MeshError, match=r"catalyst/channels: no channel"):
        mesh_from_channels({})


def test_parameters_take_numeric_assignments_and_leave_script_arguments():
    from adaptors.catalyst import parameters_from_node

    assert parameters_from_node(["gain=2.5", "--scale=3", "--verbose", "name=abc"]) == {"gain": 2.5, "scale": 3.0}
    assert parameters_from_node({"gain": 1, "label": "x"}) == {"gain": 1.0}


def test_array_view_is_a_read_only_view_of_the_memory_it_is_given():
    from adaptors.catalyst import array_view
    from adaptors.errors import MeshError

    a = np.arange(12.0)
    v = array_view("p/values", a.ctypes.data + 8, "float64", 4, 24, 8)  # every third from a[1]
    np.testing.assert_array_equal(v, a[1::3])
    assert not v.flags.writeable and v.ctypes.data == a.ctypes.data + 8
    a[4] = -1.0
    assert v[1] == -1.0
    with pytest.raises(MeshError, match="p/values: dtype float16"):
        array_view("p/values", a.ctypes.data, "float16", 4, 2, 2)
    with pytest.raises(MeshError, match="not aligned"):
        array_view("p/values", a.ctypes.data + 4, "float64", 2, 8, 8)


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "reference":
    _reference_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
