"""The two schemas that let ParaView and VisIt open insitu's ADIOS2 streams as image data.

Both describe a uniform grid whose arrays are ADIOS2 global arrays of the grid's shape in
ADIOS2's (row-major) order, ``(nz, ny, nx)``: x varies fastest, as VTK's image arrays do.

- :func:`vtx_image`: the ``vtk.xml`` attribute of VTK's ADIOS2 VTX reader
  (``vtkADIOS2VTXReader``: VTK XML ImageData with arrays named after variables, and a
  ``TIME`` array naming the time variable).
- :func:`fides_uniform`: the attributes of Fides' predefined ``uniform`` data model
  (``Fides_Data_Model``, ``Fides_Origin``, ``Fides_Spacing``, ``Fides_Dimension_Variable``,
  ``Fides_Variable_List``, ``Fides_Variable_Associations``, ``Fides_Variable_Vectors``).

Conventions taken from the readers' sources (VTK ``IO/ADIOS2/VTX/schema/vtk/VTXvtkVTI.cxx``,
Fides ``predefined/DataModelHelperFunctions.cxx`` and ``DataSourceADIOS``):

- VTX reads ``WholeExtent`` pairs in the *variables'* dimension order (slowest first) and
  reverses them into the image's x, y, z extent; origin and spacing are x, y, z. So, for
  variables of shape ``(nz, ny, nx)``, ``WholeExtent`` lists z first: ``"0 cz 0 cy 0 cx"``
  (``cx = nx - 1`` cells along x). For a cube both orders coincide, which is why the
  examples that ship with ADIOS2 do not show it. VTX reads only one-component arrays of
  image data (a multi-component global array would be read past its buffer), and only the
  first ``Piece``.
- Fides reverses the dimension variable's shape into x, y, z, takes origin and spacing as
  x, y, z, and needs a *point* scalar as the dimension variable; associations are
  ``points`` or ``cell_set``; a two-dimensional ``(n_points, k)`` array is a
  ``k``-component field (``Fides_Variable_Vectors`` says so explicitly).
"""

from __future__ import annotations

from typing import Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

__all__ = ["fides_uniform", "vtx_image"]


def _three(v, name: str) -> list[float]:
    out = [float(x) for x in v]
    if len(out) != 3:
        raise ValueError(f"{name}: expected 3 values (x, y, z), got {len(out)}")
    return out


def _num(x: float) -> str:
    return repr(float(x))  # round-trips exactly


def vtx_image(cells: Sequence[int], origin: Sequence[float], spacing: Sequence[float], *,
              point: Sequence[str] = (), cell: Sequence[str] = (), time: str | None = "time") -> str:
    """The ``vtk.xml`` attribute for VTX: ImageData of `cells` with one-component arrays.

    Parameters
    ----------
    cells : (3,) ints
        Cells along x, y, z (points: one more each); the arrays' ADIOS2 shape is
        ``(cz + 1, cy + 1, cx + 1)`` for point data, ``(cz, cy, cx)`` for cell data.
    origin, spacing : (3,) floats
        x, y, z.
    point, cell : names
        Variables read as point data and as cell data (one component each).
    time : str or None
        The variable holding each step's time, named by the ``TIME`` data array (with point
        data if there is any, else cell data); None: VTX numbers the steps 0, 1, ...

    Returns
    -------
    str
        The XML document.
    """
    c = [int(n) for n in cells]
    if len(c) != 3 or min(c) < 0:
        raise ValueError(f"vtx_image cells: expected 3 counts >= 0 (x, y, z), got {list(cells)}")
    o, s = _three(origin, "vtx_image origin"), _three(spacing, "vtx_image spacing")
    extent = f"0 {c[2]} 0 {c[1]} 0 {c[0]}"  # slowest first: see the module's docstring

    def arrays(names: Sequence[str], with_time: bool) -> str:
        rows = [f"        <DataArray Name={quoteattr(str(n))}/>" for n in names]
        if with_time:
            rows.append(f"        <DataArray Name=\"TIME\">{escape(str(time))}</DataArray>")
        return "\n".join(rows)

    tp = time is not None and (bool(point) or not cell)
    tc = time is not None and not tp
    parts = ['<?xml version="1.0"?>',
             '<VTKFile type="ImageData" version="0.1" byte_order="LittleEndian">',
             f'  <ImageData WholeExtent="{extent}" Origin="{" ".join(map(_num, o))}" '
             f'Spacing="{" ".join(map(_num, s))}">',
             f'    <Piece Extent="{extent}">',
             "      <PointData>", arrays(point, tp), "      </PointData>",
             "      <CellData>", arrays(cell, tc), "      </CellData>",
             "    </Piece>", "  </ImageData>", "</VTKFile>"]
    return "\n".join(p for p in parts if p)


def fides_uniform(origin: Sequence[float], spacing: Sequence[float], *, dimension: str,
                  variables: Mapping[str, str], vectors: Sequence[str] = ()) -> dict:
    """Attributes of Fides' ``uniform`` data model.

    Parameters
    ----------
    origin, spacing : (3,) floats
        x, y, z.
    dimension : str
        A point variable of shape ``(nz, ny, nx)`` whose blocks give the grid's extent.
    variables : {name: "points" or "cell_set"}
        The fields, in order.
    vectors : names
        Those of `variables` that are ``(n, k)`` arrays of ``k`` components.

    Returns
    -------
    dict
        Attribute name -> value (str, list of str, or list of float).
    """
    bad = {k: v for k, v in variables.items() if v not in ("points", "cell_set")}
    if bad:
        raise ValueError(f"fides_uniform variables: associations must be 'points' or 'cell_set', got {bad}")
    if variables.get(dimension) != "points":
        raise ValueError(f"fides_uniform dimension: {dimension!r} must be one of the point variables "
                         f"({', '.join(k for k, v in variables.items() if v == 'points') or 'none'})")
    return {"Fides_Data_Model": "uniform",
            "Fides_Origin": _three(origin, "fides_uniform origin"),
            "Fides_Spacing": _three(spacing, "fides_uniform spacing"),
            "Fides_Dimension_Variable": dimension,
            "Fides_Variable_List": list(variables),
            "Fides_Variable_Associations": list(variables.values()),
            "Fides_Variable_Vectors": ["true" if k in vectors else "false" for k in variables]}
