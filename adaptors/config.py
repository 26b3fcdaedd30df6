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
import sys
from typing import Any, Mapping

from render.camera import from_settings as camera_from_settings
from render import colormap as _colormap

from .errors import ConfigError

__all__ = ["MAX_ISO_VALUES", "Param", "SCHEMA", "UNSUPPORTED_FILTERS", "camera_problems", "check_steering", "describe",
           "is_number", "is_real", "pipeline_inputs", "pipeline_order",
           "load", "validate"]


@dataclasses.dataclass(frozen=True)
class Param:
    """One configuration key: its kind, default, meaning and accepted range.

    ``lo``/``hi`` bound a number (each element of a list of numbers); ``lo_open``/``hi_open``
    exclude the bound itself; ``size`` is the (fewest, most) items of a list; ``unit`` is
    named in the documentation and in error messages.
    """

    kind: str  # number, int, bool, str, numbers, point, direction, points, name, names, enum:a|b, map, opacity,
    # colormap (render.colormap's names, resolved), control_points (Ascent's colour table points)
    doc: str
    default: Any = None
    required: bool = False
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    size: tuple[int, int] | None = None
    unit: str = ""

    def accepts(self) -> str:
        """The range in words ("in (0, 180) degrees", "1..16384 pixels", "at most 256 items"), or ""."""
        lo, hi, unit = self.lo, self.hi, f" {self.unit}" if self.unit else ""
        if lo is not None and hi is not None:
            if self.kind == "int" and not (self.lo_open or self.hi_open):
                text = f"{lo}..{hi}{unit}"
            else:
                text = f"in {'(' if self.lo_open else '['}{lo:g}, {hi:g}{')' if self.hi_open else ']'}{unit}"
        elif lo is not None:
            text = f"{'>' if self.lo_open else '>='} {lo:g}{unit}"
        elif hi is not None:
            text = f"{'<' if self.hi_open else '<='} {hi:g}{unit}"
        else:
            text = ""
        if self.size is not None:
            items = f"{self.size[0]}..{self.size[1]} items" if self.size[0] > 1 else f"at most {self.size[1]} items"
            text = f"{text}, {items}" if text else items
        return text

    def _in_range(self, v) -> bool:
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return not (self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi)))

    def check(self, value, path: str, problems: list[str]):
        """Check `value` at `path`; append each problem to `problems`; return it normalized."""
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
            if not isinstance(value, str) or value not in choices:
                problems.append(f"{path}: expected one of {', '.join(choices)}, got {_short(value)}")
            return value
        if k in ("number", "int"):
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or (k == "int" and not isinstance(value, int))):
                problems.append(f"{path}: expected {'an integer' if k == 'int' else 'a number'}, got {_what(value)}")
            elif not is_real(value):
                problems.append(f"{path}: expected a finite number, got {_short(value)}")
            elif not self._in_range(value):
                problems.append(f"{path}: must be {self.accepts()}, got {_short(value)}")
            return value
        if k == "bool":
            if value in ("true", "false"):  # Ascent writes its booleans as strings
                return value == "true"
            if not isinstance(value, bool):
                problems.append(f"{path}: expected true or false, got {_what(value)}")
            return value
        if k == "colormap":
            try:
                return _colormap.resolve(value)
            except ValueError as e:
                problems.append(f"{path}: {str(e).removeprefix('colormap name: ')}")
            return value
        if k == "control_points":
            return _control_points(value, path, problems)
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
        if k in ("point", "direction") and isinstance(value, Mapping) and value and set(value) <= {"x", "y", "z"}:
            value = [value.get(a, 0.0) for a in "xyz"]  # Ascent writes points as {x, y, z}
        if k in ("numbers", "point", "direction", "points", "opacity"):
            want = {"numbers": "a list of finite numbers", "point": "three finite numbers [x, y, z]",
                    "direction": "three finite numbers [x, y, z], not all zero",
                    "points": "a list of points [[x, y, z], ...]", "opacity": "a list of [value, opacity] pairs"}[k]
            if k == "numbers" and isinstance(value, (int, float)) and not isinstance(value, bool):
                value = [value]
            if isinstance(value, tuple):
                value = list(value)
            ok = isinstance(value, list) and len(value) > 0
            if ok and self.size is not None and not self.size[0] <= len(value) <= self.size[1]:
                problems.append(f"{path}: expected {self.accepts()}, got {len(value)}")
                return value
            if ok and k in ("points", "opacity"):
                n = 3 if k == "points" else 2
                ok = all(isinstance(p, (list, tuple)) and len(p) == n and all(is_real(v) for v in p) for p in value)
                if ok and k == "opacity" and not all(0 <= p[1] <= 1 for p in value):
                    want, ok = "opacities in [0, 1]", False
            elif ok:
                ok = all(is_real(v) for v in value) and (k in ("numbers",) or len(value) == 3)
                if ok and k == "direction" and not any(value):
                    ok = False
                if ok and not all(self._in_range(v) for v in value):
                    want, ok = f"numbers {self.accepts()}", False
            if not ok:
                problems.append(f"{path}: expected {want}, got {_short(value)}")
            return value
        raise AssertionError(f"schema kind {k!r}")


def is_number(s) -> bool:
    """Whether `s` reads as a number ("1.0", 2): a constant where a field name may stand."""
    try:
        float(s)
        return True
    except (TypeError, ValueError, OverflowError):
        return False


def is_real(v) -> bool:
    """Whether `v` is an int or float (not a bool) that is a finite float: a 400-digit
    integer is not (``float()`` of it overflows)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    # Python compares a huge int with a float exactly, without converting it.
    return v == v and abs(v) <= sys.float_info.max


def _what(v) -> str:
    return f"{type(v).__name__} {_short(v)}" if not isinstance(v, (dict, list)) else type(v).__name__


def _short(v, most: int = 80) -> str:
    """repr(v) cut to `most` characters: a hostile value does not flood the message."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10 ** 40:
        return f"an integer of about {int(abs(v).bit_length() * 0.30103) + 1} digits"
    if isinstance(v, (list, tuple)) and len(v) > 16:
        v = list(v[:16])
        return repr(v)[:-1][:most] + ", ...]"
    try:
        r = repr(v)
    except ValueError:  # an int past sys.get_int_max_str_digits() inside a container
        return f"a {type(v).__name__} holding a huge integer"
    return r if len(r) <= most else r[:most - 3] + "..."


P = Param

#: Most iso values one contour draws (each is a marching-cubes pass over every block), in the
#: configuration and in steering alike.
MAX_ISO_VALUES = 256
#: Most control points of an opacity transfer function.
MAX_OPACITY_POINTS = 256

