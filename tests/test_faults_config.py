"""Fault injection: hostile or mistaken configuration and steering values (issue 19, items 4 and 8).

A bad value is refused where it enters (``initialize``, ``steer``, the steering file) with
an error naming its path, changes nothing, and never breaks a later step; trigger
conditions evaluate in bounded time; uint64 fields are accepted. One process, a small
mesh, the pseudocolor scene of tests/test_adaptor.py rendered on whatever path this
machine has (the CPU one on CI).
"""

import json
import os
import re
import time

import numpy as np
import pytest

import adaptors
from adaptors.config import MAX_ISO_VALUES, load
from test_adaptor import CAMERA, H, N, R, config, coverage, disk_fraction, sphere_mesh

HUGE = 10 ** 400  # float(HUGE) raises OverflowError, not ValueError
ORBIT = {"azimuth": 30.0, "elevation": 20.0}  # a camera fitted to the data (zoom applies)


def orbit_config(tmp_path, **extra):
    cfg = config(tmp_path, **extra)
    cfg["scenes"]["s"]["renders"]["r"]["camera"] = dict(ORBIT)
    return cfg


def steady(res: dict) -> dict:
    """What a refused update must leave alone (timings and frames belong to the last step)."""
    return {k: v for k, v in res.items() if k not in ("timings", "frames")}


# (camera the render is configured with, update, the key path the error names)
BAD_STEERING = [
    (ORBIT, {"camera": {"zoom": 1e300}}, "camera/zoom"),
    (ORBIT, {"camera": {"zoom": 1e-300}}, "camera/zoom"),
    (ORBIT, {"camera": {"zoom": 0}}, "camera/zoom"),
    (ORBIT, {"camera": {"zoom": HUGE}}, "camera/zoom"),
    (ORBIT, {"camera": {"zoom": float("inf")}}, "camera/zoom"),
    (ORBIT, {"camera": {"azimuth": float("nan")}}, "camera/azimuth"),
    (ORBIT, {"camera": {"elevation": HUGE}}, "camera/elevation"),
    (ORBIT, {"camera": {"fov": 180}}, "camera/fov"),
    (ORBIT, {"camera": {"fov": 0}}, "camera/fov"),
    (ORBIT, {"camera": {"up": [0, 0, 0]}}, "camera/up"),
    (ORBIT, {"camera": {"up": [0, 0, 1]}}, r"camera \(with scenes/s/renders/r/camera\): up is parallel"),
    (ORBIT, {"camera": {"position": [1, 2, 3], "look_at": [1, 2, 3]}}, "position and look_at coincide"),
    (CAMERA, {"camera": {"position": [0, 0, 0]}}, r"camera \(with scenes/s/renders/r/camera\): position and look_at"),
    (CAMERA, {"camera": {"up": [0, 0, 1]}}, "up is parallel to the viewing direction"),
    (CAMERA, {"camera": {"up": [0, 0, 0]}}, "camera/up"),
    (CAMERA, {"camera": {"position": [HUGE, 0, 0]}}, "camera/position"),
    (CAMERA, {"camera": {"position": [float("nan"), 0, 0]}}, "camera/position"),
    (CAMERA, {"camera": {"position": [1e300, 0, 0], "look_at": [-1e300, 0, 0]}}, "camera"),
    (CAMERA, {"iso_values": [HUGE]}, "iso_values"),
    (CAMERA, {"iso_values": [float("nan")]}, "iso_values"),
    (CAMERA, {"iso_values": {"pl": [float("-inf")]}}, "iso_values/pl"),
    (CAMERA, {"iso_values": list(np.linspace(0.5, 1.0, 12000))}, f"iso_values: expected at most {MAX_ISO_VALUES}"),
    (CAMERA, {"params": {"gain": HUGE}}, "params/gain"),
    (CAMERA, {"transfer_function": [[HUGE, 0.5]]}, "transfer_function"),
    (CAMERA, {"colormap": "no_such_map"}, "colormap: unknown .no_such_map.; known: viridis"),
    (CAMERA, {"pause": 1}, "pause"),
]
IDS = [f"{i}-{'-'.join(u)}" for i, (_, u, _) in enumerate(BAD_STEERING)]


