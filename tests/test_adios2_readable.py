"""What insitu writes through ADIOS2 opens in other tools (issue 25): the ``adios2_mesh``
stream read with ADIOS2's own Python API (not insitu's readers) gives the global arrays
bit for bit for 1, 2 and 3 writing ranks; the ``vtk.xml`` (VTX) and Fides attributes
describe the grid; frames are W x H x 1 image data with a 4-component RGBA array.

VTK's reader of those schemas (``vtkADIOS2VTXReader``) is tried where VTK was built with
ADIOS2; the PyPI VTK wheel is not, so that test skips naming the missing module.
"""

import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from conftest import MPI_DIR
from insitu.stream import FrameReader, FrameWriter

adios2 = pytest.importorskip("adios2")
sys.path.insert(0, MPI_DIR)
from adios2_blocks import CELLS, ORIGIN, SPACING  # noqa: E402 - the layout the ranks write

STEPS = 2


def expected(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The global fields, (z, y, x) as ADIOS2 holds them: T at nodes, E at cells."""
    k, j, i = np.meshgrid(*(np.arange(n + 1) for n in CELLS[::-1]), indexing="ij")
    t = i + 100.0 * j + 10000.0 * k + 0.5 * step
    kc, jc, ic = np.meshgrid(*(np.arange(n) for n in CELLS[::-1]), indexing="ij")
    e = (7 * ic + 3 * jc + 11 * kc + step).astype(np.float32)
    return t, e


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split()]


def check_vtk_xml(text: str, cells, origin, spacing, point, cell) -> ET.Element:
    """The VTX schema: ImageData of `cells` (x, y, z) and arrays named after the variables."""
    root = ET.fromstring(text)
    assert root.tag == "VTKFile" and root.get("type") == "ImageData"
    image = root.find("ImageData")
    # VTX reads WholeExtent in the variables' (z, y, x) order and flips it into x, y, z
    # (VTXvtkVTI.cxx: GetShape, then the extent from start[2 - i]): z first here.
    want = [0, cells[2], 0, cells[1], 0, cells[0]]
    assert floats(image.get("WholeExtent")) == want
    assert floats(image.get("Origin")) == list(origin) and floats(image.get("Spacing")) == list(spacing)
    piece = image.find("Piece")
    assert floats(piece.get("Extent")) == want
    names = {kind: [a.get("Name") for a in piece.find(kind)] for kind in ("PointData", "CellData")}
    time_in = "PointData" if point else "CellData"
    assert names[time_in] == [*(point if point else cell), "TIME"]
    (time,) = [a for a in piece.find(time_in) if a.get("Name") == "TIME"]
    assert time.text.strip() == "time"  # the variable VTX takes each step's time from
    other = "CellData" if point else "PointData"
    assert names[other] == (cell if point else [])
    return root


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_mesh_stream_global_arrays_read_back_exactly_with_adios2(mpi, tmp_path, nranks):
    path = str(tmp_path / "mesh.bp")
    r = mpi(nranks, "adios2_blocks.py", path, STEPS, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    cx, cy, cz = CELLS
    with adios2.FileReader(path) as f:
        v = f.available_variables()
        assert v["T"]["Shape"] == f"{cz + 1}, {cy + 1}, {cx + 1}" and v["T"]["Type"] == "double"
        assert v["E"]["Shape"] == f"{cz}, {cy}, {cx}" and v["E"]["Type"] == "float"
        assert f.num_steps() == STEPS
        for step in range(STEPS):
            t, e = expected(step)
            got_t = f.read("T", step_selection=[step, 1])
            got_e = f.read("E", step_selection=[step, 1])
            assert got_t.dtype == np.float64 and got_e.dtype == np.float32
            np.testing.assert_array_equal(got_t, t)  # bit for bit: no ghost garbage, no hole
            np.testing.assert_array_equal(got_e, e)
            assert f.read("step", step_selection=[step, 1]).tolist() == [step]
            assert f.read("time", step_selection=[step, 1]).tolist() == [0.25 * step]
            table = f.read("blocks", step_selection=[step, 1]).reshape(-1, 7)
            assert sorted(table[:, 0].tolist()) == [10, 11, 12, 13]
        # each block written once, with its real nodes/cells only: the blocks add up to the array
        for name, size in (("T", (cx + 1) * (cy + 1) * (cz + 1)), ("E", cx * cy * cz)):
            info = f.all_blocks_info(name)
            assert len(info) == STEPS
            for step_blocks in info:
                assert len(step_blocks) == 4
                assert sum(int(np.prod([int(c) for c in b["Count"].split(",")])) for b in step_blocks) == size
        # Fides' shared points: a point block read one node lower where it does not start the
        # grid spans exactly the cells of the cell block written with it
        for tb, eb in zip(f.all_blocks_info("T")[0], f.all_blocks_info("E")[0]):
            ts, tc = ([int(v) for v in tb[k].split(",")] for k in ("Start", "Count"))
            es, ec = ([int(v) for v in eb[k].split(",")] for k in ("Start", "Count"))
            grow = [int(v > 0) for v in ts]
            assert [s - g for s, g in zip(ts, grow)] == es and [c + g for c, g in zip(tc, grow)] == [c + 1 for c in ec]
        check_vtk_xml(f.read_attribute_string("vtk.xml"), CELLS, ORIGIN, SPACING, ["T"], ["E"])
        assert f.read_attribute_string("Fides_Data_Model") == "uniform"
        np.testing.assert_array_equal(f.read_attribute("Fides_Origin"), ORIGIN)
        np.testing.assert_array_equal(f.read_attribute("Fides_Spacing"), SPACING)
        assert f.read_attribute_string("Fides_Dimension_Variable") == "T"  # a point scalar
        assert f.read_attribute_string("Fides_Variable_List") == ["E", "T"]  # the fields, sorted
        assert f.read_attribute_string("Fides_Variable_Associations") == ["cell_set", "points"]
        assert f.read_attribute_string("Fides_Variable_Vectors") == ["false", "false"]
    # insitu's reader: each block's real cells plus one ghost layer from its neighbours, marked
    from adaptors.meshstream import read_steps

    for step, time, mesh in read_steps(path, engine="BP5", timeout=10, ghost=1):
        t, e = expected(step)
        assert time == 0.25 * step and len(mesh) == 4
        for d in mesh:
            o = [round((d["coordsets"]["coords"]["origin"][a] - ORIGIN[i]) / SPACING[i])
                 for i, a in enumerate("xyz")]
            n = [d["coordsets"]["coords"]["dims"][a] for a in "ijk"]
            want = t[o[2]:o[2] + n[2], o[1]:o[1] + n[1], o[0]:o[0] + n[0]].transpose()
            np.testing.assert_array_equal(d["fields"]["T"]["values"], want)
            g = d["fields"]["ascent_ghosts"]["values"]
            assert 0 < (g == 0).sum() < g.size  # an inner block has ghost cells around its real ones


def test_frames_are_image_data_with_an_rgba_array(tmp_path):
    name = str(tmp_path / "frames.bp")
    h, w = 5, 7
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (h, w, 4), dtype=np.uint8) for _ in range(3)]
    depths = [rng.random((h, w), dtype=np.float32) for _ in range(3)]
    with FrameWriter(name, "BP5") as fw:
        for step, (img, dep) in enumerate(zip(images, depths)):
            fw.write(img, step=step, time=0.5 * step, depth=dep)
    with adios2.FileReader(name) as f:
        v = f.available_variables()
        assert v["rgba"]["Shape"] == f"{h * w}, 4" and v["rgba"]["Type"] == "uint8_t"
        assert v["luminance"]["Shape"] == f"1, {h}, {w}" and v["depth"]["Shape"] == f"1, {h}, {w}"
        for step, (img, dep) in enumerate(zip(images, depths)):
            # VTK's point order: x fastest, rows from the bottom (y up)
            np.testing.assert_array_equal(f.read("rgba", step_selection=[step, 1]),
                                          img[::-1].reshape(h * w, 4))
            np.testing.assert_array_equal(f.read("depth", step_selection=[step, 1]), dep[::-1][None])
            lum = f.read("luminance", step_selection=[step, 1])[0]
            rgb = img[::-1, :, :3].astype(np.int64)
            np.testing.assert_array_equal(lum, (77 * rgb[..., 0] + 150 * rgb[..., 1] + 29 * rgb[..., 2] + 128) >> 8)
            assert f.read("time", step_selection=[step, 1]).tolist() == [0.5 * step]
        check_vtk_xml(f.read_attribute_string("vtk.xml"), (w - 1, h - 1, 0), (0, 0, 0), (1, 1, 1),
                      ["luminance", "depth"], [])
        assert f.read_attribute_string("Fides_Data_Model") == "uniform"
        assert f.read_attribute_string("Fides_Dimension_Variable") == "luminance"
        assert f.read_attribute_string("Fides_Variable_List") == ["rgba", "luminance", "depth"]
        assert f.read_attribute_string("Fides_Variable_Associations") == ["points"] * 3
        assert f.read_attribute_string("Fides_Variable_Vectors") == ["true", "false", "false"]
    with FrameReader(name) as r:  # insitu's own reader: the images as they were, rows top first
        frames = list(r)
    for fr, img, dep in zip(frames, images, depths):
        np.testing.assert_array_equal(fr.image, img)
        np.testing.assert_array_equal(fr.depth, dep)


def _vtx_reader():
    try:
        from vtkmodules.vtkIOADIOS2 import vtkADIOS2VTXReader
    except ImportError as e:
        pytest.skip(f"VTK has no ADIOS2 reader here (vtkmodules.vtkIOADIOS2: {e}); the PyPI VTK wheel is "
                    "built without ADIOS2")
    return vtkADIOS2VTXReader


@pytest.mark.mpi
def test_vtk_vtx_reader_opens_the_mesh_stream(mpi, tmp_path):
    reader_class = _vtx_reader()
    path = str(tmp_path / "mesh.bp")
    r = mpi(2, "adios2_blocks.py", path, STEPS, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    from vtkmodules.util.numpy_support import vtk_to_numpy

    reader = reader_class()
    reader.SetFileName(path)
    reader.UpdateInformation()
    reader.Update()
    image = reader.GetOutput().GetBlock(0).GetPiece(0)
    assert image.GetDimensions() == tuple(n + 1 for n in CELLS)
    assert image.GetOrigin() == ORIGIN and image.GetSpacing() == SPACING
    t, e = expected(0)
    np.testing.assert_array_equal(vtk_to_numpy(image.GetPointData().GetArray("T")), t.reshape(-1))
    np.testing.assert_array_equal(vtk_to_numpy(image.GetCellData().GetArray("E")), e.reshape(-1))
    assert os.path.isdir(path)


@pytest.mark.mpi
def test_paraview_opens_the_mesh_stream(mpi, tmp_path):
    try:
        from paraview import simple
    except ImportError as e:
        pytest.skip(f"ParaView's Python is not here ({e}): the package index has no paraview wheel "
                    "(pip: 'No matching distribution found for paraview')")
    path = str(tmp_path / "mesh.bp")
    r = mpi(2, "adios2_blocks.py", path, STEPS, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    reader = simple.ADIOS2VTXReader(FileName=path)  # ParaView's reader of the vtk.xml schema
    reader.UpdatePipeline()
    info = reader.GetDataInformation()
    assert info.GetNumberOfPoints() == int(np.prod([n + 1 for n in CELLS]))
    assert info.GetNumberOfCells() == int(np.prod(CELLS))
    assert {"T"} <= set(reader.PointData.keys()) and {"E"} <= set(reader.CellData.keys())
    t, _ = expected(0)
    assert reader.PointData["T"].GetRange() == (float(t.min()), float(t.max()))


ANALYSIS = {
    "pipelines": {"iso": {"c": {"type": "contour", "params": {"field": "T", "iso_values": [25000.0]}}}},
    "scenes": {"view": {"plots": {"s": {"type": "pseudocolor", "pipeline": "iso", "field": "E",
                                        "min_value": 0.0, "max_value": 150.0}},
                        "renders": {"frame": {"image_width": 160, "image_height": 120,
                                              "camera": {"azimuth": 30, "elevation": 20}}}}},
}


def _analysis(prefix: str) -> dict:
    import copy

    cfg = copy.deepcopy(ANALYSIS)
    cfg["scenes"]["view"]["renders"]["frame"]["image_prefix"] = prefix
    return cfg


@pytest.mark.mpi
def test_in_transit_analysis_ranks_draw_what_one_process_draws_from_the_whole_field(mpi, tmp_path):
    import yaml
    from PIL import Image

    from adaptors import Adaptor
    from adaptors.mesh import uniform

    path = str(tmp_path / "mesh.bp")
    r = mpi(3, "adios2_blocks.py", path, STEPS, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(_analysis(str(tmp_path / "transit" / "f_%04d"))))
    r = mpi(2, "-m", "adaptors.intransit", "--stream", path, "--engine", "BP5", "--config", tmp_path / "a.yaml",
            "--timeout", 30, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"in transit: {STEPS} steps from the simulation on 2 analysis rank(s), failed_steps=0" in r.stdout
    with Adaptor(_analysis(str(tmp_path / "whole" / "f_%04d"))) as a:
        for step in range(STEPS):
            t, e = expected(step)  # (z, y, x): the [i, j, k] views are their transposes
            assert a.execute(step, 0.25 * step, [uniform({"T": t.T, "E": e.T}, origin=ORIGIN, spacing=SPACING,
                                                         element=["E"])])
    for step in range(STEPS):
        x = np.asarray(Image.open(tmp_path / "transit" / f"f_{step:04d}.png")).astype(int)
        y = np.asarray(Image.open(tmp_path / "whole" / f"f_{step:04d}.png")).astype(int)
        assert x[..., :3].std() > 5  # the surface is in the picture
        assert (np.abs(x - y) <= 1).all(axis=2).mean() > 0.999


def test_mesh_stream_refuses_domains_that_do_not_make_one_global_array(tmp_path):
    from adaptors.mesh import parse, uniform
    from adaptors.meshstream import MeshStream, read_steps

    a = np.zeros((3, 3, 3))
    ok = [uniform({"T": a}, domain_id=0), uniform({"T": a}, origin=(2, 0, 0), domain_id=1)]
    cases = [
        ([uniform({"T": a}), uniform({"T": a}, origin=(3, 0, 0), domain_id=1)], ValueError, r"do not tile"),
        ([uniform({"T": a}), uniform({"T": a}, origin=(2, 0, 0), spacing=(2, 1, 1), domain_id=1)], ValueError,
         r"domain 1 has spacing \[2.0, 1.0, 1.0\].*one spacing"),
        ([uniform({"T": a}), uniform({"T": a}, origin=(2.5, 0, 0), domain_id=1)], ValueError, r"off the grid"),
        ([uniform({"T": a}), uniform({"T": a.astype(np.float32)}, origin=(2, 0, 0), domain_id=1)], ValueError,
         r"field 'T' is vertex float32 in domain 1, vertex float64 elsewhere"),
        ([uniform({"time": a})], ValueError, r"field 'time' \(domain 0\) takes a reserved name"),
        ([uniform({"T": a}), uniform({"U": a}, origin=(2, 0, 0), domain_id=1)], ValueError,
         r"every domain must write the same fields"),
    ]
    for i, (doms, exc, match) in enumerate(cases):
        s = MeshStream(str(tmp_path / f"bad{i}.bp"), "BP5")
        with pytest.raises(exc, match=match):
            s.write(parse(doms), None, step=0, time=0.0)
        s.close()
    s = MeshStream(str(tmp_path / "ok.bp"), "BP5")
    with pytest.raises(KeyError, match=r"domain 0 has no field 'U'; fields: T"):
        s.write(parse(ok), ["U"], step=0, time=0.0)
    assert s.write(parse(ok), None, step=0, time=0.0)
    with pytest.raises(ValueError, match=r"the grid or its fields changed since the first step"):
        s.write(parse(ok[:1]), None, step=1, time=1.0)
    s.close()
    with pytest.raises(ValueError, match=r"read_steps part: expected \(k, n\) with 0 <= k < n, got \(2, 2\)"):
        next(read_steps(str(tmp_path / "ok.bp"), engine="BP5", part=(2, 2)))
    with pytest.raises(TypeError, match=r"read_steps path: expected the stream's name"):
        next(read_steps([str(tmp_path / "ok.bp")], engine="BP5"))


def test_schemas_of_a_cell_only_mesh_and_bad_arguments(tmp_path):
    from adaptors.mesh import parse, uniform
    from adaptors.meshstream import MeshStream
    from insitu.stream.schema import fides_uniform, vtx_image

    e = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
    s = MeshStream(str(tmp_path / "cells.bp"), "BP5")
    s.write(parse([uniform({"E": e}, element=["E"], spacing=(0.5, 1, 2))]), None, step=0, time=0.0)
    s.close()
    with adios2.FileReader(str(tmp_path / "cells.bp")) as f:
        # no point field: Fides (which sizes the grid from one) is left out; VTX takes TIME with the cells
        check_vtk_xml(f.read_attribute_string("vtk.xml"), (2, 3, 4), (0, 0, 0), (0.5, 1, 2), [], ["E"])
        assert not any(k.startswith("Fides_") for k in f.available_attributes())
        np.testing.assert_array_equal(f.read("E"), e.transpose())
    with pytest.raises(ValueError, match=r"vtx_image cells: expected 3 counts >= 0"):
        vtx_image((2, 3), (0, 0, 0), (1, 1, 1))
    with pytest.raises(ValueError, match=r"vtx_image origin: expected 3 values"):
        vtx_image((2, 3, 4), (0, 0), (1, 1, 1))
    with pytest.raises(ValueError, match=r"dimension: 'E' must be one of the point variables \(T\)"):
        fides_uniform((0, 0, 0), (1, 1, 1), dimension="E", variables={"T": "points", "E": "cell_set"})
    with pytest.raises(ValueError, match=r"associations must be 'points' or 'cell_set'"):
        fides_uniform((0, 0, 0), (1, 1, 1), dimension="T", variables={"T": "points", "E": "cells"})