_COLOR_TABLE = {
    "name": P("colormap", "colour table: insitu's maps (" + ", ".join(n for n in _colormap.NAMES if n not in
              _colormap.PRESETS) + ") or VTK-m's presets as Ascent names them (" + ", ".join(_colormap.PRESETS)
              + "), any case, spaces ignored; default Cool to Warm, as Ascent's renderers", "Cool to Warm"),
    "control_points": P("control_points", "Ascent's control points, positions in [0, 1] of the colour range: a "
                        "list of {type: rgb, position, color: [r, g, b]} (or r, g, b keys) and {type: alpha, "
                        "position, alpha}, or {position: [...], r: [...], g: [...], b: [...], a: [...]}. Without a "
                        "name the rgb points replace the colours of Ascent's default table (VTK-m's Cool to Warm: "
                        "interpolated in its diverging space, white between distinct hues); with a name they are "
                        "added to its points (in its colour space). Alpha points are a volume plot's opacity over "
                        "the colour range (reached over one world unit, as opacity)"),
    "reverse": P("bool", "the colours reversed, alphas kept (without a name: Ascent's default table's, Cool to "
                 "Warm; Ascent's \"true\"/\"false\" accepted)", False),
    "annotation": P("bool", "Ascent's colour bar switch: accepted; insitu draws the legend where the render's "
                    "annotations ask"),
    "opacity": P("opacity", "volume plots: [value, opacity] control points; opacity is reached over one world "
                 "unit of length", size=(1, MAX_OPACITY_POINTS)),
}
# A camera's keys taken together must also make a camera (position != look_at, up not along
# the viewing direction): camera_problems() checks that, at initialize and for every steering update.
_CAMERA = {
    "azimuth": P("number", "degrees around the up axis, from the default view", 0.0, lo=-360, hi=360, unit="degrees"),
    "elevation": P("number", "degrees above the horizontal", 0.0, lo=-90, hi=90, unit="degrees"),
    "zoom": P("number", "> 1 moves closer", 1.0, lo=1e-6, hi=1e6),
    "position": P("point", "explicit eye position (then look_at is used)"),
    "look_at": P("point", "point the camera looks at (default: the data's centre); not position"),
    "up": P("direction", "up direction (default [0, 1, 0]; the default view looks along -z); not along the "
            "viewing direction"),
    "fov": P("number", "vertical field of view", 30.0, lo=0, hi=180, lo_open=True, hi_open=True, unit="degrees"),
    "xpan": P("number", "Ascent's pan: the view moved sideways by this fraction of the image's half-width at the "
              "look-at distance (positive: the data moves right)", 0.0, lo=-1e6, hi=1e6),
    "ypan": P("number", "the same upwards, a fraction of the half-height", 0.0, lo=-1e6, hi=1e6),
    "near_plane": P("number", "near clip distance (default: fitted to the data)", lo=0, lo_open=True),
    "far_plane": P("number", "far clip distance, beyond near_plane (default: fitted to the data)", lo=0,
                   lo_open=True),
}
_ISO_VALUES = P("numbers", "iso values (steerable)", size=(1, MAX_ISO_VALUES))
_USER_PARAM = P("number", "a user parameter's value")