@pytest.mark.parametrize("camera,update,where", BAD_STEERING, ids=IDS)
def test_a_bad_steering_value_is_refused_and_the_next_steps_run(tmp_path, camera, update, where):
    cfg = config(tmp_path, params={"gain": 1.0})
    cfg["scenes"]["s"]["renders"]["r"]["camera"] = dict(camera)
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, sphere_mesh())
        before = steady(a.results())
        with pytest.raises(ValueError, match=where):
            a.steer({**update, "stop": True})  # the good key in the same update is not applied either
        assert steady(a.results()) == before
        assert a.execute(1, 0.1, sphere_mesh()) and a.execute(2, 0.2, sphere_mesh())
        res = a.results()
    assert res["errors"] == [] and not res["stop"]
    assert os.path.exists(tmp_path / "frame_002.png")
    if camera is CAMERA:  # the frame is still the configured one
        assert coverage(tmp_path / "frame_002.png") == pytest.approx(disk_fraction(0.8), rel=0.03)


def _write_steering(path, update, tick: list) -> None:
    path.write_text(json.dumps(update))  # json writes NaN/Infinity and reads them back
    tick[0] += 1_000_000_000
    os.utime(path, ns=(tick[0], tick[0]))  # a distinct mtime however coarse the file system's clock


def test_bad_steering_through_the_file_is_recorded_and_the_steps_go_on(tmp_path):
    sfile = tmp_path / "steer.json"
    tick = [time.time_ns()]
    cfg = orbit_config(tmp_path, steering={"file": str(sfile)}, params={"gain": 1.0})
    step = 0
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(step, 0.0, sphere_mesh())
        before = steady(a.results())
        for _, update, where in BAD_STEERING:
            if "position" in update.get("camera", {}) and "look_at" not in update["camera"]:
                continue  # those need the position-and-look_at render camera: covered above
            _write_steering(sfile, update, tick)
            step += 1
            assert a.execute(step, 0.0, sphere_mesh()), a.results()["errors"]  # the step itself runs
            res = a.results()
            assert len(res["errors"]) == len(before["errors"]) + 1, (update, res["errors"])
            assert res["errors"][-1].startswith(f"steering ({sfile})"), res["errors"][-1]
            assert re.search(where, res["errors"][-1]), (where, res["errors"][-1])
            assert steady({**res, "errors": before["errors"], "step": before["step"]}) == before
            before = steady(res)
        _write_steering(sfile, {"camera": {"zoom": 2.0}, "iso_values": [1.0]}, tick)  # a good one still applies
        assert a.execute(step + 1, 0.0, sphere_mesh())
        res = a.results()
    assert res["camera"] == {"zoom": 2.0} and res["iso_values"] == {"pl": [1.0]}
    assert len(res["errors"]) == len(before["errors"])


def test_one_overflowing_update_does_not_lose_the_rest_of_its_batch(tmp_path):
    """Viewers' updates arrive in batches: each is applied or refused on its own."""

    class Reader:  # a viewer's steering stream, as the adaptor polls it
        name = "fake.steer"

        def __init__(self, batches):
            self.batches = list(batches)
            self.problems = []  # as insitu.stream.SteeringReader's: what its relay refused

        def poll(self):
            return self.batches.pop(0) if self.batches else []

        def close(self):
            pass

    cfg = orbit_config(tmp_path, steering={"file": str(tmp_path / "absent.json")})
    with adaptors.Adaptor(cfg) as a:
        a._steer_readers.append(Reader([[{"camera": {"zoom": HUGE}}, {"iso_values": [1.0]},
                                         {"camera": {"fov": 180}}, {"camera": {"zoom": 1.5}}]]))
        assert a.execute(0, 0.0, sphere_mesh())
        res = a.results()
    assert res["iso_values"] == {"pl": [1.0]} and res["camera"] == {"zoom": 1.5}
    assert len(res["errors"]) == 2 and "camera/zoom" in res["errors"][0] and "camera/fov" in res["errors"][1]


def test_null_steering_goes_back_to_the_configuration(tmp_path):
    with adaptors.Adaptor(config(tmp_path)) as a:
        a.steer({"camera": {"fov": 20.0, "up": [1, 0, 0]}, "iso_values": [1.0], "colormap": "plasma"})
        a.steer({"camera": {"fov": None}, "iso_values": None, "colormap": None})
        res = a.results()
        assert res["camera"] == {"up": [1.0, 0.0, 0.0]} and res["iso_values"] == {"pl": [0.8]}
        assert res["colormap"] is None
        a.steer({"camera": None})
        assert a.results()["camera"] == {}
        assert a.execute(0, 0.0, sphere_mesh())
    assert coverage(tmp_path / "frame_000.png") == pytest.approx(disk_fraction(0.8), rel=0.03)


