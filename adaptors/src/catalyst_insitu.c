/*
 * catalyst_insitu.c -- the Catalyst 2 implementation "insitu" (libcatalyst-insitu.so).
 *
 * libcatalyst loads this module when CATALYST_IMPLEMENTATION_NAME=insitu (or the node's
 * catalyst_load/implementation says so) and calls the catalyst_*_insitu functions through the
 * catalyst_api_impl table that catalyst_implementation() generates. Nodes are read with
 * libcatalyst's own Conduit C API (no second Conduit); the adaptor runs through
 * libinsitu_adaptor (adaptors/src/insitu_adaptor.c: the embedded Python, the configuration,
 * the communicator) and the shim adaptors/catalyst.py.
 *
 * The node conventions (as ParaView, SENSEI and Ascent use them):
 *   catalyst/scripts/<name>        one insitu configuration: a path (.yaml, .yml, .json) or
 *                                  {filename: path}; a .py script is refused, naming what is supported
 *   catalyst/mpi_comm              the communicator's Fortran handle (default MPI_COMM_WORLD)
 *   catalyst/state/timestep|cycle  the step (an integer); catalyst/state/time (default 0)
 *   catalyst/state/parameters      numeric "name=value" strings or {name: number}: steering params
 *   catalyst/channels/<name>       {type: mesh|multimesh, data: a Conduit Mesh Blueprint mesh}
 *
 * Field arrays are never copied: each numeric leaf of the channels becomes a view of the
 * node's memory (adaptors.catalyst.array_view: NumPy for host memory, CuPy for CUDA device
 * memory), valid only during catalyst_execute. The channels are read only on steps where
 * the configuration has something to do (an idle step costs one Python call).
 *
 * Status codes (Catalyst has no codes of its own for a bad node; these are the closest):
 *   catalyst_status_error_no_implementation    execute/results/finalize before a successful
 *                                              initialize (or after finalize)
 *   catalyst_status_error_not_found            no catalyst/scripts, or its file does not exist
 *   catalyst_status_error_unsupported_version  a script insitu cannot run (.py, unknown suffix)
 *   catalyst_status_error_incomplete           anything else: an invalid node or mesh (missing
 *                                              channel, wrong dtype, NULL data; the message names
 *                                              the node path), a bad configuration, a failed step
 * Every failure is printed once to stderr with the MPI rank (INSITU_QUIET=1 silences it); no
 * call aborts or exits: the simulation goes on, and every rank keeps taking part in each step.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <catalyst.h>
#include "catalyst_impl_insitu.h"
#include "insitu_adaptor.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifndef INSITU_VERSION
#define INSITU_VERSION "unknown"
#endif

#define SHIM_MODULE "adaptors.catalyst"
#define EXPORT __attribute__((visibility("default")))

static int g_initialized = 0;                 /* initialize succeeded, no finalize since */
static int g_mpi_ours = 0;                    /* MPI was initialized here (finalized here too) */
static int g_rank = 0, g_size = 1;            /* in the configured communicator */
static long g_last_step = -1;
static PyObject *g_execute, *g_results, *g_array_view, *g_walk; /* shim functions; the walker */
static conduit_node* g_walk_node = NULL;      /* catalyst/channels while catalyst_execute runs */
static conduit_node* g_walk_params = NULL;    /* catalyst/state/parameters, likewise */
static char g_printed[8192];                  /* last message printed (each is printed once) */

/* ------------------------------------------------------------------ errors */

static const char* status_name(int s) {
    switch (s) {
    case catalyst_status_ok: return "catalyst_status_ok";
    case catalyst_status_error_no_implementation: return "catalyst_status_error_no_implementation";
    case catalyst_status_error_not_found: return "catalyst_status_error_not_found";
    case catalyst_status_error_unsupported_version: return "catalyst_status_error_unsupported_version";
    case catalyst_status_error_incomplete: return "catalyst_status_error_incomplete";
    default: return "catalyst_status_error";
    }
}

