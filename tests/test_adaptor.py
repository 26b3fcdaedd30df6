"""The Python adaptor in one process: config, mesh checks, frames against analytic answers,
steering, triggers, errors that do not stop the simulation, extracts read back."""

import math
import os
import time

import numpy as np
import pytest

import adaptors
from adaptors.config import describe, load
from insitu import arrays

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 49
X = np.linspace(-1.2, 1.2, N)
H = X[1] - X[0]
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)
CAMERA = {"position": [0.0, 0.0, 4.0], "look_at": [0.0, 0.0, 0.0], "fov": 40.0}


def sphere_mesh(field=R, **kw):
    return adaptors.uniform({"r": field}, origin=(-1.2,) * 3, spacing=(H,) * 3, **kw)


def config(tmp_path, iso=0.8, **extra):
    cfg = {
        "pipelines": {"pl": {"c": {"type": "contour", "params": {"field": "r", "iso_values": [iso]}}}},
        "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "pl"}},
                         "renders": {"r": {"image_width": 160, "image_height": 120, "camera": CAMERA,
                                           "bg_color": [0, 0, 0, 0],
                                           "image_prefix": str(tmp_path / "frame_%03d")}}}},
    }
    cfg.update(extra)
    return cfg


def disk_fraction(radius, w=160, h=120, dist=4.0, fov=40.0):
    """Analytic: the projected sphere's share of the image (perspective silhouette)."""
    r_px = math.tan(math.asin(radius / dist)) / math.tan(math.radians(fov / 2)) * h / 2
    return math.pi * r_px ** 2 / (w * h)


def coverage(path):
    from render.image import read_png

    return (read_png(path)[..., 3] > 127).mean()


def test_sphere_frame_covers_the_analytic_disk_and_steering_changes_the_next_frame(tmp_path):
    with adaptors.Adaptor(config(tmp_path)) as a:
        assert a.execute(0, 0.0, sphere_mesh())
        a.steer({"iso_values": [1.0]})
        assert a.execute(1, 0.1, sphere_mesh())
        res = a.results()
    assert res["iso_values"] == {"pl": [1.0]} and res["errors"] == []
    assert coverage(tmp_path / "frame_000.png") == pytest.approx(disk_fraction(0.8), rel=0.03)
    assert coverage(tmp_path / "frame_001.png") == pytest.approx(disk_fraction(1.0), rel=0.03)


def test_module_functions_and_steering_file(tmp_path):
    steer = tmp_path / "steer.json"
    adaptors.initialize(config(tmp_path, steering={"file": str(steer)}, params={"gain": 1.0}))
    try:
        assert adaptors.execute(0, 0.0, sphere_mesh())
        steer.write_text('{"iso_values": {"pl": [0.5]}, "params": {"gain": 2}, "stop": true}')
        assert adaptors.execute(1, 0.1, sphere_mesh())
        res = adaptors.results()
        assert res["stop"] and res["params"] == {"gain": 2.0} and res["iso_values"]["pl"] == [0.5]
        assert coverage(tmp_path / "frame_001.png") == pytest.approx(disk_fraction(0.5), rel=0.05)
        steer.write_text("{not json")
        assert adaptors.execute(2, 0.2, sphere_mesh())  # a bad steering file is reported, the step runs
        assert "steering file" in adaptors.results()["errors"][-1]
        assert adaptors.about()["initialized"] and adaptors.about()["executes"] == 3
    finally:
        adaptors.finalize()
    with pytest.raises(adaptors.NotInitializedError, match="call adaptors.initialize"):
        adaptors.execute(3, 0.3, sphere_mesh())
    assert adaptors.about()["initialized"] is False


class _FullDiskStream:
    """A stream whose close fails, as an ADIOS2 file's does on a full disk."""

    closed = 0

    def close(self):
        type(self).closed += 1
        raise OSError(28, "No space left on device")


class _Stream:
    closed = 0

    def close(self):
        type(self).closed += 1