# (a change to the test configuration, the path the ConfigError names)
def _set(path, value):
    def change(cfg):
        node = cfg
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
    return change


RENDER = ("scenes", "s", "renders", "r")
BAD_CONFIG = [
    (_set(("scenes", "s", "plots", "p", "color_table"), {"name": "no_such_map"}),
     "scenes/s/plots/p/color_table/name: unknown .no_such_map.; known: viridis"),
    (_set(RENDER + ("camera",), {"zoom": 0}), "scenes/s/renders/r/camera/zoom: must be in"),
    (_set(RENDER + ("camera",), {"zoom": 1e300}), "scenes/s/renders/r/camera/zoom: must be in"),
    (_set(RENDER + ("camera",), {"fov": 0}), r"scenes/s/renders/r/camera/fov: must be in \(0, 180\)"),
    (_set(RENDER + ("camera",), {"fov": 180}), r"scenes/s/renders/r/camera/fov: must be in \(0, 180\)"),
    (_set(RENDER + ("camera",), {"elevation": 120}), "scenes/s/renders/r/camera/elevation: must be in"),
    (_set(RENDER + ("camera",), {"azimuth": HUGE}), "scenes/s/renders/r/camera/azimuth: expected a finite number"),
    (_set(RENDER + ("camera",), {"up": [0, 0, 0]}), "scenes/s/renders/r/camera/up: expected three finite"),
    (_set(RENDER + ("camera",), {"up": [0, 0, 1]}), "scenes/s/renders/r/camera: up is parallel"),
    (_set(RENDER + ("camera",), {"position": [1, 1, 1], "look_at": [1, 1, 1]}),
     "scenes/s/renders/r/camera: position and look_at coincide"),
    (_set(RENDER + ("image_width",), HUGE), "scenes/s/renders/r/image_width: expected a finite number"),
    (_set(RENDER + ("bg_color",), [2, 0, 0]), r"scenes/s/renders/r/bg_color: expected numbers in \[0, 1\]"),
    (_set(("pipelines", "pl", "c", "params", "iso_values"), list(range(12000))),
     f"pipelines/pl/c/params/iso_values: expected at most {MAX_ISO_VALUES} items, got 12000"),
    (_set(("pipelines", "pl", "c", "params", "iso_values"), [float("nan")]),
     "pipelines/pl/c/params/iso_values: expected a list of finite numbers"),
    (_set(("pipelines", "pl", "c", "params"), {"field": "r", "levels": 100000}),
     f"pipelines/pl/c/params/levels: must be 1..{MAX_ISO_VALUES}"),
    (_set(("params",), {"gain": HUGE}), "params/gain: expected a finite number"),
    (_set(("triggers",), {"t": {"every": 0, "actions": ["s"]}}), "triggers/t/every: must be >= 1"),
    (_set(("engine",), {"type": "spark", "params": {"timeout": 0}}), "engine/params/timeout: must be > 0 seconds"),
]


@pytest.mark.parametrize("change,where", BAD_CONFIG, ids=[w.split(":")[0] for _, w in BAD_CONFIG])
def test_every_bad_value_is_a_config_error_naming_its_path(tmp_path, change, where):
    cfg = config(tmp_path)
    change(cfg)
    with pytest.raises(adaptors.ConfigError, match=where) as err:
        load(cfg)
    assert len(err.value.problems) == 1, err.value.problems  # one fault, one problem
    if "spark" not in where:  # initialize checks the same (spark would need its engine)
        with pytest.raises(adaptors.ConfigError, match=where):
            adaptors.initialize(cfg)
    assert not os.listdir(tmp_path)  # nothing ran


def test_a_huge_trigger_power_is_refused_quickly(tmp_path):
    t0 = time.monotonic()
    cfg = config(tmp_path, triggers={"t": {"condition": "10 ** 10 ** 7 > 1", "actions": ["s"]}})
    with pytest.raises(adaptors.ConfigError, match=r"triggers/t/condition: .*10 \*\* 10 \*\* 7: OverflowError"):
        load(cfg)
    for condition, why in [("cycle > 1 or " * 90 + "1", "at most 1000"), ("-" * 100 + "1 > 0", "nested more than"),
                           ("'x' * 1000000000 > 1", "a string is allowed only"),
                           (f"{HUGE} > 1", "floating-point range"),
                           ("max(field('r')) > 1 / 0", "ZeroDivisionError")]:
        with pytest.raises(adaptors.ConfigError, match=why):
            load(config(tmp_path, triggers={"t": {"condition": condition, "actions": ["s"]}}))
    assert time.monotonic() - t0 < 5  # generous: the unbounded version took ~30 s


