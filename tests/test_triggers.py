"""adaptors.triggers: insitu's older interface kept, Ascent's trigger form read into insitu's."""

import pytest
import yaml

import adaptors
from adaptors.config import _from_ascent_actions, load
from adaptors.expressions import Env
from adaptors.triggers import check, evaluate, from_ascent, holds

SCENES = yaml.safe_load("""
- action: add_pipelines
  pipelines: {pl: {c: {type: contour, params: {field: r, iso_values: [0.5]}}}}
- action: add_scenes
  scenes: {s: {plots: {p: {type: pseudocolor, pipeline: pl}}}}
- action: add_extracts
  extracts: {e: {type: hdf5, params: {path: "out_%d.h5"}}}
""")


def test_the_older_interface_reduces_through_its_callable():
    calls = []

    def reduce(op, name):
        calls.append((op, name))
        return {"max": 3.0, "avg": 0.5}[op]

    assert evaluate("max(field('T')) > 2.0 and cycle % 10 == 0", cycle=20, time=0.0, reduce=reduce,
                    param=lambda k: 0.0)
    assert not evaluate("avg(field('rho')) > param('lim')", cycle=1, time=0.0, reduce=reduce, param={"lim": 1}.get)
    assert calls == [("max", "T"), ("avg", "rho")]
    assert evaluate("cycle() % 100 == 0", cycle=300, time=0.0, reduce=reduce, param=lambda k: 0.0)
    with pytest.raises(ValueError, match="condition 'cycle \\*\\* cycle > 1'.*OverflowError"):
        evaluate("cycle ** cycle > 1", cycle=10 ** 7, time=0.0, reduce=reduce, param=lambda k: 0.0)
    with pytest.raises(ValueError, match="histogram\\(\\) needs the mesh; this evaluation has only min/max"):
        evaluate("histogram(field('T'), min_val=0, max_val=1) > 0", cycle=1, time=0, reduce=reduce,
                 param=lambda k: 0)
    with pytest.raises(ValueError, match="expected a boolean or a number, got Vector"):
        holds("vector(1, 2, 3)", Env(0, 0.0))


def test_conditions_name_only_queries():
    check("max_p > crazy", ["max_p", "crazy"])
    with pytest.raises(ValueError, match="unknown identifier\\(s\\) 'T'; queries: none \\(fields are written"):
        check("T > 1")


def test_ascent_triggers_become_insitu_triggers_with_their_scenes_and_extracts(tmp_path):
    path = tmp_path / "acts.yaml"
    path.write_text(yaml.safe_dump(SCENES))
    out = {"triggers": {"a": {"params": {"condition": "cycle() % 2 == 0", "actions_file": str(path)}},
                        "b": {"params": {"condition": "cycle() > 5", "actions": SCENES}},  # the same: shared
                        "c": {"every": 3, "actions": ["s"]}},
           "scenes": None}
    problems: list[str] = []
    from_ascent(out, _from_ascent_actions, problems)
    assert problems == []
    assert out["triggers"]["a"] == {"condition": "cycle() % 2 == 0", "actions": ["s", "e"]}
    assert out["triggers"]["b"] == {"condition": "cycle() > 5", "actions": ["s", "e"]}
    assert out["triggers"]["c"] == {"every": 3, "actions": ["s"]}
    assert set(out["pipelines"]) == {"pl"} and set(out["scenes"]) == {"s"} and set(out["extracts"]) == {"e"}
    cfg = load([{"action": "add_triggers", "triggers": {"a": {"params": {"condition": "cycle() % 2 == 0",
                                                                        "actions": SCENES}}}}])
    assert cfg["triggers"]["a"]["actions"] == ["s", "e"] and list(cfg["scenes"]) == ["s"]


def test_ascent_trigger_problems_name_their_paths(tmp_path):
    (tmp_path / "bad.yaml").write_text("- action: add_scenes\n  scenes: [unclosed")
    (tmp_path / "notalist.yaml").write_text("action: add_scenes")
    bad = {"triggers": {
        "a": {"params": {"condition": "cycle() > 1", "actions_file": str(tmp_path / "bad.yaml")}},
        "b": {"params": {"condition": "cycle() > 1", "actions_file": str(tmp_path / "notalist.yaml")}},
        "c": {"params": {"condition": "cycle() > 1", "actions": [{"action": "add_cakes"}]}, "when": 1},
        "d": {"params": {"condition": "cycle() > 1"}},
        "e": {"params": {"condition": "cycle() > 1", "actions": SCENES, "colour": "red"}},
    }}
    with pytest.raises(adaptors.ConfigError) as err:
        load(bad)
    msg = str(err.value)
    for part in ["triggers/a/params/actions_file: ", "is not valid YAML/JSON",
                 "triggers/b/params/actions_file: expected a list of Ascent actions, got dict",
                 "triggers/c/params/actions/actions[0]: unknown action 'add_cakes'",
                 "triggers/c: unknown key 'when'",
                 "triggers/d/params: give exactly one of actions_file or actions",
                 "triggers/e/params: unknown key 'colour'; known: condition, actions_file, actions"]:
        assert part in msg, (part, msg)