def test_finalize_closes_the_rest_when_one_stream_fails_and_forgets_the_adaptor(tmp_path):
    # In-process complement of tests/test_faults_adaptor.py's finalize case: the module
    # functions drop the adaptor even though its finalize raised, and a later initialize
    # starts afresh after a previous adaptor failed to close.
    a = adaptors.initialize(config(tmp_path))
    a._streams.update(full=_FullDiskStream(), ok=_Stream())
    with pytest.raises(adaptors.AdaptorError, match=r"extracts/full: OSError: \[Errno 28\] No space left"):
        adaptors.finalize()
    assert _FullDiskStream.closed == 1 and _Stream.closed == 1  # the healthy one was closed too
    assert a.results()["errors"][-1].startswith("finalize: extracts/full: OSError")
    with pytest.raises(adaptors.NotInitializedError):
        adaptors.results()
    adaptors.finalize()  # nothing left to close

    b = adaptors.initialize(config(tmp_path))
    b._streams["full"] = _FullDiskStream()
    c = adaptors.initialize(config(tmp_path))  # the previous one's failure is logged, not raised
    try:
        assert c is not b and _FullDiskStream.closed == 2 and adaptors.execute(0, 0.0, sphere_mesh())
    finally:
        adaptors.finalize()


def test_volume_plot_of_a_constant_cube_follows_beer_lambert(tmp_path):
    # A cube of constant value, opacity k over each world unit, seen face-on: alpha = 1 - (1 - k) ** side.
    k = 0.7
    field = np.ones((N, N, N))
    cfg = {"scenes": {"s": {"plots": {"v": {"type": "volume", "field": "r", "min_value": 0.0, "max_value": 2.0,
                                           "color_table": {"name": "grayscale", "opacity": [[0, k], [2, k]]}}},
                            "renders": {"r": {"image_width": 64, "image_height": 64, "bg_color": [0, 0, 0, 0],
                                              "image_prefix": str(tmp_path / "cube_%d"),
                                              "camera": {"position": [0, 0, 40], "look_at": [0, 0, 0], "fov": 2.0}}}}}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, sphere_mesh(field)), a.results()["errors"]
    from render.image import read_png

    centre = read_png(tmp_path / "cube_0.png")[28:36, 28:36, 3] / 255.0
    assert centre.mean() == pytest.approx(1 - (1 - k) ** 2.4, abs=0.01)


def test_triggers_run_their_actions_only_when_they_fire(tmp_path):
    cfg = config(tmp_path, extracts={"h": {"type": "hdf5", "params": {"path": str(tmp_path / "f_%d.h5")}}},
                 triggers={"big": {"condition": "max(field('r')) > 3.0 and cycle >= 0", "actions": ["h"]},
                           "tick": {"every": 2, "actions": ["s"]}})
    with adaptors.Adaptor(cfg) as a:
        for step in range(4):
            field = R if step < 3 else R * 2  # max 2.08, then 4.16
            assert a.execute(step, 0.0, sphere_mesh(field))
    assert sorted(os.listdir(tmp_path)) == ["f_3.h5", "frame_000.png", "frame_002.png"]
    import h5py

    with h5py.File(tmp_path / "f_3.h5") as f:
        np.testing.assert_array_equal(f["domain_000000/r"][...], R * 2)


def test_a_failing_pipeline_is_reported_and_the_simulation_goes_on(tmp_path):
    bad = R.copy()
    bad[10, 10, 10] = np.nan
    with adaptors.Adaptor(config(tmp_path)) as a:
        assert a.execute(0, 0.0, sphere_mesh(bad)) is False
        err = a.results()["errors"][-1]
        assert "step 0" in err and "NaN or inf" in err and "scenes/s/renders/r" in err
        assert a.execute(1, 0.0, sphere_mesh())  # the next step runs
        assert a.execute(2, 0.0, {"coordsets": {}}) is False
        assert "coordsets" in a.results()["errors"][-1]
    with adaptors.Adaptor(config(tmp_path, exceptions="forward")) as a:
        with pytest.raises(ValueError, match="NaN or inf"):
            a.execute(0, 0.0, sphere_mesh(bad))


