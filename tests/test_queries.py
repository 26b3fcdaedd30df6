"""Ascent's add_queries and add_triggers through the adaptor: the documentation's actions, values
per cycle and their history, triggers with inline actions and with an actions file; and under
mpiexec, reductions and histograms over every rank."""

import os

import numpy as np
import pytest
import yaml

import adaptors
from adaptors.queries import Queries, validate

N = 33
X = np.linspace(-1.0, 1.0, N)
H = X[1] - X[0]
R = np.sqrt(X[:, None, None] ** 2 + X[None, :, None] ** 2 + X[None, None, :] ** 2)


def mesh(pressure):
    return adaptors.uniform({"pressure": pressure, "r": R}, origin=(-1.0,) * 3, spacing=(H,) * 3)


SCENE_ACTIONS = """
- action: "add_pipelines"
  pipelines:
    pl1:
      f1: {type: "contour", params: {field: "r", iso_values: [0.5]}}
- action: "add_scenes"
  scenes:
    s1:
      plots: {p1: {type: "pseudocolor", pipeline: "pl1"}}
      renders: {r1: {image_width: 32, image_height: 24, image_prefix: "PREFIX_%04d"}}
"""


def scene_actions(tmp_path, prefix="t"):
    return SCENE_ACTIONS.replace("PREFIX", str(tmp_path / prefix))


def test_the_documentations_queries_run_every_cycle_and_keep_their_history():
    actions = yaml.safe_load("""
-
  action: "add_queries"
  queries:
    q1:
      params:
        expression: "cycle()"
        name: "my_cycle"
    q2:
      params:
        expression: "1+1"
        name: "two"
    q3:
      params:
        expression: "two + 1"
        name: "result"
-
  action: "add_queries"
  queries:
    q4:
      params:
        # get the maximum value of a field
        expression: "max(field('pressure'))"
        name: "max_pressure"
    q5:
      params:
        expression: "max_pressure - history(max_pressure, relative_index = 1)
        > 100"
        name: "jump"
""")
    peaks = [1.0, 50.0, 200.0, 250.0]
    seen = []
    with adaptors.Adaptor(actions) as a:
        for cycle, peak in zip((10, 20, 30, 40), peaks):
            p = R * peak / R.max()
            assert a.execute(cycle, cycle / 10, mesh(p)), a.results()["errors"]
            seen.append(a.results()["queries"])
        history = a._queries.history()
    assert [s["my_cycle"] for s in seen] == [10, 20, 30, 40]
    assert all(s["two"] == 2 and s["result"] == 3 for s in seen)
    assert [s["max_pressure"]["value"] for s in seen] == pytest.approx(peaks, rel=1e-12)
    corner = [-1.0, -1.0, -1.0]  # R is largest at the corners; the first one is (0, 0, 0)
    assert seen[0]["max_pressure"]["position"] == pytest.approx(corner)
    assert [s["jump"] for s in seen] == [False, False, True, False]  # +150 at cycle 30 only
    assert list(history["max_pressure"]) == [10, 20, 30, 40]


def test_a_cycle_executed_twice_keeps_one_value_and_history_indexes_from_the_first():
    section = validate({"q": {"params": {"expression": "cycle() * 2", "name": "c2"}},
                        "d": {"params": {"expression": "c2 - history(c2, absolute_index=0)", "name": "d"}}}, [])
    q = Queries(section)
    for cycle in (1, 2, 2, 5):
        q.run(cycle, 0.0, None)
    assert q.values["c2"] == [2, 4, 10] and q.latest() == {"c2": 10, "d": 8}
    assert q.history()["c2"] == {1: 2, 2: 4, 5: 10}


def test_ascent_trigger_with_inline_actions_fires_on_its_condition(tmp_path):
    actions = yaml.safe_load(f"""
- action: "add_triggers"
  triggers:
    t1:
      params:
        condition: "cycle() % 100 == 0"
        actions: {yaml.safe_dump(yaml.safe_load(scene_actions(tmp_path)), default_flow_style=True)}
""")
    with adaptors.Adaptor(actions) as a:
        for cycle in (0, 50, 100, 150, 200):
            assert a.execute(cycle, 0.0, mesh(R)), a.results()["errors"]
    assert sorted(os.listdir(tmp_path)) == ["t_0000.png", "t_0100.png", "t_0200.png"]


def test_ascent_trigger_with_an_actions_file_and_queries_as_the_documentation_writes_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Ascent reads actions_file from the working directory
    (tmp_path / "my_trigger_actions.yaml").write_text(scene_actions(tmp_path, "debug"))
    actions = yaml.safe_load("""
-
  action: "add_queries"
  queries:
    q1:
      params:
        # get the maximum value of a field
        expression: "max(field('pressure'))"
        name: "max_pressure"
    q2:
      params:
        expression: "1e3"
        name: "crazy_value"
-
  action: "add_triggers"
  triggers:
    t1:
      params:
        condition: "max_pressure > crazy_value"
        actions_file : "my_trigger_actions.yaml"
""")
    with adaptors.Adaptor(actions) as a:
        for cycle, peak in enumerate([1.0, 2e3, 5.0, 1e4]):
            assert a.execute(cycle, 0.0, mesh(R * peak / R.max())), a.results()["errors"]
        assert a.about()["scenes"] == ["s1"]
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".png")) == ["debug_0001.png", "debug_0003.png"]


