"""The adaptor's configuration: Ascent-style actions, validated against one schema.

A configuration is YAML or JSON (a path or a string) or the same keys as a dict::

    pipelines:                       # named pipelines, each an ordered map of filters
      pl1:
        f1: {type: contour, params: {field: T, iso_values: [0.5]}}
    scenes:                          # named scenes: plots and renders
      s1:
        plots:
          p1: {type: pseudocolor, pipeline: pl1, field: T, color_table: {name: viridis}}
        renders:
          r1: {image_width: 512, image_height: 512, image_prefix: out/frame_%04d,
               camera: {azimuth: 30, elevation: 20}}
    extracts:                        # named outputs beside the images
      e1: {type: adios2, params: {filename: out/frames.bp, engine: BP5}}
    triggers:                        # actions that run only when a condition holds
      t1: {condition: "max(field('T')) > 2.0", actions: [s1]}
    engine: embedded
    exceptions: catch                # or forward

Ascent's own list form (``[{action: add_pipelines, pipelines: {...}}, ...]``) is
accepted too. Every problem is collected with its path before anything runs
("pipelines/pl1/f1/params: unknown key 'fild'; known: field, iso_values, levels"), and
the documentation of every key (``docs/CONFIG.md``) is generated from the same schema
(:func:`describe`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

from .errors import ConfigError

__all__ = ["Param", "SCHEMA", "describe", "is_number", "is_real", "load", "validate"]


@dataclasses.dataclass(frozen=True)
class Param:
    """One configuration key: its kind, default and meaning."""

    kind: str  # number, int, bool, str, numbers, point, points, name, names, enum:a|b, map, opacity
    doc: str
    default: Any = None
    required: bool = False

    def check(self, value, path: str, problems: list[str]):
        k = self.kind
        if k == "engine":  # a name, or {type, params} with the type's params
            typed = {"type": value} if isinstance(value, str) else value
            return _typed(typed, path, SCHEMA["engines"], "engine", problems)
        if k == "map":
            if not isinstance(value, Mapping):
                problems.append(f"{path}: expected a map, got {_what(value)}")
            return value
        if k.startswith("enum:"):
            choices = k[5:].split("|")
            if value not in choices:
                problems.append(f"{path}: expected one of {', '.join(choices)}, got {value!r}")
            return value
        if k in ("number", "int"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (k == "int" and not isinstance(value, int)):
                problems.append(f"{path}: expected {'an integer' if k == 'int' else 'a number'}, got {_what(value)}")
            elif value != value or value in (float("inf"), float("-inf")):
                problems.append(f"{path}: expected a finite number, got {value!r}")
            return value
        if k == "bool":
            if not isinstance(value, bool):
                problems.append(f"{path}: expected true or false, got {_what(value)}")
            return value
        if k in ("str", "name"):
            if not isinstance(value, str) or not value:
                problems.append(f"{path}: expected a {'name' if k == 'name' else 'string'}, got {_what(value)}")
            return value
        if k == "names":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                problems.append(f"{path}: expected a list of names, got {_what(value)}")
            return value
        if k in ("numbers", "point", "points", "opacity"):
            want = {"numbers": "a list of numbers", "point": "three numbers [x, y, z]",
                    "points": "a list of points [[x, y, z], ...]", "opacity": "a list of [value, opacity] pairs"}[k]
            if k == "numbers" and isinstance(value, (int, float)) and not isinstance(value, bool):
                value = [value]
            ok = isinstance(value, list) and len(value) > 0
            if ok and k in ("points", "opacity"):
                n = 3 if k == "points" else 2
                ok = all(isinstance(p, list) and len(p) == n and all(is_real(v) for v in p) for p in value)
                if ok and k == "opacity" and not all(0 <= p[1] <= 1 for p in value):
                    want, ok = "opacities in [0, 1]", False
            elif ok:
                ok = all(is_real(v) for v in value) and (k != "point" or len(value) == 3)
            if not ok:
                problems.append(f"{path}: expected {want}, got {value!r}")
            return value
        raise AssertionError(f"schema kind {k!r}")


def is_number(s) -> bool:
    """Whether `s` reads as a number ("1.0", 2): a constant where a field name may stand."""
    try:
        float(s)
        return True
    except (TypeError, ValueError):
        return False


def is_real(v) -> bool:
    """Whether `v` is a finite int or float (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _what(v) -> str:
    return f"{type(v).__name__} {v!r}" if not isinstance(v, (dict, list)) else type(v).__name__


P = Param
_COLOR_TABLE = {
    "name": P("str", "colormap: viridis, plasma, inferno, magma, cividis, coolwarm, grayscale", "viridis"),
    "opacity": P("opacity", "volume plots: [value, opacity] control points; opacity is reached over one world unit of length"),
}
_CAMERA = {
    "azimuth": P("number", "degrees around the up axis, from the default view", 0.0),
    "elevation": P("number", "degrees above the horizontal", 0.0),
    "zoom": P("number", "> 1 moves closer", 1.0),
    "position": P("point", "explicit eye position (then look_at is used)"),
    "look_at": P("point", "point the camera looks at (default: the data's centre)"),
    "up": P("point", "up direction (default [0, 1, 0]; the default view looks along -z)"),
    "fov": P("number", "vertical field of view in degrees", 30.0),
}

#: The schema: each section's entries, by type where a section has types.
SCHEMA: dict[str, Any] = {
    "top": {
        "pipelines": P("map", "named pipelines: each an ordered map of filters"),
        "scenes": P("map", "named scenes: plots and renders"),
        "extracts": P("map", "named extracts: data written beside the images"),
        "triggers": P("map", "named triggers: actions run only when a condition holds"),
        "engine": P("engine", "who runs the scenes' work: embedded (the simulation's ranks), or spark (Spark "
                    "tasks on the node's worker daemons); a name or {type, params}", "embedded"),
        "exceptions": P("enum:catch|forward", "catch: a failing pipeline is logged and reported by results(), "
                        "the simulation goes on; forward: execute raises", "catch"),
        "ghost_field": P("str", "element field marking ghost cells (non-zero) in each domain", "ascent_ghosts"),
        "params": P("map", "user parameters (name: number), steerable, reported by results()"),
        "steering": P("map", "where steering updates come from: {file: path} (a JSON object read when it changes)"),
        "log": P("enum:quiet|errors|info", "what the adaptor prints on stderr", "errors"),
        "profile": P("bool", "time every stage of execute (mesh, pipelines, ranges, contour, render, volume, "
                     "composite, png, extracts) into results()['timings']: CUDA events on GPUs, waiting for "
                     "each stage's work", False),
    },
    "filters": {
        "contour": {
            "field": P("name", "vertex field to contour (element fields are recentred)", required=True),
            "iso_values": P("numbers", "iso values (steerable)"),
            "levels": P("int", "number of iso values evenly inside the field's global range"),
        },
        "threshold": {
            "field": P("name", "field whose cells are kept", required=True),
            "min_value": P("number", "keep values >= this", float("-inf")),
            "max_value": P("number", "keep values <= this", float("inf")),
        },
        "eikonal": {
            "speed": P("str", "speed field name, or a constant such as '1.0'", "1.0"),
            "seeds": P("points", "source points in world coordinates", required=True),
            "output": P("name", "name of the arrival-time field it adds", "arrival_time"),
            "tol": P("number", "stop when a sweep changes no node by more than this", 1e-9),
            "max_iter": P("int", "most halo-synchronized sweeps", 10000),
        },
    },
    "plots": {
        "pseudocolor": {
            "pipeline": P("name", "pipeline whose surface is drawn (a contour or a threshold)", required=True),
            "field": P("name", "field coloured through the color table (default: the contoured field)"),
            "color_table": P("map", "colormap: {name}"),
            "min_value": P("number", "colour range low end (default: the field's global minimum)"),
            "max_value": P("number", "colour range high end (default: the field's global maximum)"),
        },
        "volume": {
            "field": P("name", "field ray cast", required=True),
            "pipeline": P("name", "pipeline whose output is ray cast (default: the simulation's mesh)"),
            "color_table": P("map", "colormap and opacity: {name, opacity: [[value, alpha], ...]}"),
            "min_value": P("number", "transfer function low end (default: global minimum)"),
            "max_value": P("number", "transfer function high end (default: global maximum)"),
        },
    },
    "color_table": _COLOR_TABLE,
    "render": {
        "image_width": P("int", "pixels", 512),
        "image_height": P("int", "pixels", 512),
        "image_prefix": P("str", "PNG path; %d-style formats take the step (out/frame_%04d -> out/frame_0007.png)"),
        "camera": P("map", "camera: azimuth/elevation/zoom about the data, or position/look_at/up/fov"),
        "bg_color": P("numbers", "background [r, g, b] (0..1)", [1.0, 1.0, 1.0]),
    },
    "camera": _CAMERA,
    "extracts": {
        "adios2": {
            "filename": P("str", "stream or file name", required=True),
            "engine": P("enum:BP5|SST", "BP5: a file; SST: a live stream", "BP5"),
            "scene": P("name", "scene or scene/render whose frames are written (default: the first render)"),
            "lossless": P("bool", "SST: wait for a viewer and for queue room (default: never wait, drop the "
                          "oldest frames)", False),
            "depth": P("bool", "also write the composited surface depth (float32)", False),
            "steering": P("bool", "SST: take steering from viewers on <filename>.steer (insitu view)", True),
        },
        "adios2_mesh": {
            "filename": P("str", "stream name; each rank writes <filename>.rank<r> (read by python -m adaptors.intransit)",
                          required=True),
            "engine": P("enum:SST|BP5", "SST: to analysis ranks in transit; BP5: files", "SST"),
            "fields": P("names", "fields to send (default: all)"),
            "lossless": P("bool", "SST: wait for the reader and for queue room (in transit nothing is dropped)",
                          True),
        },
        "hdf5": {
            "path": P("str", "file per step (%d-style formats take the step); one group per domain", required=True),
            "fields": P("names", "fields to write (default: all)"),
        },
    },
    "engines": {
        "embedded": {},
        "spark": {
            "master": P("str", "Spark master URL (local[N], local-cluster[...], spark://host:port); executors must "
                        "run on the simulation's nodes: blocks are handed to the daemons there", "local[2]"),
            "conf": P("map", "more Spark settings (name: value)"),
            "cpu_daemons": P("int", "CPU worker daemons per node where there is no GPU", 1),
            "timeout": P("number", "seconds a task or a rank waits for its worker daemon", 60.0),
            "npartitions": P("int", "partitions per render (default: Spark's default parallelism)"),
        },
    },
    "trigger": {
        "condition": P("str", "expression over reductions: max(field('T')) > 2.0, cycle % 10 == 0, ..."),
        "every": P("int", "fire every N steps"),
        "actions": P("names", "scenes and extracts this trigger runs (they then run only when it fires)",
                     required=True),
    },
}

_ASCENT_ACTIONS = {"add_pipelines": "pipelines", "add_scenes": "scenes", "add_extracts": "extracts",
                   "add_triggers": "triggers"}


def load(config) -> dict:
    """Read a configuration: a dict, a path to a YAML/JSON file, or YAML/JSON text.

    Returns the validated configuration with defaults filled in.

    Raises
    ------
    ConfigError
        Malformed text or file, or any schema problem (all of them, with paths).
    """
    if isinstance(config, (str, os.PathLike)):
        text, where = str(config), "configuration text"
        if os.path.exists(text) or str(text).endswith((".yaml", ".yml", ".json")):
            where = os.fspath(config)
            try:
                with open(where) as f:
                    text = f.read()
            except OSError as e:
                raise ConfigError([f"{where}: cannot read ({e.strerror})"]) from None
        try:
            import yaml

            config = yaml.safe_load(text) if text.strip() else {}
        except Exception as e:  # yaml.YAMLError carries the line and column
            raise ConfigError([f"{where}: not valid YAML/JSON: {e}"]) from None
    elif config is None:
        config = {}
    return validate(config)


def validate(config) -> dict:
    """Check a configuration against :data:`SCHEMA`; return it normalized with defaults.

    Raises
    ------
    ConfigError
        Listing every problem found, each with its path.
    """
    problems: list[str] = []
    if isinstance(config, list):
        config = _from_ascent_actions(config, problems)
    if not isinstance(config, Mapping):
        raise ConfigError([f"(top): expected a map of pipelines, scenes, extracts, triggers..., got {_what(config)}"])
    out = _params(config, SCHEMA["top"], "", problems)
    if isinstance(out.get("engine"), str):  # the default
        out["engine"] = {"type": out["engine"], "params": {}}
    out["pipelines"] = {name: _pipeline(p, f"pipelines/{name}", problems)
                        for name, p in _named(out.get("pipelines"), "pipelines", problems).items()}
    out["scenes"] = {name: _scene(s, f"scenes/{name}", out["pipelines"], problems)
                     for name, s in _named(out.get("scenes"), "scenes", problems).items()}
    out["extracts"] = {name: _typed(e, f"extracts/{name}", SCHEMA["extracts"], "extract", problems)
                       for name, e in _named(out.get("extracts"), "extracts", problems).items()}
    given_triggers, out["triggers"] = _named(out.get("triggers"), "triggers", problems), {}
    for name, t in given_triggers.items():
        path = f"triggers/{name}"
        t = _params(t, SCHEMA["trigger"], path, problems)
        if (t.get("condition") is None) == (t.get("every") is None):
            problems.append(f"{path}: give exactly one of condition or every")
        if t.get("every") is not None and isinstance(t["every"], int) and t["every"] < 1:
            problems.append(f"{path}/every: must be >= 1, got {t['every']}")
        if t.get("condition") is not None and isinstance(t["condition"], str):
            from .triggers import parse

            try:
                parse(t["condition"])
            except ValueError as e:
                problems.append(f"{path}/condition: {e}")
        for a in t.get("actions") or []:
            if a not in out["scenes"] and a not in out["extracts"]:
                problems.append(f"{path}/actions: unknown scene or extract {a!r}; "
                                f"known: {', '.join(sorted(out['scenes']) + sorted(out['extracts'])) or 'none'}")
        out["triggers"][name] = t
    for name, e in out["extracts"].items():
        sc = e.get("params", {}).get("scene")
        if sc is not None and sc.split("/")[0] not in out["scenes"]:
            problems.append(f"extracts/{name}/params/scene: unknown scene {sc!r}; known: "
                            f"{', '.join(sorted(out['scenes'])) or 'none'}")
    eng = out.get("engine") or {}
    if eng.get("type") == "spark":
        prm = eng["params"]
        if isinstance(prm.get("conf"), Mapping):
            for k, v in prm["conf"].items():
                if not isinstance(v, (str, int, float, bool)):
                    problems.append(f"engine/params/conf/{k}: expected a string or number, got {_what(v)}")
        for k in ("cpu_daemons", "npartitions"):
            if isinstance(prm.get(k), int) and prm[k] < 1:
                problems.append(f"engine/params/{k}: must be >= 1, got {prm[k]}")
        if is_real(prm.get("timeout")) and prm["timeout"] <= 0:
            problems.append(f"engine/params/timeout: must be > 0 seconds, got {prm['timeout']}")
    params = out.get("params") or {}
    for k, v in params.items() if isinstance(params, Mapping) else ():
        if not is_real(v):
            problems.append(f"params/{k}: expected a number, got {_what(v)}")
    steering = out.get("steering")
    if isinstance(steering, Mapping):
        for k in steering:
            if k != "file":
                problems.append(f"steering: unknown key {k!r}; known: file")
        if "file" in steering and not isinstance(steering["file"], str):
            problems.append(f"steering/file: expected a path, got {_what(steering['file'])}")
    if problems:
        raise ConfigError(problems)
    return out


def _from_ascent_actions(actions: list, problems: list[str]) -> dict:
    out: dict = {}
    for i, a in enumerate(actions):
        key = a.get("action") if isinstance(a, Mapping) else None
        if key not in _ASCENT_ACTIONS:
            problems.append(f"actions[{i}]: unknown action {key!r}; known: {', '.join(_ASCENT_ACTIONS)}")
            continue
        section = _ASCENT_ACTIONS[key]
        out.setdefault(section, {}).update(a.get(section) or {})
    return out


def _named(section, path: str, problems: list[str]) -> dict:
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        return {}  # already reported as "expected a map"
    return {str(k): v for k, v in section.items()}


def _params(given, schema: Mapping[str, Param], path: str, problems: list[str]) -> dict:
    where = path or "(top)"
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        problems.append(f"{where}: expected a map, got {_what(given)}")
        return {k: p.default for k, p in schema.items()}
    out = {}
    for k in given:
        if k not in schema:
            problems.append(f"{where}: unknown key {k!r}; known: {', '.join(schema)}")
    for k, p in schema.items():
        sub = f"{path}/{k}" if path else k
        if k in given and given[k] is not None:
            out[k] = p.check(given[k], sub, problems)
        elif p.required:
            problems.append(f"{where}: missing required key {k!r} ({p.doc})")
        else:
            out[k] = p.default
    return out


def _typed(entry, path: str, types: Mapping[str, Mapping], what: str, problems: list[str]) -> dict:
    if not isinstance(entry, Mapping):
        problems.append(f"{path}: expected a map with a type, got {_what(entry)}")
        return {}
    t = entry.get("type")
    if t not in types:
        problems.append(f"{path}/type: unknown {what} {t!r}; known: {', '.join(types)}")
        return {}
    for k in entry:
        if k not in ("type", "params"):
            problems.append(f"{path}: unknown key {k!r}; known: type, params")
    return {"type": t, "params": _params(entry.get("params"), types[t], f"{path}/params", problems)}


def _pipeline(p, path: str, problems: list[str]) -> dict:
    if not isinstance(p, Mapping) or not p:
        problems.append(f"{path}: expected a map of filters (name: {{type, params}}), got {_what(p)}")
        return {}
    out = {}
    for fname, f in p.items():
        out[str(fname)] = _typed(f, f"{path}/{fname}", SCHEMA["filters"], "filter", problems)
        prm = out[str(fname)].get("params", {})
        if out[str(fname)].get("type") == "contour" and (prm.get("iso_values") is None) == (prm.get("levels") is None):
            problems.append(f"{path}/{fname}/params: give exactly one of iso_values or levels")
        if out[str(fname)].get("type") == "contour" and isinstance(prm.get("levels"), int) and prm["levels"] < 1:
            problems.append(f"{path}/{fname}/params/levels: must be >= 1, got {prm['levels']}")
    return out


def _scene(s, path: str, pipelines: Mapping, problems: list[str]) -> dict:
    s = s if isinstance(s, Mapping) else {}
    for k in s:
        if k not in ("plots", "renders", "image_prefix"):
            problems.append(f"{path}: unknown key {k!r}; known: plots, renders, image_prefix")
    plots = {}
    given = s.get("plots")
    if not isinstance(given, Mapping) or not given:
        problems.append(f"{path}/plots: expected a map of plots (name: {{type, ...}}), got {_what(given)}")
        given = {}
    for name, p in given.items():
        ppath = f"{path}/plots/{name}"
        if not isinstance(p, Mapping) or p.get("type") not in SCHEMA["plots"]:
            t = p.get("type") if isinstance(p, Mapping) else None
            problems.append(f"{ppath}/type: unknown plot {t!r}; known: {', '.join(SCHEMA['plots'])}")
            continue
        body = {k: v for k, v in p.items() if k != "type"}
        q = _params(body, SCHEMA["plots"][p["type"]], ppath, problems)
        q["type"] = p["type"]
        q["color_table"] = _params(q.get("color_table"), SCHEMA["color_table"], f"{ppath}/color_table", problems)
        if q.get("pipeline") is not None and q["pipeline"] not in pipelines:
            problems.append(f"{ppath}/pipeline: unknown pipeline {q['pipeline']!r}; known: "
                            f"{', '.join(sorted(pipelines)) or 'none'}")
        plots[str(name)] = q
    renders = {}
    given = s.get("renders")
    if given is None:
        given = {"default": {"image_prefix": s.get("image_prefix") or f"{path.split('/')[-1]}_%04d"}}
    if not isinstance(given, Mapping):
        problems.append(f"{path}/renders: expected a map of renders, got {_what(given)}")
        given = {}
    for name, r in given.items():
        rpath = f"{path}/renders/{name}"
        q = _params(r, SCHEMA["render"], rpath, problems)
        q["camera"] = _params(q.get("camera"), SCHEMA["camera"], f"{rpath}/camera", problems)
        for k in ("image_width", "image_height"):
            if isinstance(q.get(k), int) and not 1 <= q[k] <= 16384:
                problems.append(f"{rpath}/{k}: must be 1..16384 pixels, got {q[k]}")
        if q.get("bg_color") is not None and isinstance(q["bg_color"], list) and len(q["bg_color"]) not in (3, 4):
            problems.append(f"{rpath}/bg_color: expected [r, g, b], got {q['bg_color']!r}")
        renders[str(name)] = q
    return {"plots": plots, "renders": renders}


def describe() -> str:
    """The configuration reference in Markdown, generated from :data:`SCHEMA`."""
    lines = ["# Adaptor configuration reference", "",
             "Generated from `adaptors.config.SCHEMA` by `adaptors.config.describe()`; "
             "a test keeps this file in sync.", ""]

    def table(title: str, spec: Mapping[str, Param]) -> None:
        lines.extend([f"## {title}", "", "| key | kind | default | meaning |", "| --- | --- | --- | --- |"])
        for k, p in spec.items():
            d = "required" if p.required else ("" if p.default is None else f"`{json.dumps(p.default)}`")
            lines.append(f"| `{k}` | {p.kind} | {d} | {p.doc} |")
        lines.append("")

    table("Top level", SCHEMA["top"])
    for t, spec in SCHEMA["filters"].items():
        table(f"Filter `{t}` (pipelines/NAME/FILTER: {{type: {t}, params: ...}})", spec)
    for t, spec in SCHEMA["plots"].items():
        table(f"Plot `{t}` (scenes/NAME/plots/PLOT: {{type: {t}, ...}})", spec)
    table("Color table (plots/PLOT/color_table)", SCHEMA["color_table"])
    table("Render (scenes/NAME/renders/RENDER)", SCHEMA["render"])
    table("Camera (renders/RENDER/camera)", SCHEMA["camera"])
    for t, spec in SCHEMA["extracts"].items():
        table(f"Extract `{t}` (extracts/NAME: {{type: {t}, params: ...}})", spec)
    table("Trigger (triggers/NAME)", SCHEMA["trigger"])
    for t, spec in SCHEMA["engines"].items():
        if spec:
            table(f"Engine `{t}` (engine: {t}, or engine: {{type: {t}, params: ...}})", spec)
    return "\n".join(lines)
