"""Triggers: actions run only when a condition holds.

Two forms. insitu's, naming scenes and extracts of the configuration::

    triggers:
      t1: {condition: "max(field('T')) > 2.0", actions: [s1]}
      t2: {every: 10, actions: [e1]}

and Ascent's, with its own actions (a list of Ascent actions, inline or in a YAML/JSON file)::

    - action: add_triggers
      triggers:
        t1:
          params:
            condition: "cycle() % 100 == 0"
            actions_file: "my_trigger_actions.yaml"    # or actions: [{action: add_scenes, ...}]

A condition is an expression of :mod:`adaptors.expressions` (Ascent's language:
``cycle() % 100 == 0``, ``max_pressure > crazy_value`` over queries,
``history(entropy, relative_index = 1) - entropy > 10``; and insitu's ``cycle``, ``time``,
``param('name')``). Each reduction is collective: every rank evaluates the same conditions in
the same order. The pipelines, scenes and extracts of an Ascent-form trigger join the
configuration's (a name defined twice must be defined alike) and run only when it fires.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

from .expressions import MAX_DEPTH, MAX_LENGTH, Env, ValuePosition, Vector, parse
from .expressions import evaluate as _evaluate

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "REDUCTIONS", "check", "evaluate", "from_ascent", "holds", "parse"]

#: The field reductions of insitu's older form (Ascent's language has more: see adaptors.expressions).
REDUCTIONS = ("min", "max", "sum", "avg")
_SECTIONS = ("pipelines", "scenes", "extracts")


def check(text: str, queries: Sequence[str] = ()) -> None:
    """Parse condition `text` and check that every identifier it reads is a query's name;
    raises ValueError naming what is wrong."""
    unknown = [n for n in parse(text).names if n not in queries]
    if unknown:
        raise ValueError(f"{text!r}: unknown identifier(s) {', '.join(map(repr, unknown))}; queries: "
                         f"{', '.join(queries) or 'none'} (fields are written field('name'))")


def holds(text: str, env: Env) -> bool:
    """Whether condition `text` holds in `env` (collective when it reduces fields)."""
    try:
        v = _evaluate(text, env)
    except ValueError as e:
        if type(e) is ValueError and str(e).startswith("expression "):
            raise ValueError("condition " + str(e).removeprefix("expression ")) from None
        raise
    if isinstance(v, ValuePosition):
        v = v.value
    if not isinstance(v, (bool, int, float)):
        raise ValueError(f"condition {text!r}: expected a boolean or a number, got {type(v).__name__}")
    return bool(v)


class _Reductions:
    """:class:`adaptors.expressions.Data` over a ``reduce(op, field)`` callable (no positions)."""

    def __init__(self, reduce: Callable[[str, str], float]) -> None:
        self._reduce = reduce

    def reduce(self, name: str, op: str) -> float:
        return self._reduce(op, name)

    def extreme(self, name: str, op: str):
        nan = float("nan")
        return ValuePosition(self._reduce(op, name), Vector(nan, nan, nan))

    def _none(self, what: str):
        raise ValueError(f"{what}() needs the mesh; this evaluation has only min/max/sum/avg")

    def count(self, name: str, what: str):
        self._none(f"field_{what}_count")

    def histogram(self, name: str, *args):
        self._none("histogram")

    def bounds(self):
        self._none("bounds")


def evaluate(text: str, *, cycle: int, time: float, reduce: Callable[[str, str], float],
             param: Callable[[str], float]) -> bool:
    """Evaluate a condition (insitu's older interface).

    Parameters
    ----------
    reduce : callable
        ``reduce(op, field_name) -> float``: a global reduction (collective).
    param : callable
        ``param(name) -> float``: a user parameter.
    """
    return holds(text, Env(cycle, time, _Reductions(reduce), {}, param))


def from_ascent(out: dict, convert: Callable[[list, list], dict], problems: list[str]) -> None:
    """Rewrite the triggers of `out` given in Ascent's form, in place.

    ``{params: {condition, actions_file | actions}}`` becomes ``{condition, actions: [names]}``,
    the scenes and extracts its actions add; their pipelines, scenes and extracts are added to
    `out`'s. `convert` turns an Ascent actions list into sections (the configuration's
    ``_from_ascent_actions``). Each problem is appended with its path.
    """
    given = out.get("triggers")
    if not isinstance(given, Mapping) or not any(isinstance(t, Mapping) and "params" in t for t in given.values()):
        return
    triggers: dict = {}
    for name, t in given.items():
        if not (isinstance(t, Mapping) and "params" in t):
            triggers[name] = t
            continue
        path = f"triggers/{name}"
        for k in t:
            if k != "params":
                problems.append(f"{path}: unknown key {k!r}; known: params (Ascent's form) or condition, every, "
                                "actions (insitu's)")
        p = t["params"]
        if not isinstance(p, Mapping):
            problems.append(f"{path}/params: expected a map of condition and actions_file or actions")
            continue
        for k in p:
            if k not in ("condition", "actions_file", "actions"):
                problems.append(f"{path}/params: unknown key {k!r}; known: condition, actions_file, actions")
        if ("actions" in p) == ("actions_file" in p):
            problems.append(f"{path}/params: give exactly one of actions_file or actions")
            continue
        where = f"{path}/params/" + ("actions" if "actions" in p else "actions_file")
        actions = p["actions"] if "actions" in p else _read_actions(p["actions_file"], where, problems)
        if actions is None:
            continue
        if not isinstance(actions, list):
            problems.append(f"{where}: expected a list of Ascent actions, got {type(actions).__name__}")
            continue
        inner: list[str] = []
        sections = convert(actions, inner)
        problems.extend(f"{where}/{q}" for q in inner)
        names: list[str] = []
        for sec, items in sections.items():
            if sec not in _SECTIONS:
                problems.append(f"{where}: add_{sec} is not supported inside a trigger's actions "
                                f"(only add_pipelines, add_scenes, add_extracts)")
                continue
            if not isinstance(items, Mapping):
                problems.append(f"{where}: add_{sec}: expected a map of {sec}")
                continue
            mine = out.get(sec)
            mine = dict(mine) if isinstance(mine, Mapping) else {}
            for n, v in items.items():
                n = str(n)
                if n in mine and mine[n] != v:
                    problems.append(f"{where}: {sec} {n!r} is also defined elsewhere, differently")
                    continue
                mine[n] = v
                if sec != "pipelines":
                    names.append(n)
            out[sec] = mine
        triggers[name] = {"condition": p.get("condition"), "actions": names}
        if not isinstance(p.get("condition"), str):
            problems.append(f"{path}/params/condition: expected an expression, got {p.get('condition')!r}")
    out["triggers"] = triggers


def _read_actions(path: Any, where: str, problems: list[str]) -> Any:
    if not isinstance(path, (str, os.PathLike)):
        problems.append(f"{where}: expected a path, got {path!r}")
        return None
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        problems.append(f"{where}: cannot read {os.fspath(path)} ({e.strerror})")
        return None
    try:
        import yaml

        return yaml.safe_load(text)
    except Exception as e:  # yaml.YAMLError carries the line and column
        problems.append(f"{where}: {os.fspath(path)} is not valid YAML/JSON: {e}")
        return None