def test_a_device_fault_while_drawing_is_reported_not_the_timers_failure(tmp_path, monkeypatch):
    """After a fault on the device every CUDA call fails, the profile's events too: the
    step reports the drawing's own error, not the event's that came after it."""
    import contextlib

    from adaptors import scenes
    from insitu.profile import StageTimer

    def fault(self, *args, **kw):
        raise RuntimeError("mc_vertex: an illegal memory access was encountered")

    @contextlib.contextmanager
    def stage(self, name):
        if name == "composite":
            raise RuntimeError("cudaEventCreate: an illegal memory access (sticky)")
        yield

    monkeypatch.setattr(scenes.SceneRenderer, "_local", fault)
    monkeypatch.setattr(StageTimer, "stage", stage)
    with adaptors.Adaptor(config(tmp_path, profile=True)) as a:
        assert a.execute(0, 0.0, sphere_mesh()) is False
        err = a.results()["errors"][-1]
    assert "mc_vertex" in err and "cudaEventCreate" not in err


def test_mesh_errors_name_the_path():
    from adaptors.mesh import parse

    good = sphere_mesh()
    with pytest.raises(adaptors.MeshError, match=r"fields/r/values: expected 49x49x49 float32/float64 "
                                                 r"\(or integer\), got 48x49x49 float64"):
        parse({**good, "fields": {"r": {"association": "vertex", "values": R[1:]}}})
    with pytest.raises(adaptors.MeshError, match=r"coordsets/coords/dims/j: expected a positive integer, got -3"):
        m = sphere_mesh()
        m["coordsets"]["coords"]["dims"]["j"] = -3
        parse(m)
    with pytest.raises(adaptors.MeshError, match=r"domain 1/fields/r/association: expected 'vertex' or 'element'"):
        parse([good, {**good, "state": {"domain_id": 5},
                      "fields": {"r": {"association": "face", "values": R}}}])
    with pytest.raises(adaptors.MeshError, match=r"fields: missing"):
        parse({k: v for k, v in good.items() if k != "fields"})
    with pytest.raises(adaptors.MeshError, match="repeat state/domain_id"):
        parse([good, good])
    with pytest.raises(adaptors.MeshError, match="got str"):
        parse({**good, "fields": {"r": {"association": "vertex", "values": "data"}}})


def test_device_arrays_without_a_gpu_are_refused_with_the_path():
    from fakes import FakeCudaArray

    if arrays.cuda_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    from adaptors.mesh import parse

    with pytest.raises(adaptors.MeshError, match=r"fields/r/values is a CUDA device array, but"):
        parse({**sphere_mesh(), "fields": {"r": {"association": "vertex", "values": FakeCudaArray(R)}}})


def test_layouts_are_taken_without_copies():
    from adaptors.mesh import parse

    f_order = np.asfortranarray(R)
    flat = np.ascontiguousarray(R.transpose()).ravel()  # Conduit: i fastest
    for given in (R, f_order, flat):
        d = parse({**sphere_mesh(), "fields": {"r": {"association": "vertex", "values": given}}})[0]
        v = d.fields["r"].values
        assert arrays.data_pointer(v) == arrays.data_pointer(given)
        np.testing.assert_array_equal(v, R)


def test_ghost_cells_and_element_fields():
    from adaptors.mesh import parse

    d = parse(adaptors.uniform({"r": R}, ghost=((1, 2), (0, 0), (3, 1))))[0]
    assert d.cells == ((1, 0, 3), (46, 48, 47))
    assert d.vertex_values("r").shape == (46, 49, 45)
    cells = np.arange(4 * 3 * 2, dtype=np.float64).reshape(4, 3, 2)
    e = parse(adaptors.uniform({"c": cells}, element=["c"]))[0]
    v = e.vertex_values("c")
    assert v.shape == (5, 4, 3)
    assert v[2, 1, 1] == pytest.approx(cells[1:3, 0:2, 0:2].mean())  # an inner node: its 8 cells
    bad = np.zeros((48, 48, 48), np.int32)
    bad[0, 5, 5] = 1  # a ghost cell inside the real region
    with pytest.raises(adaptors.MeshError, match="must form a box"):
        parse({**sphere_mesh(), "fields": {"r": {"association": "vertex", "values": R},
                                           "ascent_ghosts": {"association": "element", "values": bad}}})