static int world_rank(void) {
    int init = 0, fin = 0, rank = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

/* Print "insitu[rank r]: where: message (status)" unless it repeats the last one or
 * INSITU_QUIET is set; return `status`. */
static enum catalyst_status report(const char* where, enum catalyst_status status, const char* fmt, ...) {
    char msg[sizeof g_printed];
    const char* quiet = getenv("INSITU_QUIET");
    va_list ap;
    int n = snprintf(msg, sizeof msg, "%s: ", where);
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if ((quiet && *quiet && strcmp(quiet, "0") != 0) || strcmp(msg, g_printed) == 0) return status;
    snprintf(g_printed, sizeof g_printed, "%s", msg);
    fprintf(stderr, "insitu[rank %d]: %s (%s)\n", world_rank(), msg, status_name(status));
    fflush(stderr);
    return status;
}

/* insitu_status -> the closest catalyst_status. */
static enum catalyst_status from_insitu(int s) {
    switch (s) {
    case INSITU_OK: return catalyst_status_ok;
    case INSITU_ERR_NOT_INITIALIZED: return catalyst_status_error_no_implementation;
    case INSITU_ERR_NOT_FOUND: return catalyst_status_error_not_found;
    default: return catalyst_status_error_incomplete;
    }
}

/* The pending Python exception as "Type: message" (cleared). GIL held. */
static void python_error(char* buf, size_t len) {
    PyObject *type = NULL, *value = NULL, *tb = NULL, *text;
    PyErr_Fetch(&type, &value, &tb);
    if (!type) {
        snprintf(buf, len, "unknown Python error");
        return;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    text = value ? PyObject_Str(value) : NULL;
    snprintf(buf, len, "%s: %s", ((PyTypeObject*)type)->tp_name,
             text && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : "");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
}

/* A shim answer (status, message, value) -> catalyst_status, printed unless the adaptor
 * printed it (value true on failure); *value (new reference) on success. Steals `res`. */
static enum catalyst_status answer(const char* where, PyObject* res, PyObject** value) {
    enum catalyst_status status;
    if (value) *value = NULL;
    if (!res) {
        char err[4096];
        python_error(err, sizeof err);
        return report(where, catalyst_status_error_incomplete, "%s raised %s", SHIM_MODULE, err);
    }
    if (!PyTuple_Check(res) || PyTuple_Size(res) != 3 || !PyLong_Check(PyTuple_GET_ITEM(res, 0))) {
        Py_DECREF(res);
        return report(where, catalyst_status_error_incomplete, "%s returned no (status, message, value)", SHIM_MODULE);
    }
    status = from_insitu((int)PyLong_AsLong(PyTuple_GET_ITEM(res, 0)));
    if (status != catalyst_status_ok) {
        PyObject* m = PyTuple_GET_ITEM(res, 1);
        const char* text = PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
        if (PyObject_IsTrue(PyTuple_GET_ITEM(res, 2)) != 1) report(where, status, "%s", text ? text : "(no message)");
        PyErr_Clear();
    } else if (value) {
        *value = PyTuple_GET_ITEM(res, 2);
        Py_INCREF(*value);
    }
    Py_DECREF(res);
    return status;
}

/* ------------------------------------------------------------------ reading nodes */

static conduit_node* at(const conduit_node* n, const char* path) {
    conduit_node* p = (conduit_node*)n; /* the C API takes non-const nodes; nothing is changed */
    return p && conduit_node_has_path(p, path) ? conduit_node_fetch_existing(p, path) : NULL;
}

static int type_id(conduit_node* n) { return (int)conduit_datatype_id(conduit_node_dtype(n)); }

static const char* type_name(int id) {
    static const char* names[] = {"empty", "object", "list", "int8", "int16", "int32", "int64", "uint8",
                                  "uint16", "uint32", "uint64", "float32", "float64", "char8_str"};
    return id >= 0 && id <= CONDUIT_CHAR8_STR_ID ? names[id] : "unknown";
}

static int is_number(int id) { return id >= CONDUIT_INT8_ID && id <= CONDUIT_FLOAT64_ID; }

/* Element 0 of numeric node `n` as a double (and *integer: whether it holds an integer
 * type); 0 when `n` is not a number with data. */
static int scalar(conduit_node* n, double* v, int* integer) {
    int id = type_id(n);
    const void* p;
    if (!is_number(id) || conduit_node_number_of_elements(n) < 1) return 0;
    if (!conduit_datatype_endianness_matches_machine(conduit_node_dtype(n))) return 0;
    p = conduit_node_element_ptr(n, 0);
    if (!p) return 0;
    *integer = id < CONDUIT_FLOAT32_ID;
    switch (id) {
    case CONDUIT_INT8_ID: *v = *(const int8_t*)p; break;
    case CONDUIT_INT16_ID: *v = *(const int16_t*)p; break;
    case CONDUIT_INT32_ID: *v = *(const int32_t*)p; break;
    case CONDUIT_INT64_ID: *v = (double)*(const int64_t*)p; break;
    case CONDUIT_UINT8_ID: *v = *(const uint8_t*)p; break;
    case CONDUIT_UINT16_ID: *v = *(const uint16_t*)p; break;
    case CONDUIT_UINT32_ID: *v = *(const uint32_t*)p; break;
    case CONDUIT_UINT64_ID: *v = (double)*(const uint64_t*)p; break;
    case CONDUIT_FLOAT32_ID: *v = *(const float*)p; break;
    default: *v = *(const double*)p; break;
    }
    return 1;
}

/* A string leaf (NULL when `n` is not one). */
static const char* string_of(conduit_node* n) {
    return n && type_id(n) == CONDUIT_CHAR8_STR_ID && conduit_node_element_ptr(n, 0)
        ? conduit_node_as_char8_str(n) : NULL;
}

/* ------------------------------------------------------------------ node -> Python */

static PyObject* walk(conduit_node* n, char* path, size_t len, size_t cap);

/* path + "/" + name into `path` (truncated if long); returns the new length. */
static size_t push(char* path, size_t len, size_t cap, const char* name) {
    int k = snprintf(path + len, cap - len, "/%s", name);
    return k < 0 ? len : (len + (size_t)k < cap ? len + (size_t)k : cap - 1);
}

static PyObject* walk_children(conduit_node* n, char* path, size_t len, size_t cap, int as_list) {
    conduit_index_t i, count = conduit_node_number_of_children(n);
    PyObject* out = as_list ? PyList_New(0) : PyDict_New();
    for (i = 0; out && i < count; ++i) {
        conduit_node* c = conduit_node_child(n, i);
        char index[32];
        char* name = as_list ? NULL : conduit_node_name(c);
        PyObject* v;
        int rc;
        snprintf(index, sizeof index, "%lld", (long long)i);
        v = walk(c, path, push(path, len, cap, name ? name : index), cap);
        path[len] = '\0';
        rc = !v ? -1 : as_list ? PyList_Append(out, v) : PyDict_SetItemString(out, name ? name : index, v);
        Py_XDECREF(v);
        free(name);
        if (rc != 0) Py_CLEAR(out);
    }
    return out;
}

/* A numeric leaf: a Python number for one element, else a view of the node's memory. */
static PyObject* walk_number(conduit_node* n, int id, const char* path) {
    const conduit_datatype* dt = conduit_node_dtype(n);
    long long count = (long long)conduit_node_number_of_elements(n);
    void* p = count > 0 ? conduit_node_element_ptr(n, 0) : NULL;
    double v;
    int integer;
    if (count > 0 && !p)
        return PyErr_Format(PyExc_ValueError, "%s: data is NULL (%lld %s values)", path, count, type_name(id));
    if (!conduit_datatype_endianness_matches_machine(dt))
        return PyErr_Format(PyExc_ValueError, "%s: %s data in the other byte order than this machine's", path,
                            type_name(id));
    if (count == 1 && scalar(n, &v, &integer)) {
        if (!integer) return PyFloat_FromDouble(v);
        if (id == CONDUIT_UINT64_ID) return PyLong_FromUnsignedLongLong(*(const uint64_t*)p);
        if (id == CONDUIT_INT64_ID) return PyLong_FromLongLong(*(const int64_t*)p);
        return PyLong_FromDouble(v);
    }
    return PyObject_CallFunction(g_array_view, "sKsLLL", path, (unsigned long long)(uintptr_t)p, type_name(id),
                                 count, (long long)conduit_datatype_stride(dt),
                                 (long long)conduit_datatype_element_bytes(dt));
}

/* The subtree at `n` (its path in `path`) as nested dicts/lists; numeric leaves as numbers
 * or zero-copy views; NULL with a ValueError naming the path for data that cannot be read. */
static PyObject* walk(conduit_node* n, char* path, size_t len, size_t cap) {
    int id = type_id(n);
    if (id == CONDUIT_OBJECT_ID) return walk_children(n, path, len, cap, 0);
    if (id == CONDUIT_LIST_ID) return walk_children(n, path, len, cap, 1);
    if (id == CONDUIT_EMPTY_ID) Py_RETURN_NONE;
    if (id == CONDUIT_CHAR8_STR_ID) {
        const char* s = conduit_node_element_ptr(n, 0);
        long long count = (long long)conduit_node_number_of_elements(n);
        if (!s) return PyErr_Format(PyExc_ValueError, "%s: string data is NULL", path);
        return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strnlen(s, (size_t)(count > 0 ? count : 0)), "replace");
    }
    if (is_number(id)) return walk_number(n, id, path);
    return PyErr_Format(PyExc_ValueError, "%s: unknown Conduit type id %d", path, id);
}

/* adaptors.catalyst calls these (without arguments) when it needs the step's channels or
 * parameters; outside catalyst_execute the node is gone and they raise. */
static PyObject* walk_at(conduit_node* n, const char* root) {
    char path[4096];
    if (!n) return PyErr_Format(PyExc_RuntimeError, "%s: read outside catalyst_execute (the node is gone)", root);
    snprintf(path, sizeof path, "%s", root);
    return walk(n, path, strlen(path), sizeof path);
}

static PyObject* py_walk(PyObject* self, PyObject* which) {
    long w = PyLong_AsLong(which);
    if (w == -1 && PyErr_Occurred()) return NULL;
    return w == 0 ? walk_at(g_walk_node, "catalyst/channels") : walk_at(g_walk_params, "catalyst/state/parameters");
}

static PyMethodDef g_walk_def = {"walk", py_walk, METH_O,
                                 "walk(0): catalyst/channels, walk(1): catalyst/state/parameters of this step"};

/* ------------------------------------------------------------------ initialize */

static int has_suffix(const char* s, const char* suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

/* The configuration file named by catalyst/scripts (into `out`), or a status and message. */
static enum catalyst_status find_script(const conduit_node* p, char* out, size_t len, char* msg, size_t mlen) {
    conduit_node* scripts = at(p, "catalyst/scripts");
    conduit_node *entry, *file;
    const char* path;
    char* name;
    conduit_index_t count = scripts && type_id(scripts) == CONDUIT_OBJECT_ID
        ? conduit_node_number_of_children(scripts) : 0;
    if (count == 0) {
        snprintf(msg, mlen, "catalyst/scripts: missing; name one insitu configuration: catalyst/scripts/<name> "
                            "= a .yaml, .yml or .json file (or {filename: ...})");
        return catalyst_status_error_not_found;
    }
    if (count > 1) {
        snprintf(msg, mlen, "catalyst/scripts: %lld scripts; insitu runs one configuration (put every pipeline, "
                            "scene and extract in one file)", (long long)count);
        return catalyst_status_error_incomplete;
    }
    entry = conduit_node_child(scripts, 0);
    name = conduit_node_name(entry);
    file = type_id(entry) == CONDUIT_OBJECT_ID ? at(entry, "filename") : entry;
    path = string_of(file);
    if (!path || !*path) {
        snprintf(msg, mlen, "catalyst/scripts/%s%s: expected a file name (a string), got %s", name,
                 file == entry ? "" : "/filename", file ? type_name(type_id(file)) : "nothing");
        free(name);
        return catalyst_status_error_incomplete;
    }
    if (!has_suffix(path, ".yaml") && !has_suffix(path, ".yml") && !has_suffix(path, ".json")) {
        snprintf(msg, mlen, "catalyst/scripts/%s: '%s' is %s; insitu runs insitu configurations: .yaml, .yml or "
                            ".json files (see README, 'Switching a ParaView Catalyst code to insitu')",
                 name, path, has_suffix(path, ".py") ? "a ParaView Python script" : "of an unknown script type");
        free(name);
        return catalyst_status_error_unsupported_version;
    }
    if (access(path, R_OK) != 0) {
        snprintf(msg, mlen, "catalyst/scripts/%s: '%s' does not exist or is not readable", name, path);
        free(name);
        return catalyst_status_error_not_found;
    }
    free(name);
    snprintf(out, len, "%s", path);
    return catalyst_status_ok;
}

/* The shim's functions and the walker (once). GIL held. */
static int load_shim(char* msg, size_t len) {
    PyObject* mod;
    if (g_execute) return 1;
    mod = PyImport_ImportModule(SHIM_MODULE);
    if (mod) {
        g_execute = PyObject_GetAttrString(mod, "execute");
        g_results = PyObject_GetAttrString(mod, "results");
        g_array_view = PyObject_GetAttrString(mod, "array_view");
        g_walk = PyCFunction_New(&g_walk_def, NULL);
        Py_DECREF(mod);
    }
    if (!g_execute || !g_results || !g_array_view || !g_walk) {
        python_error(msg, len);
        Py_CLEAR(g_execute);
        Py_CLEAR(g_results);
        Py_CLEAR(g_array_view);
        Py_CLEAR(g_walk);
        return 0;
    }
    return 1;
}

EXPORT enum catalyst_status catalyst_initialize_insitu(const conduit_node* params) {
    static const char* where = "catalyst_initialize";
    char script[4096], msg[4600];
    conduit_node* cn = at(params, "catalyst/mpi_comm");
    MPI_Fint comm;
    double v = 0;
    int integer = 0, init = 0, fin = 0, rc, ok;
    PyGILState_STATE gil;
    enum catalyst_status status;
    if (!params) return report(where, catalyst_status_error_incomplete, "the node is NULL");
    status = find_script(params, script, sizeof script, msg, sizeof msg);
    if (status != catalyst_status_ok) return report(where, status, "%s", msg);
    if (cn && !(scalar(cn, &v, &integer) && integer))
        return report(where, catalyst_status_error_incomplete,
                      "catalyst/mpi_comm: expected the communicator's Fortran handle (an integer), got %s",
                      type_name(type_id(cn)));
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) return report(where, catalyst_status_error_incomplete, "MPI is already finalized");
    if (!init) { /* a serial code: MPI for the adaptor's communicator, finalized by catalyst_finalize */
        int provided;
        MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        g_mpi_ours = 1;
    }
    comm = cn ? (MPI_Fint)v : MPI_Comm_c2f(MPI_COMM_WORLD);
    g_initialized = 0;
    rc = insitu_initialize(script, comm); /* starts Python; prints its own errors */
    if (rc != INSITU_OK) return from_insitu(rc);
    MPI_Comm_rank(MPI_Comm_f2c(comm), &g_rank);
    MPI_Comm_size(MPI_Comm_f2c(comm), &g_size);
    gil = PyGILState_Ensure();
    ok = load_shim(msg, sizeof msg);
    PyGILState_Release(gil);
    if (!ok) {
        insitu_finalize();
        return report(where, catalyst_status_error_incomplete, "cannot import %s: %s", SHIM_MODULE, msg);
    }
    g_last_step = -1;
    g_initialized = 1;
    return catalyst_status_ok;
}

/* ------------------------------------------------------------------ execute */

/* The step and time from catalyst/state; a problem (message) when they cannot be read. */
static void read_state(const conduit_node* p, long* step, double* time, char* problem, size_t len) {
    conduit_node* s = at(p, "catalyst/state/timestep");
    conduit_node* t = at(p, "catalyst/state/time");
    const char* spath = "catalyst/state/timestep";
    double v = 0;
    int integer = 0;
    if (!s) {
        s = at(p, "catalyst/state/cycle");
        spath = "catalyst/state/cycle";
    }
    *step = g_last_step + 1;
    *time = 0.0;
    if (!s) {
        snprintf(problem, len, "catalyst/state/timestep: missing (the step: catalyst/state/timestep or cycle)");
        return;
    }
    if (!scalar(s, &v, &integer) || !integer) {
        snprintf(problem, len, "%s: expected an integer, got %s", spath, type_name(type_id(s)));
        return;
    }
    *step = (long)v;
    if (t && !scalar(t, time, &integer))
        snprintf(problem, len, "catalyst/state/time: expected a number, got %s", type_name(type_id(t)));
}

EXPORT enum catalyst_status catalyst_execute_insitu(const conduit_node* params) {
    static const char* where = "catalyst_execute";
    char problem[1024] = "";
    long step = g_last_step + 1;
    double time = 0.0;
    conduit_node *channels = NULL, *parameters = NULL;
    PyGILState_STATE gil;
    PyObject* res;
    enum catalyst_status status;
    if (!g_initialized)
        return report(where, catalyst_status_error_no_implementation,
                      "called before a successful catalyst_initialize (or after catalyst_finalize)");
    if (!params) {
        snprintf(problem, sizeof problem, "the node is NULL");
    } else {
        read_state(params, &step, &time, problem, sizeof problem);
        channels = at(params, "catalyst/channels");
        parameters = at(params, "catalyst/state/parameters");
        if (!*problem && !channels)
            snprintf(problem, sizeof problem, "catalyst/channels: missing (each mesh is a channel: "
                                              "catalyst/channels/<name>/{type: mesh|multimesh, data})");
    }
    g_last_step = step;
    /* A bad node still goes to the adaptor (as a problem): the other ranks are in this step's
     * collectives, and every rank then fails the step together and goes on to the next. */
    gil = PyGILState_Ensure();
    g_walk_node = channels;
    g_walk_params = parameters;
    res = PyObject_CallFunction(g_execute, "ldOiiOs", step, time, g_walk, g_rank, g_size,
                                parameters ? Py_True : Py_False, problem);
    g_walk_node = g_walk_params = NULL;
    status = answer(where, res, NULL);
    PyGILState_Release(gil);
    return status;
}

/* ------------------------------------------------------------------ results, about, finalize */

/* node[path] = value: a number, a string, a list of numbers (float64) or of strings. */
static void put(conduit_node* node, const char* path, PyObject* value) {
    Py_ssize_t i, n;
    if (conduit_node_has_path(node, path)) conduit_node_remove_path(node, path);
    if (PyFloat_Check(value)) {
        conduit_node_set_path_float64(node, path, PyFloat_AsDouble(value));
    } else if (PyLong_Check(value)) {
        conduit_node_set_path_int64(node, path, (conduit_int64)PyLong_AsLongLong(value));
    } else if (PyUnicode_Check(value)) {
        const char* s = PyUnicode_AsUTF8(value);
        if (s) conduit_node_set_path_char8_str(node, path, s);
    } else if (PyList_Check(value) && PyList_Size(value) > 0 && PyUnicode_Check(PyList_GET_ITEM(value, 0))) {
        conduit_node* list = conduit_node_fetch(node, path);
        for (i = 0, n = PyList_Size(value); i < n; ++i) {
            const char* s = PyUnicode_Check(PyList_GET_ITEM(value, i)) ? PyUnicode_AsUTF8(PyList_GET_ITEM(value, i))
                                                                      : NULL;
            conduit_node_set_char8_str(conduit_node_append(list), s ? s : "");
        }
    } else if (PyList_Check(value)) {
        n = PyList_Size(value);
        double* buf = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
        if (!buf) return;
        for (i = 0; i < n; ++i) buf[i] = PyFloat_AsDouble(PyList_GET_ITEM(value, i));
        conduit_node_set_path_float64_ptr(node, path, buf, (conduit_index_t)n); /* copied */
        free(buf);
    }
    PyErr_Clear();
}

EXPORT enum catalyst_status catalyst_results_insitu(conduit_node* params) {
    static const char* where = "catalyst_results";
    PyGILState_STATE gil;
    PyObject* items = NULL;
    enum catalyst_status status;
    Py_ssize_t i;
    if (!g_initialized)
        return report(where, catalyst_status_error_no_implementation,
                      "called before a successful catalyst_initialize (or after catalyst_finalize)");
    if (!params) return report(where, catalyst_status_error_incomplete, "the node is NULL");
    gil = PyGILState_Ensure();
    status = answer(where, PyObject_CallNoArgs(g_results), &items);
    if (status == catalyst_status_ok && items && PyList_Check(items)) {
        for (i = 0; i < PyList_Size(items); ++i) {
            PyObject* kv = PyList_GET_ITEM(items, i);
            if (PyTuple_Check(kv) && PyTuple_Size(kv) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(kv, 0))) {
                const char* path = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kv, 0));
                if (path) put(params, path, PyTuple_GET_ITEM(kv, 1));
            }
        }
    }
    Py_XDECREF(items);
    PyErr_Clear();
    PyGILState_Release(gil);
    return status;
}