#: The schema: each section's entries, by type where a section has types.
SCHEMA: dict[str, Any] = {
    "top": {
        "pipelines": P("map", "named pipelines: each an ordered map of filters"),
        "scenes": P("map", "named scenes: plots and renders"),
        "extracts": P("map", "named extracts: data written beside the images"),
        "triggers": P("map", "named triggers: actions run only when a condition holds (insitu's form, or Ascent's "
                      "{params: {condition, actions_file | actions}})"),
        "queries": P("map", "named queries (Ascent's add_queries): {params: {expression, name}}, evaluated every "
                     "executed cycle in order; results()['queries'] holds the newest values"),
        "engine": P("engine", "who runs the scenes' work: embedded (the simulation's ranks), or spark (Spark "
                    "tasks on the node's worker daemons); a name or {type, params}", "embedded"),
        "exceptions": P("enum:catch|forward", "catch: a failing pipeline is logged and reported by results(), "
                        "the simulation goes on; forward: execute raises", "catch"),
        "ghost_field": P("str", "element field marking ghost cells (non-zero) in each domain", "ascent_ghosts"),
        "params": P("map", "user parameters (name: number), steerable, reported by results()"),
        "steering": P("map", "where steering updates come from: {file: path} (a JSON object read when it changes)"),
        "log": P("enum:quiet|errors|info", "what the adaptor logs on stderr (insitu.log.enable) when the "
                 "application configured no logging handlers of its own; info also says when kernels compile",
                 "errors"),
        "timeout": P("number", "how long rank 0 waits for the other ranks in each collective of a step (the "
                     "others wait up to twice as long for rank 0); then the step fails on every rank with a "
                     "PeerTimeoutError naming the ranks that did not come", 60.0, lo=0, lo_open=True,
                     unit="seconds"),
        "save_info": P("str", "after each executed step rank 0 writes what the adaptor knows (the configuration, "
                       "results(), the frames written) as YAML to this path; %d-style formats take the step. Ascent's "
                       "save_info action sets it (its file_name, default out_ascent_info_%06d.yaml)"),
        "profile": P("bool", "time every stage of execute (mesh, pipelines, ranges, contour, render, volume, "
                     "composite, png, extracts; with engine: spark handover, spark and, within it, daemons) into "
                     "results()['timings']: CUDA events on GPUs, waiting for each stage's work", False),
    },
    # What Adaptor.steer, a steering file and viewers may change: the same Params as the
    # configuration's keys they override, so both accept exactly the same values.
    "steering": {
        "camera": P("map", "camera keys (see Camera) for every render; a key set to null, or camera: null, goes "
                    "back to the configuration's"),
        "iso_values": dataclasses.replace(_ISO_VALUES, doc="a list for every contour, or {pipeline: [values]}"),
        "colormap": dataclasses.replace(_COLOR_TABLE["name"], doc="colormap of every plot", default=None),
        "transfer_function": dataclasses.replace(_COLOR_TABLE["opacity"], doc="opacity control points "
                                                 "[[value, alpha], ...] of every volume plot"),
        "params": P("map", "user parameters {name: number} (each a finite number)"),
        "pause": P("bool", "skip the in-situ work while true"),
        "stop": P("bool", "ask the simulation to stop (results()['stop'])"),
    },
    "filters": {
        "contour": {
            "field": P("name", "vertex field to contour (element fields are recentred)", required=True),
            "iso_values": _ISO_VALUES,
            "levels": P("int", "number of iso values evenly inside the field's global range", lo=1,
                        hi=MAX_ISO_VALUES),
        },
        "threshold": {
            "field": P("name", "field whose cells are kept", required=True),
            "min_value": P("number", "keep values >= this", float("-inf")),
            "max_value": P("number", "keep values <= this", float("inf")),
        },
        "slice": {
            "point": P("point", "a point of the plane ({x, y, z} or [x, y, z])", [0.0, 0.0, 0.0]),
            "normal": P("direction", "the plane's normal ({x, y, z} or [x, y, z])", [0.0, 0.0, 1.0]),
        },
        "3slice": {
            "x_offset": P("number", "the x plane's place in the data bounds, -1 (low end) .. 1 (high end)", 0.0,
                          lo=-1, hi=1),
            "y_offset": P("number", "the y plane's place, -1 .. 1", 0.0, lo=-1, hi=1),
            "z_offset": P("number", "the z plane's place, -1 .. 1", 0.0, lo=-1, hi=1),
        },
        "clip": {
            "sphere": P("map", "{center: {x, y, z}, radius}: the outside is kept (inside with invert)"),
            "box": P("map", "{min: {x, y, z}, max: {x, y, z}}: the outside is kept (inside with invert)"),
            "plane": P("map", "{point: {x, y, z}, normal: {x, y, z}}: the side the normal points to is kept"),
            "invert": P("bool", "keep the other side", False),
            "topology": P("str", "the topology clipped (a domain's fields name the one drawn)"),
        },
        "clip_with_field": {
            "field": P("name", "vertex field (element fields are recentred)", required=True),
            "clip_value": P("number", "values above it are kept (below with invert)", required=True),
            "invert": P("bool", "keep the values below", False),
        },
        "isovolume": {
            "field": P("name", "vertex field (element fields are recentred)", required=True),
            "min_value": P("number", "keep values >= this", required=True),
            "max_value": P("number", "keep values <= this", required=True),
        },
        "vector_magnitude": {
            "field": P("name", "vector field (an mcarray)", required=True),
            "output_name": P("str", "name of the field it adds (default <field>_magnitude)"),
        },
        "vector_component": {
            "field": P("name", "vector field (an mcarray)", required=True),
            "component": P("int", "which component, from 0", required=True, lo=0),
            "output_name": P("str", "name of the field it adds (default <field>_<component>)"),
        },
        "gradient": {
            "field": P("name", "scalar field", required=True),
            "output_name": P("str", "name of the vector field it adds (default <field>_gradient; its components "
                             "<name>/x, /y, /z)"),
        },
        "recenter": {
            "field": P("name", "field to move", required=True),
            "association": P("enum:vertex|element", "where it goes", required=True),
            "output_name": P("str", "name of the field it adds (default: replaces the field)"),
        },
        "eikonal": {
            "speed": P("str", "speed field name, or a constant such as '1.0'", "1.0"),
            "seeds": P("points", "source points in world coordinates", required=True),
            "output": P("name", "name of the arrival-time field it adds", "arrival_time"),
            "tol": P("number", "stop when a sweep changes no node by more than this", 1e-9, lo=0),
            "max_iter": P("int", "most halo-synchronized sweeps", 10000, lo=1),
        },
        "log": {
            "field": P("name", "field whose natural logarithm is taken", required=True),
            "output_name": P("str", "name of the field it adds (default log(<field>))"),
            "clamp_min_value": P("number", "values below it are raised to it first (without it, log of 0 or less "
                                 "gives -inf or nan, as VTK-m's)"),
        },
        "log2": {
            "field": P("name", "field whose base-2 logarithm is taken", required=True),
            "output_name": P("str", "name of the field it adds (default log2(<field>))"),
            "clamp_min_value": P("number", "values below it are raised to it first"),
        },
        "log10": {
            "field": P("name", "field whose base-10 logarithm is taken", required=True),
            "output_name": P("str", "name of the field it adds (default log10(<field>))"),
            "clamp_min_value": P("number", "values below it are raised to it first"),
        },
        "composite_vector": {
            "field1": P("name", "the vector's x component (a scalar field)", required=True),
            "field2": P("name", "its y component", required=True),
            "field3": P("name", "its z component (without it: a 2-component vector)"),
            "output_name": P("name", "name of the float64 vector field it adds (its components <name>/x, /y, /z)",
                             required=True),
        },
        "divergence": {
            "field": P("name", "vector field (an mcarray; element fields recentred)", required=True),
            "output_name": P("str", "name of the vertex field it adds", "divergence"),
            "use_cell_gradient": P("enum:true|false", "Ascent's cell-gradient option: only point gradients are "
                                   "computed (true is refused)", "false"),
        },
        "vorticity": {
            "field": P("name", "vector field (an mcarray; element fields recentred)", required=True),
            "output_name": P("str", "name of the vertex vector field it adds (the curl; components <name>/x, /y, "
                             "/z)", "vorticity"),
            "use_cell_gradient": P("enum:true|false", "only point gradients (true is refused)", "false"),
        },
        "qcriterion": {
            "field": P("name", "vector field (an mcarray; element fields recentred)", required=True),
            "output_name": P("str", "name of the vertex field it adds: (|Omega|^2 - |S|^2) / 2 of the velocity "
                             "gradient", "qcriterion"),
            "use_cell_gradient": P("enum:true|false", "only point gradients (true is refused)", "false"),
        },
    },
    "plots": {
        "pseudocolor": {
            "pipeline": P("name", "pipeline whose output is drawn: a contour's or slice's surface, or the outer "
                          "surface of the cells a threshold, clip or isovolume keeps (default: the simulation's "
                          "mesh itself, its outer surface)"),
            "field": P("name", "field coloured through the color table (default: the contoured field; required "
                       "without a contour)"),
            "color_table": P("map", "colormap: {name}"),
            "min_value": P("number", "colour range low end (default: the field's global minimum)"),
            "max_value": P("number", "colour range high end (default: the field's global maximum)"),
        },
        "mesh": {
            "pipeline": P("name", "pipeline whose output's cells are drawn (a threshold's, clip's, ...; not a "
                          "contour's or slice's surface; default: the simulation's mesh): the edges of the outer "
                          "surface's cells, one pixel wide, in the render's fg_color, over the other plots by depth"),
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
        "image_width": P("int", "image width", 512, lo=1, hi=16384, unit="pixels"),
        "image_height": P("int", "image height", 512, lo=1, hi=16384, unit="pixels"),
        "image_prefix": P("str", "PNG path; %d-style formats take the step (out/frame_%04d -> out/frame_0007.png); "
                          "without a %, Ascent's rule: the step appended as is (out/image_ -> out/image_7.png)"),
        "image_name": P("str", "Ascent's exact PNG path without the extension (.png is appended; the same file "
                        "every step); instead of image_prefix"),
        "camera": P("map", "camera: azimuth/elevation/zoom about the data, or position/look_at/up/fov"),
        "bg_color": P("numbers", "background [r, g, b] or [r, g, b, a]", [1.0, 1.0, 1.0], lo=0, hi=1, size=(3, 4)),
        "annotations": P("bool", "draw the colour legend (the first plot's field, range, colormap), the step and "
                         "time into the frame (Ascent's strings \"true\"/\"false\" accepted). Ascent draws them "
                         "by default; insitu only when asked", False),
        "fg_color": P("numbers", "colour of the annotations [r, g, b] (default: black on a light bg_color, white "
                      "on a dark one)", lo=0, hi=1, size=(3, 3)),
        "type": P("enum:default|cinema", "cinema: Ascent's Cinema database (spec A): phi x theta views about the "
                  "data's centre each executed step, written to cinema_databases/<db_name>/<n>.0/<phi>_<theta>_"
                  "<db_name>.png with info.json, info.js and data.csv (camera: only fov and zoom apply)", "default"),
        "phi": P("int", "cinema: divisions of the azimuth (phi = -180 + 360 i / phi degrees)", lo=1, hi=360),
        "theta": P("int", "cinema: divisions of the polar angle (theta = 180 j / theta degrees)", lo=1, hi=180),
        "db_name": P("str", "cinema: the database's name (a directory under cinema_databases)"),
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
            "deadline": P("number", "SST: the most seconds a lossless write or the stream's close waits for a "
                          "viewer; past it the step fails with ReaderTimeoutError naming the viewer, which is "
                          "dropped", 30.0, lo=0, lo_open=True, unit="seconds"),
        },
        "adios2_mesh": {
            "filename": P("str", "stream name: one stream of global arrays for all ranks, written by rank 0 "
                          "(read by python -m adaptors.intransit; ParaView opens it: VTX and Fides attributes)",
                          required=True),
            "engine": P("enum:SST|BP5", "SST: to analysis ranks in transit; BP5: files", "SST"),
            "fields": P("names", "fields to send (default: all)"),
            "lossless": P("bool", "SST: wait for the reader and for queue room (in transit nothing is dropped)",
                          True),
            "deadline": P("number", "SST: the most seconds a lossless writer waits for the analysis reader (to "
                          "connect, to take a step off the full queue, to release its steps at close); past it "
                          "the step fails with ReaderTimeoutError naming the reader, which is dropped. Must "
                          "exceed the analysis's time per step", 30.0, lo=0, lo_open=True, unit="seconds"),
        },
        "hdf5": {
            "path": P("str", "file per step (%d-style formats take the step); one group per domain", required=True),
            "fields": P("names", "fields to write (default: all)"),
        },
        "relay": {
            "path": P("str", "Blueprint output prefix (Ascent's relay extract): <path>.cycle_NNNNNN.root and the "
                      "domain files in <path>.cycle_NNNNNN/ (one domain in all: inside the .root), as Conduit's "
                      "relay::io::blueprint::save_mesh writes them; VisIt and load_mesh open the .root",
                      required=True),
            "protocol": P("enum:hdf5|yaml|json|blueprint|blueprint/mesh/hdf5|blueprint/mesh/yaml|blueprint/mesh/json",
                          "file format (blueprint: hdf5); yaml and json keep values, not dtypes", "hdf5"),
            "fields": P("names", "fields to write (default: all; ascent_ghosts always)"),
            "topologies": P("names", "topologies whose fields are all written, besides `fields` (a uniform grid's "
                            "is mesh)"),
            "num_files": P("int", "files the domains are spread over (0 or more than the domains: one each)",
                           lo=0),
        },
    },
    "engines": {
        "embedded": {},
        "spark": {
            "master": P("str", "Spark master URL (local[N], local-cluster[...], spark://host:port); executors must "
                        "run on the simulation's nodes: blocks are handed to the daemons there (on several hosts: "
                        "network: true)", "local[2]"),
            "conf": P("map", "more Spark settings (name: value)"),
            "cpu_daemons": P("int", "CPU worker daemons per node where there is no GPU", 1, lo=1),
            "timeout": P("number", "how long a task or a rank waits for its worker daemon", 60.0, lo=0,
                         lo_open=True, unit="seconds"),
            "npartitions": P("int", "partitions per render (default: Spark's default parallelism)", lo=1),
            "network": P("bool", "ranks and executors on several hosts: every rank's daemon serves its blocks "
                         "over TCP, records name their host, the drawing tasks connect to the driver over TCP "
                         "and take a host's blocks where they run there, else fetch them", False),
        },
    },
    "trigger": {
        "condition": P("str", "expression over reductions: max(field('T')) > 2.0, cycle % 10 == 0, ... "
                       "(at most 1000 characters; constant parts are computed when the configuration is read)"),
        "every": P("int", "fire every N steps", lo=1),
        "actions": P("names", "scenes and extracts this trigger runs (they then run only when it fires)",
                     required=True),
    },
    # Documentation only: adaptors.triggers.from_ascent reads this form into the one above.
    "ascent_trigger": {
        "condition": P("str", "an expression of Ascent's language (adaptors.expressions): cycle() % 100 == 0, "
                       "max_pressure > crazy_value, history(entropy, relative_index = 1) - entropy > 10",
                       required=True),
        "actions_file": P("str", "a YAML/JSON file of Ascent actions (add_pipelines, add_scenes, add_extracts) run "
                          "when the condition holds; or actions"),
        "actions": P("map", "the same actions, inline (a list); exactly one of actions_file or actions"),
    },
    "query": {
        "expression": P("str", "an expression of Ascent's language: max(field('T')), "
                        "entropy(histogram(field('T'), num_bins=64)), two + 1 (earlier queries by name), "
                        "x - history(x, relative_index = 1)", required=True),
        "name": P("name", "the name later expressions and results()['queries'] know its value by", required=True),
    },
}

