/*
 * insitu_adaptor.c -- the C ABI (insitu_adaptor.h) over the Python adaptor.
 *
 * Each entry point: check its own arguments, make sure an interpreter runs (embedding
 * one on first use), take the GIL, describe the C structs as plain Python values (ints,
 * floats, strings, addresses) and call the shim adaptors/capi.py, which builds the
 * zero-copy arrays and calls the adaptor module. The shim answers every call with
 * (status, message, value) and never raises (on failure `value` is true when the adaptor
 * has printed the error itself); this file still catches every Python error
 * of its own calls, so nothing escapes to the simulation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define INSITU_BUILDING 1
#include "insitu_adaptor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef INSITU_PYTHON_EXECUTABLE
#define INSITU_PYTHON_EXECUTABLE ""
#endif
#ifndef INSITU_SOURCE_DIR
#define INSITU_SOURCE_DIR ""
#endif

#define SHIM_MODULE "adaptors.capi"

static char g_error[8192];      /* message of the last failing call, "" otherwise */
static char g_printed[8192];    /* last message printed to stderr (printed once) */
static int g_initialized = 0;   /* insitu_initialize succeeded and no finalize since */
static PyObject* g_shim = NULL; /* adaptors.capi, imported once */

/* ------------------------------------------------------------------ errors */