def test_a_trigger_that_overflows_at_run_time_fails_that_step_quickly(tmp_path):
    cfg = config(tmp_path, triggers={"t": {"condition": "cycle ** cycle > 1", "actions": ["s"]}})
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(3, 0.0, sphere_mesh())  # 27 > 1: fires
        t0 = time.monotonic()
        assert not a.execute(10 ** 7, 0.0, sphere_mesh())  # an integer power of 70 million digits before
        assert time.monotonic() - t0 < 5
        err = a.results()["errors"][-1]
        assert "condition 'cycle ** cycle > 1'" in err and "OverflowError" in err, err
        assert a.execute(4, 0.0, sphere_mesh())  # and the next step runs
    assert os.path.exists(tmp_path / "frame_003.png") and os.path.exists(tmp_path / "frame_004.png")


def test_iso_values_are_capped_in_config_and_steering(tmp_path):
    many = [float(v) for v in np.linspace(0.5, 1.1, 12000)]
    cfg = config(tmp_path)
    cfg["pipelines"]["pl"]["c"]["params"]["iso_values"] = many
    with pytest.raises(adaptors.ConfigError, match=f"pl/c/params/iso_values: expected at most {MAX_ISO_VALUES} items"):
        adaptors.initialize(cfg)
    cfg["pipelines"]["pl"]["c"]["params"]["iso_values"] = many[:MAX_ISO_VALUES]
    with adaptors.Adaptor(cfg) as a:  # the cap itself is fine
        with pytest.raises(ValueError, match=f"iso_values: expected at most {MAX_ISO_VALUES} items, got 12000"):
            a.steer({"iso_values": many})
        with pytest.raises(ValueError, match=f"iso_values/pl: expected at most {MAX_ISO_VALUES}"):
            a.steer({"iso_values": {"pl": many}})
        assert len(a.results()["iso_values"]["pl"]) == MAX_ISO_VALUES


def test_an_unused_uint64_field_never_fails_a_step(tmp_path):
    ids = np.arange(N ** 3, dtype=np.uint64).reshape(N, N, N) + np.uint64(2 ** 63)  # past int64
    mesh = adaptors.uniform({"r": R, "ids": ids}, origin=(-1.2,) * 3, spacing=(H,) * 3)
    with adaptors.Adaptor(config(tmp_path)) as a:
        for step in range(2):
            assert a.execute(step, 0.0, mesh), a.results()["errors"]
        assert a.results()["errors"] == []
    assert coverage(tmp_path / "frame_001.png") == pytest.approx(disk_fraction(0.8), rel=0.03)


def test_a_uint64_field_contours_thresholds_and_reduces_like_its_float_copy(tmp_path):
    u = np.round(R * 1000).astype(np.uint64)  # the radius in thousandths
    cfg = config(tmp_path, iso=800.0, triggers={"t": {"condition": "max(field('u')) > 2000 and min(field('u')) < 100",
                                                      "actions": ["s", "thr"]}})
    cfg["pipelines"]["pl"]["c"]["params"]["field"] = "u"
    cfg["pipelines"]["th"] = {"t": {"type": "threshold", "params": {"field": "u", "max_value": 800}}}
    cfg["scenes"]["thr"] = {"plots": {"q": {"type": "pseudocolor", "pipeline": "th"}},
                            "image_prefix": str(tmp_path / "thr_%03d")}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, adaptors.uniform({"u": u}, origin=(-1.2,) * 3, spacing=(H,) * 3))
        assert a.execute(1, 0.0, adaptors.uniform({"u": u.astype(np.float64)}, origin=(-1.2,) * 3, spacing=(H,) * 3))
        assert a.results()["errors"] == []
    from render.image import read_png

    for name in ("frame", "thr"):
        np.testing.assert_array_equal(read_png(tmp_path / f"{name}_000.png"), read_png(tmp_path / f"{name}_001.png"))
    assert coverage(tmp_path / "frame_000.png") == pytest.approx(disk_fraction(0.8), rel=0.03)
    assert coverage(tmp_path / "thr_000.png") > 0.05  # the kept cells are drawn