#: Ascent's filters insitu does not run: the reason, given in the configuration error.
UNSUPPORTED_FILTERS: dict[str, str] = {
    "exaslice": "not supported by insitu (use slice or 3slice)",
    "auto_slice": "not supported by insitu (use slice)",
    "transform": "not supported by insitu",
    "particle_advection": "not supported by insitu",
    "streamline": "not supported by insitu",
    "warpx_streamline": "not supported by insitu",
    "sample": "not supported by insitu",
    "sample_grid": "not supported by insitu",
    "mir": "not supported by insitu",
    "add_mpi_ranks": "not supported by insitu",
    "add_domain_ids": "not supported by insitu",
    "partition": "not supported by insitu",
    "revolve": "not supported by insitu",
    "extrude": "not supported by insitu",
    "histsampling": "not supported by insitu",
    "triangulate": "not supported by insitu",
    "project_2d": "not supported by insitu",
    "dray_project_2d": "not supported by insitu",
    "dray_reflect": "not supported by insitu",
    "lagrangian": "not supported by insitu",
    "uniform_grid": "not supported by insitu",
}


def pipeline_inputs(filters: Mapping[str, Mapping]) -> list[str]:
    """The pipelines whose outputs a pipeline's filters start from (their ``input`` key)."""
    return [f["input"] for f in filters.values() if isinstance(f, Mapping) and f.get("input")]


