"""ctypes mirror of ``insitu_adaptor.h`` for the tests (checked against the C compiler's layout)."""

from __future__ import annotations

import ctypes as ct

NAME_MAX = 64
OK, ERR_ARGUMENT, ERR_CONFIG, ERR_MESH, ERR_DEVICE_UNAVAILABLE, ERR_NOT_INITIALIZED, ERR_EXECUTE, \
    ERR_NOT_FOUND, ERR_PYTHON = range(9)
FLOAT32, FLOAT64, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64 = range(1, 11)
HOST, CUDA = 0, 1
VERTEX, ELEMENT = 1, 2
LAYOUT_C, LAYOUT_FORTRAN, LAYOUT_STRIDED = 1, 2, 3


class Field(ct.Structure):
    _fields_ = [("name", ct.c_char * NAME_MAX), ("association", ct.c_int32), ("dtype", ct.c_int32),
                ("memory", ct.c_int32), ("device", ct.c_int32), ("layout", ct.c_int32),
                ("reserved", ct.c_int32), ("dims", ct.c_int64 * 3), ("strides", ct.c_int64 * 3),
                ("data", ct.c_void_p)]


class Domain(ct.Structure):
    _fields_ = [("domain_id", ct.c_int64), ("dims", ct.c_int64 * 3), ("origin", ct.c_double * 3),
                ("spacing", ct.c_double * 3), ("nfields", ct.c_int32), ("reserved", ct.c_int32),
                ("fields", ct.POINTER(Field))]


class Mesh(ct.Structure):
    _fields_ = [("ndomains", ct.c_int32), ("reserved", ct.c_int32), ("domains", ct.POINTER(Domain))]


class Results(ct.Structure):
    _fields_ = [("stop", ct.c_int32), ("nerrors", ct.c_int32), ("step", ct.c_int64),
                ("nparams", ct.c_int32), ("reserved", ct.c_int32)]


def load(path: str) -> ct.CDLL:
    """The library with its entry points typed."""
    lib = ct.CDLL(path)
    lib.insitu_initialize.argtypes = [ct.c_char_p, ct.c_int]
    lib.insitu_execute.argtypes = [ct.c_long, ct.c_double, ct.POINTER(Mesh)]
    lib.insitu_results.argtypes = [ct.POINTER(Results)]
    lib.insitu_get_param.argtypes = [ct.c_char_p, ct.POINTER(ct.c_double)]
    lib.insitu_get_iso_count.argtypes = [ct.c_char_p, ct.POINTER(ct.c_int)]
    lib.insitu_get_iso_value.argtypes = [ct.c_char_p, ct.c_int, ct.POINTER(ct.c_double)]
    lib.insitu_finalize.argtypes = []
    lib.insitu_last_error.restype = ct.c_char_p
    lib.insitu_status_name.restype = ct.c_char_p
    lib.insitu_status_name.argtypes = [ct.c_int]
    return lib


def field(name, data=None, *, association=VERTEX, dtype=FLOAT64, memory=HOST, device=0, layout=LAYOUT_C,
          dims=(0, 0, 0), strides=(0, 0, 0), address=None) -> Field:
    """A Field over a NumPy array `data` (its address), or a raw `address`."""
    f = Field()
    f.name = name.encode()
    f.association, f.dtype, f.memory, f.device, f.layout = association, dtype, memory, device, layout
    f.dims[:] = dims
    f.strides[:] = strides
    f.data = address if address is not None else (data.ctypes.data if data is not None else None)
    return f


def domain(domain_id, dims, fields, *, origin=(0.0, 0.0, 0.0), spacing=(1.0, 1.0, 1.0)) -> Domain:
    d = Domain()
    d.domain_id = domain_id
    d.dims[:] = dims
    d.origin[:] = origin
    d.spacing[:] = spacing
    arr = (Field * len(fields))(*fields)
    d.nfields = len(fields)
    d.fields = ct.cast(arr, ct.POINTER(Field)) if fields else None
    d._keep = arr
    return d


def mesh(domains) -> Mesh:
    m = Mesh()
    arr = (Domain * len(domains))(*domains)
    m.ndomains = len(domains)
    m.domains = ct.cast(arr, ct.POINTER(Domain)) if domains else None
    m._keep = arr
    return m
