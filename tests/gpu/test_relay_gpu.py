"""The relay extract from device fields: the files equal those written from the same
fields on the host; each device array is copied to the host once (counted)."""

import os
import sys

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from adaptors import mesh  # noqa: E402
from adaptors.relay import write_mesh  # noqa: E402
from blueprint_verify import load_root, problems  # noqa: E402
from insitu import arrays  # noqa: E402
from test_relay import cell_inputs, uniform_inputs  # noqa: E402


def _on_device(tree):
    """A Blueprint dict with every field array (vertex/element values, mcarray components,
    ghosts) on the device; coordinates and topology stay on the host."""
    out = dict(tree)
    out["fields"] = {}
    for name, f in tree["fields"].items():
        v = f["values"]
        v = {c: cupy.asarray(a) for c, a in v.items()} if isinstance(v, dict) else cupy.asarray(v)
        out["fields"][name] = {**f, "values": v}
    return out


def _same_files(a_root, b_root):
    _, a = load_root(a_root)
    _, b = load_root(b_root)
    assert len(a) == len(b)
    for da, db in zip(a, b):
        assert problems(da) == [] and problems(db) == []
        _equal(da, db)


def _equal(x, y):
    if isinstance(x, dict):
        assert list(x) == list(y)
        for k in x:
            _equal(x[k], y[k])
    elif isinstance(x, np.ndarray):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    else:
        assert x == y


@pytest.mark.parametrize("protocol", ["hdf5", "json"])
def test_uniform_device_fields_write_what_host_fields_write(tmp_path, protocol):
    host, _, given = uniform_inputs(3)
    dev = mesh.parse([_on_device(d) for d in given])
    assert arrays.is_device_array(dev[0].fields["T"].values)
    ref = write_mesh(str(tmp_path / "host" / "s"), host, protocol=protocol, cycle=2)
    with arrays.count_transfers() as c:
        got = write_mesh(str(tmp_path / "dev" / "s"), dev, protocol=protocol, cycle=2)
    # per domain: T, P, K and the 3 components of vel, once each; ghosts come from the real box
    assert (c.d2h_calls, c.h2d_calls) == (3 * 6, 0)
    _same_files(ref, got)


def test_cell_device_fields_write_what_host_fields_write(tmp_path):
    host, given = cell_inputs()
    dev = mesh.parse([_on_device(d) for d in given], cells=True)
    assert arrays.is_device_array(dev[0].mesh.points)
    ref = write_mesh(str(tmp_path / "host" / "s"), host, cycle=2)
    with arrays.count_transfers() as c:
        got = write_mesh(str(tmp_path / "dev" / "s"), dev, cycle=2)
    # per domain: points, types, connectivity, offsets, each field; the ghost mask (domain 0)
    nfields = sum(len(g["fields"]) for g in given) - 1  # domain 0's ghosts are its mask, not a field
    assert (c.d2h_calls, c.h2d_calls) == (3 * 4 + nfields + 1, 0)
    _same_files(ref, got)
