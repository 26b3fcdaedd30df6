"""docs/ASCENT.md: every Ascent action, filter, plot, render key, extract and expression
function, and what insitu does with it (supported, partial, or not with the error users get).

Regenerate with ``python -m adaptors.ascent_doc > docs/ASCENT.md``; a test keeps the file
and the schema in sync. The statuses are derived, not written: an entry is supported when
the configuration's schema (:data:`adaptors.config.SCHEMA`) or the expression language
(:data:`adaptors.expressions.FUNCTIONS`) has it, partial when :data:`PARTIAL` says how, and
otherwise the table shows the error :func:`adaptors.config.load` gives for it.
"""

from __future__ import annotations

from typing import Any

from . import config as _config
from .errors import ConfigError
from .expressions import FUNCTIONS

__all__ = ["ASCENT", "INSITU_ONLY", "PARTIAL", "describe", "entries"]

#: Ascent's vocabulary, by kind, as its documentation lists it.
ASCENT: dict[str, tuple[str, ...]] = {
    "action": ("add_pipelines", "add_scenes", "add_extracts", "add_queries", "add_triggers", "save_info",
               "save_session", "execute", "reset"),
    "filter": ("contour", "threshold", "slice", "3slice", "auto_slice", "exaslice", "clip", "clip_with_field",
               "isovolume", "vector_magnitude", "vector_component", "composite_vector", "recenter", "gradient",
               "vorticity", "qcriterion", "divergence", "log", "log2", "log10", "transform", "particle_advection",
               "streamline", "warpx_streamline", "sample", "sample_grid", "uniform_grid", "mir", "add_mpi_ranks",
               "add_domain_ids", "partition", "revolve", "extrude", "histsampling", "triangulate", "project_2d",
               "dray_project_2d", "dray_reflect", "lagrangian"),
    "plot": ("pseudocolor", "volume", "mesh"),
    "plot key": ("pipeline", "field", "color_table", "min_value", "max_value", "points"),
    "color table key": ("name", "control_points", "reverse", "annotation", "discrete"),
    "render key": ("image_width", "image_height", "image_prefix", "image_name", "camera", "bg_color", "fg_color",
                   "annotations", "render_bg", "dataset_bounds", "color_bar_position", "type", "phi", "theta",
                   "db_name", "auto_camera"),
    "camera key": ("look_at", "position", "up", "fov", "xpan", "ypan", "azimuth", "elevation", "zoom", "near_plane",
                   "far_plane"),
    "extract": ("relay", "python", "jupyter", "adios2", "hola_mpi", "htg", "flatten", "gltf", "rover_xray",
                "rover_volume"),
    "expression function": ("cycle", "time", "field", "max", "min", "avg", "sum", "field_nan_count",
                            "field_inf_count", "vector", "magnitude", "abs", "exp", "log", "pow", "sqrt", "sin",
                            "cos", "tan", "histogram", "entropy", "pdf", "cdf", "bin", "quantile", "history",
                            "history_range", "history_gradient", "history_gradient_range", "bounds", "topo",
                            "lineout", "binning", "axis", "paint_binning", "binning_mesh", "binning_value",
                            "point_and_axis", "max_from_point", "gradient", "curl", "derived_field", "rand",
                            "replace", "recenter", "vorticity", "divergence", "qcriterion", "jacobian"),
}

#: insitu's own entries beyond Ascent's (in the schema, not in Ascent).
INSITU_ONLY: dict[str, tuple[str, ...]] = {
    "filter": ("eikonal",),
    "color table key": ("opacity",),
    "extract": ("adios2_mesh", "hdf5"),
    "expression function": ("param",),
}