def pipeline_order(pipelines: Mapping[str, Mapping[str, Mapping]], wanted=None) -> list[str]:
    """Pipelines in an order where each comes after the pipelines it starts from: `wanted`
    (default: all) and every pipeline they read, in configuration order where free.

    Raises
    ------
    ValueError
        A cycle ("pipelines pl1 -> pl2 -> pl1 form a cycle") or an unknown input.
    """
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: placed

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cyc = path[path.index(name):] + [name]
            raise ValueError(f"pipelines {' -> '.join(cyc)} form a cycle (each starts from the next one's output)")
        if name not in pipelines:
            raise ValueError(f"pipelines/{path[-1]}: starts from unknown pipeline {name!r}; known: "
                             f"{', '.join(pipelines) or 'none'}")
        state[name] = 1
        for dep in pipeline_inputs(pipelines[name]):
            visit(dep, path + [name])
        state[name] = 2
        order.append(name)

    for name in pipelines:
        if wanted is None or name in wanted:
            visit(name, [])
    return order


_ASCENT_ACTIONS = {"add_pipelines": "pipelines", "add_scenes": "scenes", "add_extracts": "extracts",
                   "add_triggers": "triggers", "add_queries": "queries"}


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
    from .triggers import from_ascent

    from_ascent(out, _from_ascent_actions, problems)
    if isinstance(out.get("engine"), str):  # the default
        out["engine"] = {"type": out["engine"], "params": {}}
    out["pipelines"] = {name: _pipeline(p, f"pipelines/{name}", problems)
                        for name, p in _named(out.get("pipelines"), "pipelines", problems).items()}
    if out["pipelines"]:
        try:
            pipeline_order(out["pipelines"])
        except ValueError as e:
            problems.append(str(e))
    out["scenes"] = {name: _scene(s, f"scenes/{name}", out["pipelines"], problems)
                     for name, s in _named(out.get("scenes"), "scenes", problems).items()}
    out["extracts"] = {name: _typed(e, f"extracts/{name}", SCHEMA["extracts"], "extract", problems)
                       for name, e in _named(out.get("extracts"), "extracts", problems).items()}
    from .queries import validate as _queries
    from .triggers import check as _check_condition

    out["queries"] = _queries(out.get("queries"), problems)
    given_triggers, out["triggers"] = _named(out.get("triggers"), "triggers", problems), {}
    for name, t in given_triggers.items():
        path = f"triggers/{name}"
        t = _params(t, SCHEMA["trigger"], path, problems)
        if (t.get("condition") is None) == (t.get("every") is None):
            problems.append(f"{path}: give exactly one of condition or every")
        if t.get("condition") is not None and isinstance(t["condition"], str):
            try:
                _check_condition(t["condition"], [q["name"] for q in out["queries"].values()])
            except ValueError as e:
                problems.append(f"{path}/condition: {e}")
        for a in t.get("actions") or []:
            if a not in out["scenes"] and a not in out["extracts"]:
                problems.append(f"{path}/actions: unknown scene or extract {a!r}; "
                                f"known: {', '.join(sorted(out['scenes']) + sorted(out['extracts'])) or 'none'}")
        out["triggers"][name] = t
    for name, ex in out["extracts"].items():
        sc = ex.get("params", {}).get("scene")
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
    params = out.get("params") or {}
    for k, v in params.items() if isinstance(params, Mapping) else ():
        _USER_PARAM.check(v, f"params/{k}", problems)
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


#: Ascent's actions that change nothing here: Ascent itself ignores them (deprecated there).
_ASCENT_NOOP_ACTIONS = ("execute", "reset")
#: Ascent's actions insitu refuses, with why.
_ASCENT_UNSUPPORTED_ACTIONS = {"save_session": "not supported by insitu (expression sessions are not saved; "
                                               "results()['queries'] holds the newest values)"}
_ASCENT_SAVE_INFO = "out_ascent_info_%06d.yaml"


def _from_ascent_actions(actions: list, problems: list[str]) -> dict:
    """Ascent's list of actions as the configuration's sections. ``execute`` and ``reset``
    are accepted and do nothing (as in Ascent, which deprecated them); ``save_info`` sets
    the ``save_info`` path (its ``file_name``, default Ascent's ``out_ascent_info_%06d.yaml``)."""
    out: dict = {}
    known = [*_ASCENT_ACTIONS, "save_info", *_ASCENT_NOOP_ACTIONS]
    for i, a in enumerate(actions):
        key = a.get("action") if isinstance(a, Mapping) else None
        if key in _ASCENT_NOOP_ACTIONS:
            continue
        if key == "save_info":
            name = a.get("file_name", _ASCENT_SAVE_INFO)
            if not isinstance(name, str) or not name:
                problems.append(f"actions[{i}]/file_name: expected a file name, got {_what(name)}")
            out["save_info"] = name
            continue
        if key in _ASCENT_UNSUPPORTED_ACTIONS:
            problems.append(f"actions[{i}]: action {key!r} is {_ASCENT_UNSUPPORTED_ACTIONS[key]}")
            continue
        if key not in _ASCENT_ACTIONS:
            problems.append(f"actions[{i}]: unknown action {_short(key)}; known: {', '.join(known)}")
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
    if not isinstance(t, str) or t not in types:
        problems.append(f"{path}/type: unknown {what} {t!r}; known: {', '.join(types)}")
        return {}
    for k in entry:
        if k not in ("type", "params"):
            problems.append(f"{path}: unknown key {k!r}; known: type, params")
    return {"type": t, "params": _params(entry.get("params"), types[t], f"{path}/params", problems)}