# -- the deadline of SST extracts, steering streams the relay refuses ----------------------------

@pytest.mark.parametrize("extract", ["adios2", "adios2_mesh"])
@pytest.mark.parametrize("deadline", [0, -1, float("nan"), "soon"])
def test_an_sst_deadline_that_is_not_a_positive_number_is_refused(tmp_path, extract, deadline):
    cfg = config(tmp_path)
    cfg["extracts"] = {"x": {"type": extract, "params": {"filename": str(tmp_path / "s"), "engine": "SST",
                                                         "deadline": deadline}}}
    with pytest.raises(ValueError, match="extracts/x/params/deadline"):
        load(cfg)


def test_a_steering_stream_others_could_have_written_is_reported_by_results(tmp_path):
    # A contact file writable by everybody (as one planted in a shared directory): the relay
    # refuses it and the refusal reaches results()["errors"], not only the relay's stderr.
    frames = str(tmp_path / "frames")
    cfg = config(tmp_path)
    cfg["extracts"] = {"live": {"type": "adios2", "params": {"filename": frames, "engine": "SST", "deadline": 5}}}
    contact = frames + ".steer.sst"
    with open(contact, "w") as f:
        f.write("not a real writer\n")
    os.chmod(contact, 0o666)
    with adaptors.Adaptor(cfg) as a:
        mesh = sphere_mesh()
        errors: list[str] = []
        deadline = time.monotonic() + 30
        step = 0
        while time.monotonic() < deadline and not errors:
            a.execute(step, 0.0, mesh)
            errors = [e for e in a.results()["errors"] if "refusing SST contact file" in e]
            step += 1
            time.sleep(0.2)
        assert errors, a.results()["errors"]
        assert contact in errors[0] and "writable by others" in errors[0], errors
        assert a.execute(step, 0.0, mesh)  # the run goes on


def test_a_lossless_stream_without_a_viewer_fails_one_step_within_its_deadline(tmp_path):
    cfg = config(tmp_path)
    cfg["extracts"] = {"live": {"type": "adios2", "params": {"filename": str(tmp_path / "frames"), "engine": "SST",
                                                             "lossless": True, "steering": False, "deadline": 2}}}
    with adaptors.Adaptor(cfg) as a:
        mesh = sphere_mesh()
        took, ok = [], []
        for step in range(3):
            t0 = time.monotonic()
            ok.append(a.execute(step, 0.0, mesh))
            took.append(time.monotonic() - t0)
        errors = a.results()["errors"]
    # The configured deadline, not the default 30 s nor forever, bounds the wait for a viewer.
    assert False in ok and max(took) < 15, (ok, took, errors)
    assert any("ReaderTimeoutError" in e for e in errors), errors
    assert ok[-1], (ok, errors)  # the steps after it go on (frames dropped until a viewer comes)


def test_a_trigger_on_a_field_the_mesh_lacks_fails_the_step_naming_it(tmp_path):
    cfg = config(tmp_path)
    cfg["triggers"] = {"t": {"condition": "max(field('nope')) > 1", "actions": ["s"]}}
    cfg["exceptions"] = "catch"
    with adaptors.Adaptor(cfg) as a:
        assert not a.execute(0, 0.0, sphere_mesh())
        errors = a.results()["errors"]
        assert any("MeshError" in e and "no field 'nope'" in e for e in errors), errors
        assert not a.execute(1, 0.0, sphere_mesh())  # and again: nothing broke for good


def test_the_adaptors_errors_are_log_records_a_user_handler_receives(tmp_path, caplog):
    # A failed step is recorded in results() and logged as an ERROR of 'adaptors.adaptor'
    # carrying the rank, so the application's own logging configuration decides where it goes.
    cfg = config(tmp_path)
    cfg["triggers"] = {"t": {"condition": "max(field('nope')) > 1", "actions": ["s"]}}
    cfg["exceptions"] = "catch"
    with caplog.at_level("ERROR", logger="adaptors"):
        with adaptors.Adaptor(cfg) as a:
            a.execute(0, 0.0, sphere_mesh())
    recs = [r for r in caplog.records if r.name == "adaptors.adaptor"]
    assert recs and recs[0].levelname == "ERROR" and recs[0].rank == 0, caplog.records
    assert "no field 'nope'" in recs[0].getMessage()