def test_threshold_and_contour_levels(tmp_path):
    cfg = config(tmp_path)
    cfg["pipelines"] = {"pl": {"t": {"type": "threshold", "params": {"field": "r", "max_value": 0.8}}}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, sphere_mesh()), a.results()["errors"]
    assert coverage(tmp_path / "frame_000.png") == pytest.approx(disk_fraction(0.8), rel=0.05)
    cfg = config(tmp_path)
    cfg["pipelines"]["pl"]["c"]["params"] = {"field": "r", "levels": 1}  # midway in [0, 2.078]
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(1, 0.0, sphere_mesh())
        assert a.results()["iso_values"]["pl"] is None
    assert coverage(tmp_path / "frame_001.png") == pytest.approx(disk_fraction(R.max() / 2), rel=0.05)


def test_eikonal_filter_equals_scikit_fmm_across_domains():
    skfmm = pytest.importorskip("skfmm", reason="scikit-fmm is the reference")
    from adaptors.mesh import parse
    from adaptors.context import Context
    from adaptors.pipelines import run_pipeline

    n, h = (21, 17, 13), 0.1
    speed = 1 + np.random.default_rng(0).random(n)
    seed = (3, 4, 5)
    phi = np.ones(n)
    phi[seed] = -1  # skfmm: the zero level set sits half a cell around the seed; set it exactly below
    doms = []
    for gid, (a, b) in enumerate([(0, 8), (7, 15), (14, 21)]):  # shared node planes, one ghost cell layer
        lo, hi = max(a - 1, 0), min(b + 1, n[0])
        doms.append(adaptors.uniform({"s": speed[lo:hi]}, origin=(lo * h, 0, 0), spacing=(h,) * 3,
                                     ghost=((a - lo, hi - b), (0, 0), (0, 0)), domain_id=gid))
    cfg = load({"pipelines": {"p": {"e": {"type": "eikonal", "params": {
        "speed": "s", "seeds": [[0.3, 0.4, 0.5]], "output": "T", "tol": 0.0}}}}})
    ds = run_pipeline("p", cfg["pipelines"]["p"], parse(doms), Context(), {})
    # Reference: scikit-fmm's first-order travel time with the seed node frozen at 0.
    mask = np.zeros(n, bool)
    mask[seed] = True
    from solvers.eikonal import solve

    ref = solve(speed, [seed], (h, h, h))
    ours = np.concatenate([d.vertex_values("T")[:-1] for d in ds.domains[:-1]] + [ds.domains[-1].vertex_values("T")])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)
    # and the solver itself agrees with scikit-fmm away from the seed's neighbourhood
    tt = skfmm.travel_time(np.ma.MaskedArray(phi, np.zeros(n, bool)), speed, dx=h, order=1)
    far = np.zeros(n, bool)
    far[10:, :, :] = True
    assert np.abs(np.asarray(tt)[far] - ref[far]).max() < 0.05 * ref[far].max()


def test_adios2_frames_are_readable_without_our_code(tmp_path):
    import adios2

    bp = str(tmp_path / "frames.bp")
    cfg = config(tmp_path, extracts={"e": {"type": "adios2", "params": {"filename": bp}}})
    with adaptors.Adaptor(cfg) as a:
        for step in range(3):
            assert a.execute(step, step * 0.5, sphere_mesh()), a.results()["errors"]
    from render.image import read_png

    with adios2.FileReader(bp) as f:
        assert int(f.available_variables()["rgba"]["AvailableStepsCount"]) == 3
        steps = f.read("step", step_selection=[0, 3])
        img = f.read("rgba", step_selection=[2, 1])  # VTK image data: (W*H, 4), rows bottom first
        assert "vtk.xml" in f.available_attributes()
    assert list(steps.ravel()) == [0, 1, 2]
    np.testing.assert_array_equal(img.reshape(120, 160, 4)[::-1], read_png(tmp_path / "frame_002.png"))


