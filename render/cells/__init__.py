"""Filters on meshes of cells (unstructured grids, and structured grids as hexahedra).

A :class:`CellMesh` holds points and linear cells of VTK's types in CSR form, on NumPy or
CuPy; the filters take one and return arrays (or a new mesh) on the same backend:
contours and slices (:mod:`.contour`), clips, isovolumes and thresholds (:mod:`.clip`,
:mod:`.threshold`), the outer surface (:mod:`.surface`), recentring, gradients and vector
norms (:mod:`.fields`), resampling onto a uniform grid (:mod:`.resample`) and cell measures
(:mod:`.measure`).
"""

from ._mesh import (CELL_DIM, CELL_POINTS, HEXAHEDRON, LINE, POLYGON, PYRAMID, QUAD, SHAPE_TYPES, TETRA, TRIANGLE,
                    VERTEX, WEDGE, CellMesh, cell_mesh, grid_cells)
from .clip import Clipped, clip, clip_box, clip_field, clip_plane, clip_sphere, isovolume
from .contour import Contour, contour, slice_plane, three_slice
from .fields import cell_to_point, component, gradient, magnitude, point_to_cell
from .measure import area, volume
from .resample import resample, sample_grid
from .surface import Surface, face_normals, grid_boundary, outer_surface, vertex_normals
from .threshold import threshold

__all__ = ["CELL_DIM", "CELL_POINTS", "HEXAHEDRON", "LINE", "POLYGON", "PYRAMID", "QUAD", "SHAPE_TYPES", "TETRA",
           "TRIANGLE", "VERTEX", "WEDGE", "CellMesh", "Clipped", "Contour", "Surface", "area", "cell_mesh",
           "cell_to_point", "clip", "clip_box", "clip_field", "clip_plane", "clip_sphere", "component", "contour",
           "face_normals", "gradient", "grid_boundary", "grid_cells", "isovolume", "magnitude", "outer_surface",
           "point_to_cell", "resample", "sample_grid", "slice_plane", "three_slice", "threshold", "vertex_normals",
           "volume"]