static int world_rank(void) {
    int init = 0, fin = 0, rank = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

/* Record the failure of entry point `where`; print it to stderr unless `quiet` (the adaptor
 * printed it already) or it repeats the last message printed (a failure repeated every step
 * is printed once). */
static int vrecord(const char* where, int status, int quiet, const char* fmt, va_list ap) {
    char msg[sizeof g_error - 64];
    const char* env = getenv("INSITU_QUIET");
    vsnprintf(msg, sizeof msg, fmt, ap);
    snprintf(g_error, sizeof g_error, "%s: %s", where, msg);
    if (env && *env && strcmp(env, "0") != 0) quiet = 1;
    if (!quiet && strcmp(g_error, g_printed) != 0) {
        snprintf(g_printed, sizeof g_printed, "%s", g_error);
        fprintf(stderr, "insitu[rank %d]: %s (%s)\n", world_rank(), g_error, insitu_status_name(status));
        fflush(stderr);
    }
    return status;
}

static int fail(const char* where, int status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vrecord(where, status, 0, fmt, ap);
    va_end(ap);
    return status;
}

static int fail_quiet(const char* where, int status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vrecord(where, status, 1, fmt, ap);
    va_end(ap);
    return status;
}

static int ok(void) {
    g_error[0] = '\0';
    return INSITU_OK;
}

const char* insitu_last_error(void) { return g_error; }

const char* insitu_status_name(int status) {
    switch (status) {
    case INSITU_OK: return "INSITU_OK";
    case INSITU_ERR_ARGUMENT: return "INSITU_ERR_ARGUMENT";
    case INSITU_ERR_CONFIG: return "INSITU_ERR_CONFIG";
    case INSITU_ERR_MESH: return "INSITU_ERR_MESH";
    case INSITU_ERR_DEVICE_UNAVAILABLE: return "INSITU_ERR_DEVICE_UNAVAILABLE";
    case INSITU_ERR_NOT_INITIALIZED: return "INSITU_ERR_NOT_INITIALIZED";
    case INSITU_ERR_EXECUTE: return "INSITU_ERR_EXECUTE";
    case INSITU_ERR_NOT_FOUND: return "INSITU_ERR_NOT_FOUND";
    case INSITU_ERR_PYTHON: return "INSITU_ERR_PYTHON";
    default: return "INSITU_ERR_UNKNOWN";
    }
}

/* The pending Python exception as "Type: message" (cleared). GIL held. */
static void fetch_python_error(char* buf, size_t len) {
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    PyErr_Fetch(&type, &value, &tb);
    if (!type) {
        snprintf(buf, len, "unknown Python error");
        return;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject* name = PyObject_GetAttrString(type, "__name__");
    PyObject* text = value ? PyObject_Str(value) : NULL;
    const char* n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    const char* t = text && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : NULL;
    snprintf(buf, len, "%s: %s", n ? n : "Exception", t ? t : "");
    Py_XDECREF(name);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
}

/* ------------------------------------------------------------------ interpreter */

static int usable_file(const char* path) {
    FILE* f;
    if (!path || !*path) return 0;
    f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    return 1;
}

/* The python executable whose installation (and venv) the embedded interpreter takes:
 * $INSITU_PYTHON, $VIRTUAL_ENV/bin/python3, the configured one; NULL: libpython's own. */
static const char* choose_python(char* buf, size_t len, char* why, size_t wlen) {
    const char* env = getenv("INSITU_PYTHON");
    const char* venv = getenv("VIRTUAL_ENV");
    if (env && *env) {
        if (usable_file(env)) return env;
        snprintf(why, wlen, "INSITU_PYTHON=%s does not exist", env);
        return NULL;
    }
    if (venv && *venv) {
        snprintf(buf, len, "%s/bin/python3", venv);
        if (usable_file(buf)) return buf;
        snprintf(buf, len, "%s/bin/python", venv);
        if (usable_file(buf)) return buf;
    }
    if (usable_file(INSITU_PYTHON_EXECUTABLE)) return INSITU_PYTHON_EXECUTABLE;
    return "";
}

/* Append `dir` to sys.path unless it is there. GIL held. */
static void append_sys_path(const char* dir) {
    PyObject* path = PySys_GetObject("path"); /* borrowed */
    PyObject* item;
    if (!dir || !*dir || !path || !PyList_Check(path)) return;
    item = PyUnicode_DecodeFSDefault(dir);
    if (!item) {
        PyErr_Clear();
        return;
    }
    if (PySequence_Contains(path, item) == 0) PyList_Append(path, item);
    PyErr_Clear();
    Py_DECREF(item);
}

/* Start an interpreter if the process has none; import the shim. On success the GIL is
 * held (state in *gil); on failure it is not, and the error is recorded. */
static int enter_python(const char* where, PyGILState_STATE* gil) {
    if (!Py_IsInitialized()) {
        char buf[4096], why[4200] = "";
        const char* exe = choose_python(buf, sizeof buf, why, sizeof why);
        PyConfig config;
        PyStatus st;
        if (!exe) return fail(where, INSITU_ERR_PYTHON, "cannot start Python: %s", why);
        PyConfig_InitPythonConfig(&config);
        config.install_signal_handlers = 0; /* as Py_InitializeEx(0): the simulation keeps its signals */
        config.parse_argv = 0;
        if (*exe) {
            st = PyConfig_SetBytesString(&config, &config.program_name, exe);
            if (PyStatus_Exception(st)) {
                PyConfig_Clear(&config);
                return fail(where, INSITU_ERR_PYTHON, "cannot start Python: %s",
                            st.err_msg ? st.err_msg : "bad program name");
            }
        }
        st = Py_InitializeFromConfig(&config);
        PyConfig_Clear(&config);
        if (PyStatus_Exception(st)) {
            return fail(where, INSITU_ERR_PYTHON, "cannot start Python (as %s): %s%s%s",
                        *exe ? exe : "libpython's installation", st.func ? st.func : "",
                        st.func ? ": " : "", st.err_msg ? st.err_msg : "initialization failed");
        }
        PyEval_SaveThread(); /* release the GIL: every entry point takes it with PyGILState */
    }
    *gil = PyGILState_Ensure();
    if (!g_shim) {
        const char* src = getenv("INSITU_SOURCE_DIR");
        append_sys_path(src && *src ? src : INSITU_SOURCE_DIR);
        g_shim = PyImport_ImportModule(SHIM_MODULE);
        if (!g_shim) {
            char err[4096], info[4096] = "";
            PyObject* sys_exe = PySys_GetObject("executable");
            PyObject* sys_path = PySys_GetObject("path");
            PyObject* path_repr;
            fetch_python_error(err, sizeof err);
            path_repr = sys_path ? PyObject_Repr(sys_path) : NULL;
            snprintf(info, sizeof info, "sys.executable=%s, sys.path=%s",
                     sys_exe && PyUnicode_Check(sys_exe) ? PyUnicode_AsUTF8(sys_exe) : "?",
                     path_repr && PyUnicode_Check(path_repr) ? PyUnicode_AsUTF8(path_repr) : "?");
            Py_XDECREF(path_repr);
            PyErr_Clear();
            PyGILState_Release(*gil);
            return fail(where, INSITU_ERR_PYTHON,
                        "cannot import %s (%s); set INSITU_PYTHON to the project's python or "
                        "INSITU_SOURCE_DIR to its source root (%s)", SHIM_MODULE, err, info);
        }
    }
    return INSITU_OK;
}

/* Call shim.<method>(args) -> (status, message, value). Steals `args`. GIL held.
 * Returns the status; *value (new reference, may be NULL) on INSITU_OK. */
static int call_shim(const char* where, const char* method, PyObject* args, PyObject** value) {
    PyObject* fn = NULL;
    PyObject* res = NULL;
    int status;
    if (value) *value = NULL;
    if (!args) {
        char err[4096];
        fetch_python_error(err, sizeof err);
        return fail(where, INSITU_ERR_PYTHON, "cannot build the arguments: %s", err);
    }
    fn = PyObject_GetAttrString(g_shim, method);
    if (fn) res = PyObject_CallObject(fn, args);
    Py_XDECREF(fn);
    Py_DECREF(args);
    if (!res) {
        char err[4096];
        fetch_python_error(err, sizeof err);
        return fail(where, INSITU_ERR_PYTHON, "%s.%s raised %s", SHIM_MODULE, method, err);
    }
    if (!PyTuple_Check(res) || PyTuple_Size(res) != 3 || !PyLong_Check(PyTuple_GET_ITEM(res, 0))) {
        Py_DECREF(res);
        return fail(where, INSITU_ERR_PYTHON, "%s.%s returned no (status, message, value)", SHIM_MODULE, method);
    }
    status = (int)PyLong_AsLong(PyTuple_GET_ITEM(res, 0));
    if (status != INSITU_OK) {
        PyObject* m = PyTuple_GET_ITEM(res, 1);
        const char* text = PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
        int reported = PyObject_IsTrue(PyTuple_GET_ITEM(res, 2)) == 1; /* the adaptor printed it */
        if (!text) PyErr_Clear();
        PyErr_Clear();
        status = reported ? fail_quiet(where, status, "%s", text ? text : "(no message)")
                          : fail(where, status, "%s", text ? text : "(no message)");
        Py_DECREF(res);
        return status;
    }
    if (value) {
        *value = PyTuple_GET_ITEM(res, 2);
        Py_INCREF(*value);
    }
    Py_DECREF(res);
    return ok();
}

/* ------------------------------------------------------------------ mesh -> Python */

static PyObject* triple_ll(const int64_t v[3]) {
    return Py_BuildValue("(LLL)", (long long)v[0], (long long)v[1], (long long)v[2]);
}

static PyObject* triple_d(const double v[3]) { return Py_BuildValue("(ddd)", v[0], v[1], v[2]); }

/* Set d[key] = value (stolen); returns 0 on failure. */
static int put(PyObject* d, const char* key, PyObject* value) {
    int rc;
    if (!value) return 0;
    rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc == 0;
}

/* The description of one field as a dict of plain values; NULL and *bad set on a
 * structural problem (message in msg); NULL with a Python error otherwise. */
static PyObject* describe_field(const insitu_field* f, char* msg, size_t len, int* bad) {
    size_t n = strnlen(f->name, INSITU_NAME_MAX);
    PyObject* d;
    if (n == INSITU_NAME_MAX) {
        snprintf(msg, len, "name is not NUL-terminated within INSITU_NAME_MAX=%d bytes", INSITU_NAME_MAX);
        *bad = 1;
        return NULL;
    }
    d = PyDict_New();
    if (!d) return NULL;
    if (!put(d, "name", PyUnicode_DecodeUTF8(f->name, (Py_ssize_t)n, "replace"))
        || !put(d, "association", PyLong_FromLong(f->association))
        || !put(d, "dtype", PyLong_FromLong(f->dtype))
        || !put(d, "memory", PyLong_FromLong(f->memory))
        || !put(d, "device", PyLong_FromLong(f->device))
        || !put(d, "layout", PyLong_FromLong(f->layout))
        || !put(d, "dims", triple_ll(f->dims))
        || !put(d, "strides", triple_ll(f->strides))
        || !put(d, "data", PyLong_FromVoidPtr((void*)f->data))) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* [domain dict, ...] for the shim; NULL with *bad and msg set on a structural problem
 * (NULL arrays, negative counts), NULL with a Python error otherwise. */
static PyObject* describe_mesh(const insitu_mesh* mesh, char* msg, size_t len, int* bad) {
    PyObject* domains;
    int32_t i, j;
    *bad = 0;
    if (mesh->ndomains < 0) {
        snprintf(msg, len, "ndomains=%d is negative", (int)mesh->ndomains);
        *bad = 1;
        return NULL;
    }
    if (mesh->ndomains > 0 && !mesh->domains) {
        snprintf(msg, len, "domains is NULL but ndomains=%d", (int)mesh->ndomains);
        *bad = 1;
        return NULL;
    }
    domains = PyList_New(0);
    if (!domains) return NULL;
    for (i = 0; i < mesh->ndomains; ++i) {
        const insitu_domain* dom = &mesh->domains[i];
        PyObject* d = PyDict_New();
        PyObject* fields = PyList_New(0);
        int good = d && fields;
        if (good && dom->nfields < 0) {
            snprintf(msg, len, "domains[%d] (domain_id %lld): nfields=%d is negative", (int)i,
                     (long long)dom->domain_id, (int)dom->nfields);
            *bad = 1;
            good = 0;
        }
        if (good && dom->nfields > 0 && !dom->fields) {
            snprintf(msg, len, "domains[%d] (domain_id %lld): fields is NULL but nfields=%d", (int)i,
                     (long long)dom->domain_id, (int)dom->nfields);
            *bad = 1;
            good = 0;
        }
        for (j = 0; good && j < dom->nfields; ++j) {
            char fmsg[512];
            PyObject* f = describe_field(&dom->fields[j], fmsg, sizeof fmsg, bad);
            if (!f) {
                if (*bad)
                    snprintf(msg, len, "domains[%d] (domain_id %lld)/fields[%d]: %s", (int)i,
                             (long long)dom->domain_id, (int)j, fmsg);
                good = 0;
                break;
            }
            good = PyList_Append(fields, f) == 0;
            Py_DECREF(f);
        }
        if (good) {
            good = put(d, "domain_id", PyLong_FromLongLong((long long)dom->domain_id))
                && put(d, "dims", triple_ll(dom->dims)) && put(d, "origin", triple_d(dom->origin))
                && put(d, "spacing", triple_d(dom->spacing));
        }
        if (good) {
            good = PyDict_SetItemString(d, "fields", fields) == 0 && PyList_Append(domains, d) == 0;
        }
        Py_XDECREF(fields);
        Py_XDECREF(d);
        if (!good) {
            Py_DECREF(domains);
            return NULL;
        }
    }
    return domains;
}

/* ------------------------------------------------------------------ entry points */

/* Whether Fortran handle `comm` names a communicator: ask its size with errors returned
 * (an invalid handle would otherwise abort the job inside the adaptor). */
static int valid_comm(MPI_Fint comm) {
    MPI_Errhandler world, self;
    int size = 0, rc;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
    MPI_Comm_get_errhandler(MPI_COMM_SELF, &self);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    rc = MPI_Comm_size(MPI_Comm_f2c(comm), &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, self);
    MPI_Errhandler_free(&world);
    MPI_Errhandler_free(&self);
    return rc == MPI_SUCCESS && size > 0;
}

int insitu_initialize(const char* config_path, MPI_Fint comm) {
    static const char* where = "insitu_initialize";
    PyGILState_STATE gil;
    int mpi_init = 0, mpi_fin = 0, status;
    if (!config_path) return fail(where, INSITU_ERR_ARGUMENT, "config_path is NULL");
    if (!*config_path) return fail(where, INSITU_ERR_ARGUMENT, "config_path is empty");
    MPI_Initialized(&mpi_init);
    MPI_Finalized(&mpi_fin);
    if (!mpi_init || mpi_fin)
        return fail(where, INSITU_ERR_ARGUMENT, "MPI is %s: call MPI_Init before insitu_initialize",
                    mpi_fin ? "already finalized" : "not initialized");
    if (MPI_Comm_f2c(comm) == MPI_COMM_NULL)
        return fail(where, INSITU_ERR_ARGUMENT, "comm is MPI_COMM_NULL (Fortran handle %ld)", (long)comm);
    if (!valid_comm(comm))
        return fail(where, INSITU_ERR_ARGUMENT,
                    "comm=%ld is not a valid communicator handle (pass MPI_Comm_c2f(comm) in C, "
                    "comm%%MPI_VAL with mpi_f08)", (long)comm);
    status = enter_python(where, &gil);
    if (status != INSITU_OK) return status;
    status = call_shim(where, "initialize", Py_BuildValue("(sl)", config_path, (long)comm), NULL);
    PyGILState_Release(gil);
    g_initialized = status == INSITU_OK;
    return status;
}

/* A mesh rejected here still goes to the shim (as a problem, without domains): the other
 * ranks are in this step's collectives, and the adaptor agrees the failure with them, so
 * every rank gets an error code for this step and all go on to the next one together. */
static int reject_mesh(const char* where, long step, double time, int status, const char* fmt, ...) {
    char text[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return call_shim(where, "execute", Py_BuildValue("(ldOis)", step, time, Py_None, status, text), NULL);
}

int insitu_execute(long step, double time, const insitu_mesh* mesh) {
    static const char* where = "insitu_execute";
    PyGILState_STATE gil;
    PyObject* domains;
    char msg[1024] = "";
    int bad = 0, status;
    if (!g_initialized)
        return fail(where, INSITU_ERR_NOT_INITIALIZED, "called before insitu_initialize (or after insitu_finalize)");
    status = enter_python(where, &gil);
    if (status != INSITU_OK) return status;
    if (!mesh) {
        status = reject_mesh(where, step, time, INSITU_ERR_ARGUMENT, "mesh is NULL");
        PyGILState_Release(gil);
        return status;
    }
    domains = describe_mesh(mesh, msg, sizeof msg, &bad);
    if (!domains) {
        char err[4096];
        if (bad) {
            PyErr_Clear();
            status = reject_mesh(where, step, time, INSITU_ERR_MESH, "invalid mesh: %s", msg);
        } else {
            fetch_python_error(err, sizeof err);
            status = reject_mesh(where, step, time, INSITU_ERR_PYTHON, "cannot describe the mesh: %s", err);
        }
        PyGILState_Release(gil);
        return status;
    }
    status = call_shim(where, "execute", Py_BuildValue("(ldNis)", step, time, domains, INSITU_OK, ""), NULL);
    PyGILState_Release(gil);
    return status;
}

int insitu_results(insitu_results_t* out) {
    static const char* where = "insitu_results";
    PyGILState_STATE gil;
    PyObject* v = NULL;
    int status;
    long long stop = 0, nerrors = 0, step = -1, nparams = 0;
    if (!out) return fail(where, INSITU_ERR_ARGUMENT, "out is NULL");
    memset(out, 0, sizeof *out);
    out->step = -1;
    if (!g_initialized)
        return fail(where, INSITU_ERR_NOT_INITIALIZED, "called before insitu_initialize (or after insitu_finalize)");
    status = enter_python(where, &gil);
    if (status != INSITU_OK) return status;
    status = call_shim(where, "results", PyTuple_New(0), &v);
    if (status == INSITU_OK && !PyArg_ParseTuple(v, "LLLL", &stop, &nerrors, &step, &nparams)) {
        PyErr_Clear();
        status = fail(where, INSITU_ERR_PYTHON, "%s.results returned no (stop, nerrors, step, nparams)", SHIM_MODULE);
    }
    Py_XDECREF(v);
    PyGILState_Release(gil);
    if (status == INSITU_OK) {
        out->stop = stop != 0;
        out->nerrors = (int32_t)nerrors;
        out->step = (int64_t)step;
        out->nparams = (int32_t)nparams;
    }
    return status;
}

/* Call a shim getter (name[, index]) that answers a float (dval) or a count (ival). */
static int get_number(const char* where, const char* method, const char* name, int index, int with_index,
                      double* dval, int* ival) {
    PyGILState_STATE gil;
    PyObject* v = NULL;
    int status;
    if (!g_initialized)
        return fail(where, INSITU_ERR_NOT_INITIALIZED, "called before insitu_initialize (or after insitu_finalize)");
    status = enter_python(where, &gil);
    if (status != INSITU_OK) return status;
    status = call_shim(where, method, with_index ? Py_BuildValue("(si)", name, index) : Py_BuildValue("(s)", name),
                       &v);
    if (status == INSITU_OK) {
        double d = PyFloat_AsDouble(v);
        long n = PyLong_Check(v) ? PyLong_AsLong(v) : 0;
        if (PyErr_Occurred()) {
            char err[1024];
            fetch_python_error(err, sizeof err);
            status = fail(where, INSITU_ERR_PYTHON, "%s.%s returned a non-number: %s", SHIM_MODULE, method, err);
        } else {
            if (dval) *dval = d;
            if (ival) *ival = (int)n;
        }
    }
    Py_XDECREF(v);
    PyGILState_Release(gil);
    return status;
}

int insitu_get_param(const char* name, double* value) {
    static const char* where = "insitu_get_param";
    if (!name) return fail(where, INSITU_ERR_ARGUMENT, "name is NULL");
    if (!value) return fail(where, INSITU_ERR_ARGUMENT, "value is NULL (parameter '%s')", name);
    return get_number(where, "get_param", name, 0, 0, value, NULL);
}

int insitu_get_iso_count(const char* pipeline, int* count) {
    static const char* where = "insitu_get_iso_count";
    if (!pipeline) return fail(where, INSITU_ERR_ARGUMENT, "pipeline is NULL");
    if (!count) return fail(where, INSITU_ERR_ARGUMENT, "count is NULL (pipeline '%s')", pipeline);
    return get_number(where, "get_iso_count", pipeline, 0, 0, NULL, count);
}

int insitu_get_iso_value(const char* pipeline, int index, double* value) {
    static const char* where = "insitu_get_iso_value";
    if (!pipeline) return fail(where, INSITU_ERR_ARGUMENT, "pipeline is NULL");
    if (!value) return fail(where, INSITU_ERR_ARGUMENT, "value is NULL (pipeline '%s')", pipeline);
    return get_number(where, "get_iso_value", pipeline, index, 1, value, NULL);
}

int insitu_finalize(void) {
    static const char* where = "insitu_finalize";
    PyGILState_STATE gil;
    int status;
    if (!g_initialized)
        return fail(where, INSITU_ERR_NOT_INITIALIZED, "called before insitu_initialize (or twice)");
    g_initialized = 0;
    status = enter_python(where, &gil);
    if (status != INSITU_OK) return status;
    status = call_shim(where, "finalize", PyTuple_New(0), NULL);
    PyGILState_Release(gil);
    return status;
}