/* Needs no Python: what this implementation is and what it reads. */
EXPORT enum catalyst_status catalyst_about_insitu(conduit_node* params) {
    static const char* channels[] = {"mesh", "multimesh", NULL};
    static const char* meshes[] = {"uniform", NULL}; /* coordsets and topologies adaptors/mesh.py reads */
    static const char* assoc[] = {"vertex", "element", NULL};
    static const char* scripts[] = {".yaml", ".yml", ".json", NULL};
    struct { const char* path; const char** values; } lists[] = {
        {"insitu/channel_types", channels}, {"insitu/coordset_types", meshes}, {"insitu/topology_types", meshes},
        {"insitu/field_associations", assoc}, {"insitu/script_types", scripts}};
    size_t i;
    if (!params) return report("catalyst_about", catalyst_status_error_incomplete, "the node is NULL");
    conduit_node_set_path_char8_str(params, "catalyst/version", CATALYST_VERSION);
    conduit_node_set_path_char8_str(params, "catalyst/abi_version", CATALYST_ABI_VERSION);
    conduit_node_set_path_char8_str(params, "catalyst/implementation", "insitu");
    conduit_node_set_path_int32(params, "catalyst/use_mpi", 1);
    conduit_node_set_path_char8_str(params, "insitu/version", INSITU_VERSION);
    for (i = 0; i < sizeof lists / sizeof lists[0]; ++i) {
        conduit_node* list;
        const char** v;
        if (conduit_node_has_path(params, lists[i].path)) conduit_node_remove_path(params, lists[i].path);
        list = conduit_node_fetch(params, lists[i].path);
        for (v = lists[i].values; *v; ++v) conduit_node_set_char8_str(conduit_node_append(list), *v);
    }
    conduit_node_set_path_char8_str(params, "insitu/field_components", "mcarray x, y, z: fields <name>/x, "
                                                                      "<name>/y, <name>/z");
    return catalyst_status_ok;
}

EXPORT enum catalyst_status catalyst_finalize_insitu(const conduit_node* params) {
    static const char* where = "catalyst_finalize";
    int rc, fin = 0;
    if (!g_initialized)
        return report(where, catalyst_status_error_no_implementation,
                      "called before a successful catalyst_initialize (or twice)");
    g_initialized = 0;
    rc = insitu_finalize(); /* prints its own errors */
    if (g_mpi_ours) {
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
        g_mpi_ours = 0;
    }
    return from_insitu(rc);
}