def test_event_detection_with_entropy_history(tmp_path):
    # The documentation's event detection (its threshold of 10 nats cannot be reached by 256 bins, ln 256 = 5.5;
    # the second trigger asks for a drop of 1).
    cfg = yaml.safe_load(f"""
- action: "add_queries"
  queries:
    q1:
      params:
        expression: "entropy(histogram(field('pressure')))"
        name: "entropy"
- action: "add_triggers"
  triggers:
    t1:
      params:
        condition: "history(entropy, relative_index = 1) - entropy > 10"
        actions: [{{action: add_extracts, extracts: {{e1: {{type: hdf5, params: {{path: "{tmp_path}/ten_%d.h5"}}}}}}}}]
    t2:
      params:
        condition: "history(entropy, relative_index = 1) - entropy > 1"
        actions: [{{action: add_extracts, extracts: {{e2: {{type: hdf5, params: {{path: "{tmp_path}/one_%d.h5"}}}}}}}}]
""")
    rng = np.random.default_rng(1)
    spread = rng.uniform(size=R.shape)
    two = np.where(R > 0.9, 1.0, 0.0)
    got = []
    with adaptors.Adaptor(cfg) as a:
        for cycle, p in enumerate([spread, spread, two, two]):
            assert a.execute(cycle, 0.0, mesh(p)), a.results()["errors"]
            got.append(a.results()["queries"]["entropy"])
    for value, p in zip(got, [spread, spread, two, two]):
        c = np.histogram(p, 256, (p.min(), p.max()))[0]
        q = c[c > 0] / p.size
        assert value == pytest.approx(-(q * np.log(q)).sum(), rel=1e-12)
    assert sorted(os.listdir(tmp_path)) == ["one_2.h5"]


def test_insitu_triggers_read_queries_too(tmp_path):
    cfg = {"queries": {"q": {"params": {"expression": "avg(field('pressure'))", "name": "mean_p"}}},
           "extracts": {"h": {"type": "hdf5", "params": {"path": str(tmp_path / "h_%d.h5")}}},
           "triggers": {"t": {"condition": "mean_p > 0.5 and cycle() > 0", "actions": ["h"]}}}
    with adaptors.Adaptor(cfg) as a:
        for cycle, level in enumerate([1.0, 0.2, 0.7]):
            assert a.execute(cycle, 0.0, mesh(np.full(R.shape, level))), a.results()["errors"]
        assert a.results()["queries"] == {"mean_p": pytest.approx(0.7)}
    assert os.listdir(tmp_path) == ["h_2.h5"]


def test_configuration_problems_name_their_paths(tmp_path):
    scene = yaml.safe_load(scene_actions(tmp_path))
    bad = {
        "queries": {"q1": {"params": {"expression": "max(field('p')) + nope", "name": "a"}},
                    "q2": {"params": {"expression": "1", "name": "a"}},
                    "q3": {"params": {"expression": "gradient(field('p'))", "name": "g"}},
                    "q4": {"pipeline": "pl1", "params": {"expression": "1", "name": "b"}}},
        "triggers": {"t1": {"params": {"condition": "cycle() > 1", "actions": scene,
                                       "actions_file": "x.yaml"}},
                     "t2": {"params": {"condition": "cycle() > 1", "actions_file": str(tmp_path / "missing.yaml")}},
                     "t3": {"params": {"condition": "undefined_query > 1", "actions": scene}},
                     "t4": {"params": {"condition": "1", "actions": [{"action": "add_queries", "queries": {}}]}},
                     "t5": {"params": {"condition": "1", "actions": [{"action": "add_scenes", "scenes": {
                         "s1": {"plots": {}}}}]}}},
    }
    with pytest.raises(adaptors.ConfigError) as err:
        adaptors.load(bad)
    msg = str(err.value)
    for part in ["queries/q1/params/expression: unknown identifier(s) 'nope'",
                 "queries/q2/params/name: 'a' is also the name of queries/q1",
                 "queries/q3/params/expression: \"gradient(field('p'))\": Ascent's gradient() is not supported",
                 "queries/q4/pipeline: queries on a pipeline's output are not supported",
                 "triggers/t1/params: give exactly one of actions_file or actions",
                 "triggers/t2/params/actions_file: cannot read",
                 "triggers/t3/condition: 'undefined_query > 1': unknown identifier(s) 'undefined_query'",
                 "triggers/t4/params/actions: add_queries is not supported inside a trigger's actions",
                 "triggers/t5/params/actions: scenes 's1' is also defined elsewhere, differently"]:
        assert part in msg, (part, msg)


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3])
def test_reductions_and_histograms_are_global_under_mpiexec(mpi, nranks):
    # tests/mpi/queries_check.py: a field split among the ranks with ghost layers holding values that would win
    # every reduction; max/min (with positions), sum, avg, histograms, entropy and NaN/inf counts against NumPy.
    p = mpi(nranks, "queries_check.py", env={"NUMBA_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    assert f"OK ranks={nranks}" in p.stdout