def test_config_problems_are_all_listed_with_paths(tmp_path):
    bad = {
        "pipelines": {"pl": {"c": {"type": "contour", "params": {"fild": "r", "iso_values": [0.5]}},
                             "d": {"type": "smooth"}}},
        "scenes": {"s": {"plots": {"p": {"type": "pseudocolor", "pipeline": "nope"}},
                         "renders": {"r": {"image_width": 0}}}},
        "triggers": {"t": {"condition": "__import__('os')", "actions": ["x"]}},
        "exceptions": "ignore",
        "colour": 1,
    }
    with pytest.raises(adaptors.ConfigError) as err:
        adaptors.Adaptor(bad)
    msg = str(err.value)
    for part in ["(top): unknown key 'colour'",
                 "exceptions: expected one of catch, forward, got 'ignore'",
                 "pipelines/pl/c/params: unknown key 'fild'; known: field, iso_values, levels",
                 "pipelines/pl/c/params: missing required key 'field'",
                 "pipelines/pl/d/type: unknown filter 'smooth'; known: contour, threshold, slice, 3slice, clip, "
                 "clip_with_field, isovolume, vector_magnitude, vector_component, gradient, recenter, eikonal",
                 "scenes/s/plots/p/pipeline: unknown pipeline 'nope'; known: pl",
                 "scenes/s/renders/r/image_width: must be 1..16384 pixels, got 0",
                 "triggers/t/condition: ",
                 "triggers/t/actions: unknown scene or extract 'x'"]:
        assert part in msg, (part, msg)
    (tmp_path / "bad.yaml").write_text("pipelines: {pl: [unclosed")
    with pytest.raises(adaptors.ConfigError, match="bad.yaml: not valid YAML/JSON"):
        adaptors.initialize(str(tmp_path / "bad.yaml"))
    with pytest.raises(adaptors.ConfigError, match="cannot read"):
        adaptors.initialize(str(tmp_path / "missing.yaml"))


def test_ascent_action_lists_and_yaml_files(tmp_path):
    text = f"""
- action: add_pipelines
  pipelines:
    pl: {{c: {{type: contour, params: {{field: r, iso_values: [0.8]}}}}}}
- action: add_scenes
  scenes:
    s:
      plots: {{p: {{type: pseudocolor, pipeline: pl}}}}
      image_prefix: {tmp_path}/ascent_%02d
"""
    (tmp_path / "actions.yaml").write_text(text)
    with adaptors.Adaptor(str(tmp_path / "actions.yaml")) as a:
        assert a.execute(4, 0.0, sphere_mesh())
    assert os.path.exists(tmp_path / "ascent_04.png")
    with pytest.raises(adaptors.ConfigError, match=r"actions\[0\]: unknown action 'add_filters'"):
        load([{"action": "add_filters"}])


def test_steering_rejects_unknown_keys():
    with adaptors.Adaptor({}) as a:
        with pytest.raises(ValueError, match="unknown key"):
            a.steer({"zoom": 2})
        with pytest.raises(ValueError, match="unknown colormap|colormap"):
            a.steer({"colormap": "rainbow-unicorn"})
        with pytest.raises(ValueError, match="are not pipelines with a contour"):
            a.steer({"iso_values": {"pl": [1]}})


def test_the_configuration_reference_is_generated_from_the_schema():
    with open(os.path.join(ROOT, "docs", "CONFIG.md")) as f:
        assert f.read() == describe() + "\n", \
            "regenerate: python -c 'import adaptors; print(adaptors.describe())' > docs/CONFIG.md"


def test_ghost_boxes_follow_the_array_not_its_address():
    # A ghost array freed and another allocated (often at the same address) must be read afresh.
    from adaptors.mesh import parse

    def with_ghosts(lo_x):
        g = np.ones((48, 48, 48), np.int32)
        g[lo_x:lo_x + 40, :, :] = 0
        return {**sphere_mesh(), "fields": {"r": {"association": "vertex", "values": R},
                                            "ascent_ghosts": {"association": "element", "values": g}}}

    for lo_x in (0, 8, 3, 8, 0):
        assert parse(with_ghosts(lo_x))[0].cells == ((lo_x, 0, 0), (lo_x + 40, 48, 48))


VIEWER = """
import sys, time
from insitu.stream import FrameReader, SteeringWriter, steering_name
frames = FrameReader(sys.argv[1], "SST", timeout=30)
steer = SteeringWriter(steering_name(sys.argv[1]))
seen = 0
while True:
    f = frames.next(timeout=10)
    if f is None:
        break
    seen += 1
    steer.send({"iso_values": [1.0], "transfer_function": [[0, 0.5], [2, 0.0]]})  # the whole state, every frame
steer.close()
print("viewer saw", seen, "frames")
"""


