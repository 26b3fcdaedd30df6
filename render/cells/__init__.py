"""Filters on meshes of cells (unstructured grids, and structured grids as hexahedra).

A :class:`CellMesh` holds points and linear cells of VTK's types in CSR form, on NumPy or
CuPy; the filters take one and return arrays (or a new mesh) on the same backend.
"""

from ._mesh import (CELL_DIM, CELL_POINTS, HEXAHEDRON, LINE, POLYGON, PYRAMID, QUAD, SHAPE_TYPES, TETRA, TRIANGLE,
                    VERTEX, WEDGE, CellMesh, cell_mesh, grid_cells)

__all__ = ["CELL_DIM", "CELL_POINTS", "HEXAHEDRON", "LINE", "POLYGON", "PYRAMID", "QUAD", "SHAPE_TYPES", "TETRA",
           "TRIANGLE", "VERTEX", "WEDGE", "CellMesh", "cell_mesh", "grid_cells"]