def _pipeline(p, path: str, problems: list[str]) -> dict:
    """A pipeline's filters. Where it starts from another pipeline's output (Ascent's
    ``pipeline: NAME`` beside the filters, or in a filter's map beside type and params),
    that filter's ``input`` names it."""
    if not isinstance(p, Mapping) or not p:
        problems.append(f"{path}: expected a map of filters (name: {{type, params}}), got {_what(p)}")
        return {}
    out: dict = {}
    start = p.get("pipeline") if isinstance(p.get("pipeline"), str) else None
    for fname, f in p.items():
        if fname == "pipeline" and isinstance(f, str):
            continue
        fpath = f"{path}/{fname}"
        ftype = f.get("type") if isinstance(f, Mapping) else None
        if isinstance(ftype, str) and ftype in UNSUPPORTED_FILTERS:
            problems.append(f"{fpath}/type: filter {ftype!r} is {UNSUPPORTED_FILTERS[ftype]}")
            continue
        source = None
        for key in ("pipeline", "input"):  # input: the normalized form, validated again
            if isinstance(f, Mapping) and key in f:
                source = f[key]
                if not isinstance(source, str) or not source:
                    problems.append(f"{fpath}/{key}: expected a pipeline's name, got {_what(source)}")
                f = {k: v for k, v in f.items() if k != key}
        if isinstance(f, Mapping) and isinstance(f.get("params"), Mapping) and isinstance(
                f["params"].get("use_cell_gradient"), bool):  # YAML's false for Ascent's "false"
            f = {**f, "params": {**f["params"], "use_cell_gradient": str(f["params"]["use_cell_gradient"]).lower()}}
        out[str(fname)] = _typed(f, fpath, SCHEMA["filters"], "filter", problems)
        if start is not None and len(out) == 1 and source is None:
            source = start
        if isinstance(source, str) and source and out[str(fname)]:
            out[str(fname)]["input"] = source
        if out[str(fname)].get("params", {}).get("use_cell_gradient") == "true":
            problems.append(f"{fpath}/params/use_cell_gradient: only point gradients are computed (give false)")
        prm = out[str(fname)].get("params", {})
        if out[str(fname)].get("type") == "contour" and (prm.get("iso_values") is None) == (prm.get("levels") is None):
            problems.append(f"{path}/{fname}/params: give exactly one of iso_values or levels")
    return out


def _scene(s, path: str, pipelines: Mapping, problems: list[str]) -> dict:
    s = s if isinstance(s, Mapping) else {}
    for k in s:
        if k not in ("plots", "renders", "image_prefix", "image_name"):
            problems.append(f"{path}: unknown key {k!r}; known: plots, renders, image_prefix, image_name")
    plots = {}
    given = s.get("plots")
    if not isinstance(given, Mapping) or not given:
        problems.append(f"{path}/plots: expected a map of plots (name: {{type, ...}}), got {_what(given)}")
        given = {}
    for name, p in given.items():
        ppath = f"{path}/plots/{name}"
        if isinstance(p, Mapping) and p.get("type") in UNSUPPORTED_PLOTS:
            problems.append(f"{ppath}/type: plot {p['type']!r} is {UNSUPPORTED_PLOTS[p['type']]}")
            continue
        if isinstance(p, Mapping) and isinstance(p.get("params"), Mapping):  # Ascent's older form: params/field
            p = {**{k: v for k, v in p.items() if k != "params"}, **p["params"]}
        if not isinstance(p, Mapping) or p.get("type") not in SCHEMA["plots"]:
            t = p.get("type") if isinstance(p, Mapping) else None
            problems.append(f"{ppath}/type: unknown plot {t!r}; known: {', '.join(SCHEMA['plots'])}")
            continue
        body = {k: v for k, v in p.items() if k != "type"}
        q = _params(body, SCHEMA["plots"][p["type"]], ppath, problems)
        q["type"] = p["type"]
        n = len(problems)
        ct = _params(q.get("color_table"), SCHEMA["color_table"], f"{ppath}/color_table", problems)
        q["color_table"] = ct if len(problems) > n else _color_table(q.get("color_table"), ct,
                                                                     f"{ppath}/color_table", problems)
        if q.get("pipeline") is not None and q["pipeline"] not in pipelines:
            problems.append(f"{ppath}/pipeline: unknown pipeline {q['pipeline']!r}; known: "
                            f"{', '.join(sorted(pipelines)) or 'none'}")
        if p["type"] == "pseudocolor" and q.get("pipeline") is None and not q.get("field"):
            problems.append(f"{ppath}: a pseudocolor plot of the mesh itself (no pipeline) needs a field")
        plots[str(name)] = q
    renders = {}
    given = s.get("renders")
    if given is None:
        given = {"default": {"image_name": s["image_name"]} if s.get("image_name") else
                 {"image_prefix": s.get("image_prefix") or f"{path.split('/')[-1]}_%04d"}}
    if not isinstance(given, Mapping):
        problems.append(f"{path}/renders: expected a map of renders, got {_what(given)}")
        given = {}
    for name, r in given.items():
        rpath = f"{path}/renders/{name}"
        if isinstance(r, Mapping) and r.get("type") in UNSUPPORTED_RENDERS:
            problems.append(f"{rpath}/type: {_short(r['type'])} renders are {UNSUPPORTED_RENDERS[r['type']]}")
            continue
        if isinstance(r, Mapping) and r.get("type") == "cinema":
            missing = [k for k in ("phi", "theta", "db_name") if r.get(k) is None]
            if missing:
                problems.append(f"{rpath}: a cinema render needs {', '.join(missing)}")
        elif isinstance(r, Mapping) and any(r.get(k) is not None for k in ("phi", "theta", "db_name")):
            problems.append(f"{rpath}: phi, theta and db_name belong to renders of type cinema")
        if isinstance(r, Mapping) and r.get("image_name") and r.get("image_prefix"):
            problems.append(f"{rpath}: give one of image_name or image_prefix")
        if isinstance(r, Mapping) and r.get("annotations") in ("true", "false"):  # Ascent writes strings
            r = {**r, "annotations": r["annotations"] == "true"}
        q = _params(r, SCHEMA["render"], rpath, problems)
        n = len(problems)
        q["camera"] = _params(q.get("camera"), SCHEMA["camera"], f"{rpath}/camera", problems)
        if len(problems) == n:  # each key is fine: now the keys together
            problems.extend(camera_problems(q["camera"], f"{rpath}/camera"))
        renders[str(name)] = q
    return {"plots": plots, "renders": renders}