#: Supported with a difference from Ascent: how.
PARTIAL: dict[tuple[str, str], str] = {
    ("action", "execute"): "accepted and ignored, as Ascent (which deprecated it) does",
    ("action", "reset"): "accepted and ignored, as Ascent (which deprecated it) does",
    ("action", "save_info"): "after each executed step rank 0 writes YAML (default out_ascent_info_%06d.yaml, "
                             "or file_name) with status, state (cycle, time), images, results() and the "
                             "configuration; not Ascent's full info tree",
    ("filter", "threshold"): "keeps whole cells in [min_value, max_value] (vertex fields: all their points); "
                             "no Ascent threshold by sphere, box or plane",
    ("filter", "gradient"): "point gradients only (use_cell_gradient not accepted)",
    ("filter", "vorticity"): "point gradients only (use_cell_gradient: true refused)",
    ("filter", "qcriterion"): "point gradients only (use_cell_gradient: true refused)",
    ("filter", "divergence"): "point gradients only (use_cell_gradient: true refused)",
    ("filter", "clip"): "plane, sphere or box (Ascent's multi-plane clips are not)",
    ("plot", "pseudocolor"): "surfaces (a contour's, a slice's, the kept cells' outer surface, the mesh's own); "
                             "point meshes and points/radius are not drawn",
    ("plot", "volume"): "uniform and rectilinear grids ray cast; other cells resampled to a grid first",
    ("plot", "mesh"): "the edges of the outer surface's cells (uniform grids: the box's grid lines; cell meshes: "
                      "VTK's cell edges on the outer surface, no triangulation diagonals), one pixel wide in the "
                      "render's fg_color, depth-tested with the other plots (no hidden-line pass of its own); CPU "
                      "(Numba) and GPU (CUDA) line rasterizers; a contour's or slice's surface is refused",
    ("color table key", "name"): "VTK-m's presets by Ascent's names (any case, spaces ignored: Cool to Warm, "
                                 "Viridis, Jet, Black-Body Radiation, ...; Default = Viridis), from VTK-m's "
                                 "control points in the preset's colour space (RGB, Lab, diverging), plus insitu's "
                                 "own maps (viridis, ... lower case: matplotlib's); unknown names list close ones; "
                                 "without a color_table, Cool to Warm (Ascent's renderers' default)",
    ("color table key", "control_points"): "Ascent's list ({type: rgb, position, color} / {type: alpha, position, "
                                           "alpha}) and map ({position, r, g, b, a}) forms; as Ascent: without a "
                                           "name the rgb points replace Cool to Warm's (its diverging space), with "
                                           "one they are added to its points; alpha points: a volume plot's "
                                           "opacity over the colour range (reached over one world unit)",
    ("color table key", "annotation"): "accepted; the legend is drawn where the render's annotations ask",
    ("render key", "type"): "cinema: Ascent's spec A database (the images, info.json, info.js, data.csv; not its "
                            "bundled web viewer); auto_camera refused by name",
    ("render key", "annotations"): "legend, step and time drawn when asked (off by default, unlike Ascent)",
    ("camera key", "xpan"): "a sideways move of the camera at the look-at distance (VTK-m shifts the projection: "
                            "the same at the look-at plane)",
    ("camera key", "ypan"): "as xpan",
    ("camera key", "zoom"): "> 0 (Ascent's 0 is refused)",
    ("extract", "relay"): "Blueprint HDF5/YAML/JSON with a .root index, as relay::io::blueprint::save_mesh",
    ("extract", "adios2"): "insitu's adios2 writes frames (images); mesh data over ADIOS2 is adios2_mesh",
}

_SCHEMA_KEYS: dict[str, Any] = {
    "filter": _config.SCHEMA["filters"], "plot": _config.SCHEMA["plots"], "render key": _config.SCHEMA["render"],
    "camera key": _config.SCHEMA["camera"], "color table key": _config.SCHEMA["color_table"],
    "extract": _config.SCHEMA["extracts"], "expression function": FUNCTIONS,
}
_ACTIONS_SUPPORTED = (*_config._ASCENT_ACTIONS, "save_info", *_config._ASCENT_NOOP_ACTIONS)


def schema_names(kind: str) -> set[str]:
    """What insitu's schema (or expression language) holds for `kind`."""
    if kind == "action":
        return set(_ACTIONS_SUPPORTED)
    if kind == "plot key":
        return {k for spec in _config.SCHEMA["plots"].values() for k in spec}
    return set(_SCHEMA_KEYS[kind])