def test_a_viewer_steers_through_the_frame_stream(tmp_path):
    import subprocess
    import sys

    name = str(tmp_path / "live")
    cfg = config(tmp_path, extracts={"e": {"type": "adios2", "params": {"filename": name, "engine": "SST"}}})
    viewer = subprocess.Popen([sys.executable, "-c", VIEWER, name], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": ROOT})
    steered_at = None
    with adaptors.Adaptor(cfg) as a:
        for step in range(400):
            assert a.execute(step, 0.0, sphere_mesh()), a.results()["errors"]
            if a.results()["iso_values"]["pl"] == [1.0]:
                steered_at = step
                assert a.execute(step + 1, 0.0, sphere_mesh())
                break
            time.sleep(0.02)
        res = a.results()
    out, _ = viewer.communicate(timeout=60)
    assert steered_at is not None, out
    assert res["transfer_function"] == [[0.0, 0.5], [2.0, 0.0]]
    assert coverage(tmp_path / f"frame_{steered_at + 1:03d}.png") == pytest.approx(disk_fraction(1.0), rel=0.03)
    assert coverage(tmp_path / "frame_000.png") == pytest.approx(disk_fraction(0.8), rel=0.03)


def test_pause_skips_the_work_until_resumed(tmp_path):
    with adaptors.Adaptor(config(tmp_path)) as a:
        a.steer({"pause": True})
        assert a.execute(0, 0.0, sphere_mesh()) and a.results()["pause"]
        a.steer({"pause": False})
        assert a.execute(1, 0.0, sphere_mesh())
    assert sorted(os.listdir(tmp_path)) == ["frame_001.png"]


def test_a_bad_steering_update_changes_nothing(tmp_path):
    with adaptors.Adaptor(config(tmp_path)) as a:
        for bad, match in [({"camera": {"azimuth": "left"}}, "camera/azimuth: expected a number"),
                           ({"camera": {"zoom": -1}, "iso_values": [0.5]},
                            r"camera/zoom: must be in \[1e-06, 1e\+06\]"),
                           ({"iso_values": [float("nan")]}, "iso_values: expected a list of finite numbers"),
                           ({"transfer_function": [[0, 2.0]]}, "opacities in"),
                           ({"pause": "yes"}, "pause: expected true or false")]:
            with pytest.raises(ValueError, match=match):
                a.steer(bad)
        res = a.results()
        assert res["camera"] == {} and res["iso_values"] == {"pl": [0.8]} and not res["pause"]
        assert a.execute(0, 0.0, sphere_mesh())  # the frames go on as configured


def test_profile_times_every_stage_of_execute(tmp_path):
    cfg = config(tmp_path, profile=True)
    cfg["scenes"]["s"]["plots"]["v"] = {"type": "volume", "field": "r"}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, sphere_mesh())
        t = a.results()["timings"]
    stages = {"mesh", "ranges", "contour", "render", "volume", "composite", "png"}
    assert stages <= set(t), t
    assert all(t[s] > 0 for s in stages)
    assert sum(t[s] for s in stages) <= t["execute"]
    with adaptors.Adaptor(config(tmp_path)) as a:  # off by default: only the total
        assert a.execute(0, 0.0, sphere_mesh())
        assert set(a.results()["timings"]) == {"execute"}


def test_every_extract_type_of_the_schema_has_its_function_and_back():
    from adaptors.config import SCHEMA
    from adaptors.extracts import EXTRACTS

    assert set(EXTRACTS) == set(SCHEMA["extracts"])


def test_an_extract_type_registered_by_its_owner_runs_on_every_due_step(tmp_path, monkeypatch):
    # The registry is what the adaptor runs: a patched entry sees each step's domains.
    from adaptors import extracts

    seen = []
    monkeypatch.setitem(extracts.EXTRACTS, "hdf5", lambda x: seen.append((x.name, x.step, len(x.domains))))
    cfg = config(tmp_path)
    cfg["extracts"] = {"h": {"type": "hdf5", "params": {"path": str(tmp_path / "f_%d")}}}
    with adaptors.Adaptor(cfg) as a:
        for step in range(3):
            assert a.execute(step, 0.0, sphere_mesh())
    assert seen == [("h", 0, 1), ("h", 1, 1), ("h", 2, 1)]