#: Ascent's plot types insitu does not draw, with why.
UNSUPPORTED_PLOTS: dict[str, str] = {}
#: Ascent's render types insitu does not make, with why.
UNSUPPORTED_RENDERS = {"auto_camera": "not supported by insitu (give a camera)"}
def _control_points(value, path: str, problems: list[str]) -> dict:
    """Ascent's colour table control points as ``{"rgb": [[position, r, g, b], ...] or None,
    "alpha": [[position, alpha], ...] or None}`` (components clamped to [0, 1], as Ascent)."""
    rgb: list = []
    alpha: list = []

    def number(v, where: str, lo: float | None = None, hi: float | None = None):
        if not is_real(v):
            problems.append(f"{where}: expected a finite number, got {_short(v)}")
            return None
        if lo is not None and hi is not None and not lo <= v <= hi:
            problems.append(f"{where}: must be in [{lo:g}, {hi:g}] (normalized over the colour range), got {v!r}")
            return None
        return float(v)

    def clamp(v):
        return min(max(v, 0.0), 1.0)

    if isinstance(value, list) and value:
        for n, peg in enumerate(value):
            where = f"{path}[{n}]"
            if not isinstance(peg, Mapping) or peg.get("type") not in ("rgb", "alpha"):
                problems.append(f"{where}: expected {{type: rgb, position, color: [r, g, b]}} (or r, g, b) or "
                                f"{{type: alpha, position, alpha}}, got {_short(peg)}")
                continue
            want = ("type", "position", "color", "r", "g", "b") if peg["type"] == "rgb" else \
                ("type", "position", "alpha")
            extra = [k for k in peg if k not in want]
            if extra:
                problems.append(f"{where}: unknown key {extra[0]!r}; known: {', '.join(want)}")
            x = number(peg.get("position"), f"{where}/position", 0.0, 1.0)
            if peg["type"] == "rgb":
                c = peg.get("color")
                if c is None and any(k in peg for k in "rgb"):  # also as separate r, g, b
                    c = [peg.get(k) for k in "rgb"]
                if not (isinstance(c, list) and len(c) == 3 and all(is_real(v) for v in c)):
                    problems.append(f"{where}/color: expected three numbers [r, g, b] (or keys r, g, b), got "
                                    f"{_short(c)}")
                elif x is not None:
                    rgb.append([x, *(clamp(float(v)) for v in c)])
            else:
                al = number(peg.get("alpha"), f"{where}/alpha")
                if x is not None and al is not None:
                    alpha.append([x, clamp(al)])
    elif isinstance(value, Mapping) and value:
        extra = [k for k in value if k not in ("position", "r", "g", "b", "a")]
        if extra:
            problems.append(f"{path}: unknown key {extra[0]!r}; known: position, r, g, b, a")
        cols = {}
        for k in ("position", "r", "g", "b", "a"):
            v = value.get(k)
            if v is None:
                if k != "a":
                    problems.append(f"{path}: missing key {k!r} (a list of numbers)")
                continue
            v = [v] if is_real(v) else v
            if not (isinstance(v, list) and v and all(is_real(x) for x in v)):
                problems.append(f"{path}/{k}: expected a list of finite numbers, got {_short(v)}")
                continue
            cols[k] = [float(x) for x in v]
        if all(k in cols for k in ("position", "r", "g", "b")):
            n = len(cols["position"])
            if any(len(cols[k]) != n for k in cols):
                problems.append(f"{path}: position, r, g, b (and a) must have one value each per point, got "
                                + ", ".join(f"{len(cols[k])} {k}" for k in cols))
            elif any(not 0 <= x <= 1 for x in cols["position"]):
                problems.append(f"{path}/position: must be in [0, 1] (normalized over the colour range), got "
                                f"{_short(cols['position'])}")
            else:
                rgb = [[x, *(clamp(cols[c][i]) for c in "rgb")] for i, x in enumerate(cols["position"])]
                if "a" in cols:
                    alpha = [[x, clamp(cols["a"][i])] for i, x in enumerate(cols["position"])]
    else:
        problems.append(f"{path}: expected a list of {{type: rgb|alpha, position, ...}} or a map of lists "
                        f"{{position, r, g, b, a}}, got {_what(value)}")
    return {"rgb": rgb or None, "alpha": alpha or None}


def _color_table(given: Any, ct: dict, path: str, problems: list[str]) -> dict:
    """`ct` (checked keys) as one colormap name: control points and reverse folded in as Ascent
    builds its table (render.colormap.compose); a control-point table keeps its alphas."""
    cp, rev = ct.get("control_points"), bool(ct.get("reverse"))
    if cp is None and not rev:
        return ct
    named = isinstance(given, Mapping) and given.get("name") is not None
    try:
        name = _colormap.compose(ct["name"] if named else None, (cp or {}).get("rgb"), (cp or {}).get("alpha"),
                                 reverse=rev)
    except ValueError as e:
        problems.append(f"{path}: {e}")
        return ct
    return {**ct, "name": name}


def camera_problems(camera: Mapping[str, Any], path: str) -> list[str]:
    """Problems of a camera whose keys are each valid but do not make a camera together.

    Parameters
    ----------
    camera : mapping
        Camera keys (:data:`SCHEMA` ``["camera"]``), each already checked; ``None`` for a
        key means its default.
    path : str
        Where the camera comes from, put before each problem.

    Returns
    -------
    list of str
        Empty when the renderers can build this camera: position apart from look_at, up not
        along the viewing direction, the view and projection matrices finite. With a position
        but no look_at the camera looks at the data's centre, known only at render time:
        then only the keys themselves are checked.
    """
    if camera.get("position") is not None and camera.get("look_at") is None:
        return []
    import numpy as np

    centre = np.asarray(camera.get("look_at") or (0.5, 0.5, 0.5), np.float64)
    box = tuple(np.stack([centre - 0.5, centre + 0.5], axis=1).ravel())  # a unit box about what is looked at
    try:
        with np.errstate(all="ignore"):
            cam = camera_from_settings(camera, box)  # the renderers' own: the check cannot drift from it
            near, far = cam.clip_range(box)
            finite = np.isfinite(cam.view_matrix()).all() and np.isfinite(cam.projection_matrix(1, 1, near, far)).all()
        if not finite:
            raise ValueError("the view is not representable in floating point (position and look_at too far apart)")
    except (ValueError, ArithmeticError) as e:
        return [f"{path}: {str(e).removeprefix('camera').lstrip(': ')}"]
    return []