def _error(kind: str, name: str) -> str:
    """The first configuration error insitu gives for `name` used as Ascent writes it."""
    scene = {"plots": {"p1": {"type": "pseudocolor", "field": "f"}}}
    if kind == "action":
        cfg: Any = [{"action": name}]
    elif kind == "filter":
        cfg = [{"action": "add_pipelines", "pipelines": {"pl1": {"f1": {"type": name, "params": {}}}}}]
    elif kind == "plot":
        cfg = [{"action": "add_scenes", "scenes": {"s1": {"plots": {"p1": {"type": name}}}}}]
    elif kind == "plot key":
        cfg = [{"action": "add_scenes", "scenes": {"s1": {"plots": {"p1": {"type": "pseudocolor", "field": "f",
                                                                            name: 1}}}}}]
    elif kind == "color table key":
        cfg = [{"action": "add_scenes", "scenes": {"s1": {"plots": {"p1": {
            "type": "pseudocolor", "field": "f", "color_table": {name: [{"type": "rgb", "position": 0.0,
                                                                         "color": [1, 0, 0]}]}}}}}}]
    elif kind in ("render key", "camera key"):
        r = {name: 1} if kind == "render key" else {"camera": {name: 1}}
        if name in ("type", "phi", "theta", "db_name"):
            r = {"type": "cinema", "phi": 2, "theta": 2, "db_name": "db"}
        elif name == "auto_camera":
            r = {"type": "auto_camera", "auto_camera": {}}
        cfg = [{"action": "add_scenes", "scenes": {"s1": {**scene, "renders": {"r1": r}}}}]
    elif kind == "extract":
        cfg = [{"action": "add_extracts", "extracts": {"e1": {"type": name, "params": {}}}}]
    else:
        cfg = [{"action": "add_queries", "queries": {"q1": {"params": {"expression": f"{name}(1)", "name": "q"}}}}]
    try:
        _config.load(cfg)
    except ConfigError as e:
        first = e.problems[0] if hasattr(e, "problems") else str(e).splitlines()[-1]
        first = str(first).strip()
        return first.split("; known:")[0].split("; functions:")[0]
    return "(accepted)"


def entries() -> list[tuple[str, str, str, str]]:
    """``(kind, name, status, how)`` for every Ascent entry, then insitu's own."""
    out = []
    for kind, names in ASCENT.items():
        have = schema_names(kind)
        for name in names:
            if (kind, name) in PARTIAL:
                out.append((kind, name, "partial", PARTIAL[(kind, name)]))
            elif name in have:
                out.append((kind, name, "supported", ""))
            else:
                out.append((kind, name, "not", f"`{_error(kind, name)}`"))
    for kind, names in INSITU_ONLY.items():
        for name in names:
            out.append((kind, name, "insitu only", "not in Ascent"))
    return out


def describe() -> str:
    """docs/ASCENT.md in Markdown."""
    lines = ["# Ascent compatibility", "",
             "Generated by `python -m adaptors.ascent_doc > docs/ASCENT.md` (adaptors/ascent_doc.py); "
             "tests/test_ascent_actions.py keeps it equal to this file and in agreement with the schema "
             "(docs/CONFIG.md).", "",
             "Actions files are read in Ascent's list form (`- action: add_pipelines ...`) or as one map. "
             "*supported*: as Ascent documents it; *partial*: how insitu differs; *not*: the configuration "
             "error insitu gives (every problem is reported before anything runs).", ""]
    rows = entries()
    for kind in ASCENT:
        title = {"color table key": "Colour table keys (plots/PLOT/color_table)",
                 "render key": "Render keys (scenes/SCENE/renders/RENDER)",
                 "camera key": "Camera keys (renders/RENDER/camera)",
                 "plot key": "Plot keys (scenes/SCENE/plots/PLOT)"}.get(kind, kind.capitalize() + "s")
        lines.extend([f"## {title}", "", "| name | status | how / error |", "| --- | --- | --- |"])
        for k, name, status, how in rows:
            if k == kind and status != "insitu only":
                lines.append(f"| `{name}` | {status} | {how.replace('|', '/')} |")
        lines.append("")
    lines.extend(["## insitu's own", "", "| kind | name |", "| --- | --- |"])
    for k, name, status, _ in rows:
        if status == "insitu only":
            lines.append(f"| {k} | `{name}` |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