def check_steering(update: Any, config: Mapping) -> dict:
    """Check one steering update against :data:`SCHEMA` ``["steering"]``: the same Params
    as the configuration keys it overrides.

    Parameters
    ----------
    update : mapping
        ``{camera, iso_values, colormap, transfer_function, params, pause, stop}`` (any of them).
    config : mapping
        The validated configuration (which pipelines have a contour).

    Returns
    -------
    dict
        The update normalized: numbers as floats, ``iso_values`` as ``{pipeline: [values] or
        None}``, ``None`` where a key goes back to the configuration's value. Camera keys are
        checked one by one here; how they combine with each render's camera is
        :func:`camera_problems`'.

    Raises
    ------
    ValueError
        Naming every key at fault and what it accepts (never another exception type, whatever
        the values: a 400-digit integer is refused like any other out-of-range number).
    """
    spec = SCHEMA["steering"]
    if not isinstance(update, Mapping):
        raise ValueError(f"steer: expected a map with keys among {', '.join(spec)}, got {_what(update)}")
    unknown = [k for k in update if k not in spec]
    if unknown:
        raise ValueError(f"steer: unknown key(s) {', '.join(_short(k) for k in unknown)}; known: {', '.join(spec)}")
    problems: list[str] = []
    out: dict[str, Any] = {}
    for key, value in update.items():
        try:
            out[key] = _steered(key, value, spec[key], config, problems)
        except Exception as e:  # a value no check foresaw: still a refusal naming the key, never a crash
            problems.append(f"{key}: {type(e).__name__}: {_short(str(e))}")
    if problems:
        raise ValueError(f"steer: {'; '.join(problems)}")
    return out


def _steered(key: str, value: Any, param: Param, config: Mapping, problems: list[str]) -> Any:
    if value is None and key in ("camera", "iso_values", "colormap", "transfer_function"):
        return None  # back to the configuration's
    if key == "camera":
        if not isinstance(value, Mapping):
            problems.append(f"camera: expected a map, got {_what(value)}")
            return None
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k not in SCHEMA["camera"]:
                problems.append(f"camera: unknown key {_short(k)}; known: {', '.join(SCHEMA['camera'])}")
            elif v is None:
                out[k] = None
            else:
                n = len(problems)
                v = SCHEMA["camera"][k].check(v, f"camera/{k}", problems)
                if len(problems) == n:
                    out[k] = [float(x) for x in v] if isinstance(v, list) else float(v)
        return out
    if key == "iso_values":
        contours = [p for p, fl in config["pipelines"].items() if any(f.get("type") == "contour" for f in fl.values())]
        if isinstance(value, Mapping):
            unknown = [p for p in value if p not in contours]
            if unknown:
                problems.append(f"iso_values: {', '.join(map(_short, unknown))} are not pipelines with a contour; "
                                f"known: {', '.join(contours) or 'none'}")
                return None
            items, where = dict(value), "iso_values/{}"
        else:
            items, where = {p: value for p in contours}, "iso_values"
        out = {}
        for p, v in items.items():
            if v is None:
                out[p] = None
                continue
            n = len(problems)
            v = param.check(v, where.format(p), problems)
            if len(problems) > n:
                break  # the same list for every contour: said once
            out[p] = [float(x) for x in v]
        return out
    if key == "params":
        if not isinstance(value, Mapping):
            problems.append(f"params: expected a map of numbers, got {_what(value)}")
            return None
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not k:
                problems.append(f"params: expected names, got {_short(k)}")
                continue
            n = len(problems)
            _USER_PARAM.check(v, f"params/{k}", problems)
            if len(problems) == n:
                out[k] = float(v)
        return out
    n = len(problems)
    value = param.check(value, key, problems)
    if len(problems) > n:
        return None
    if key == "transfer_function":
        return [[float(x) for x in p] for p in value]
    return value


def describe() -> str:
    """The configuration reference in Markdown, generated from :data:`SCHEMA`."""
    lines = ["# Adaptor configuration reference", "",
             "Generated from `adaptors.config.SCHEMA` by `adaptors.config.describe()`; "
             "a test keeps this file in sync.", ""]

    def table(title: str, spec: Mapping[str, Param]) -> None:
        lines.extend([f"## {title}", "", "| key | kind | default | meaning |", "| --- | --- | --- | --- |"])
        for k, p in spec.items():
            d = "required" if p.required else ("" if p.default is None else f"`{json.dumps(p.default)}`")
            kind = (f"{p.kind}, {p.accepts()}" if p.accepts() else p.kind).replace("|", "\\|")  # not a column
            lines.append(f"| `{k}` | {kind} | {d} | {p.doc} |")
        lines.append("")

    table("Top level", SCHEMA["top"])
    for t, spec in SCHEMA["filters"].items():
        table(f"Filter `{t}` (pipelines/NAME/FILTER: {{type: {t}, params: ...}})", spec)
    for t, spec in SCHEMA["plots"].items():
        table(f"Plot `{t}` (scenes/NAME/plots/PLOT: {{type: {t}, ...}})", spec)
    table("Color table (plots/PLOT/color_table)", SCHEMA["color_table"])
    table("Render (scenes/NAME/renders/RENDER)", SCHEMA["render"])
    table("Camera (renders/RENDER/camera)", SCHEMA["camera"])
    lines.extend(["The keys together must make a camera: position not at look_at, up not along the viewing "
                  "direction (checked at initialize, and against every render's camera for each steering update; "
                  "with a position but no look_at the camera looks at the data's centre, known only when a step "
                  "renders).", ""])
    for t, spec in SCHEMA["extracts"].items():
        table(f"Extract `{t}` (extracts/NAME: {{type: {t}, params: ...}})", spec)
    table("Trigger (triggers/NAME)", SCHEMA["trigger"])
    table("Trigger in Ascent's form (triggers/NAME/params)", SCHEMA["ascent_trigger"])
    table("Query (queries/NAME/params)", SCHEMA["query"])
    for t, spec in SCHEMA["engines"].items():
        if spec:
            table(f"Engine `{t}` (engine: {t}, or engine: {{type: {t}, params: ...}})", spec)
    table("Steering (Adaptor.steer, the steering file, viewers)", SCHEMA["steering"])
    lines.extend(["A steering update is checked whole before anything changes: a refused update changes "
                  "nothing; steer() raises ValueError naming each key at fault, and an update from the steering "
                  "file or a viewer is reported in results()['errors'].", ""])
    return "\n".join(lines)
