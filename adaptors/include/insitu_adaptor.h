/*
 * insitu_adaptor.h -- C ABI of the insitu Catalyst-style adaptor.
 *
 * A simulation written in C, C++ or Fortran (module insitu_adaptor) calls
 *
 *     MPI_Init(...);
 *     insitu_initialize("insitu.yaml", MPI_Comm_c2f(MPI_COMM_WORLD));
 *     for (step ...) {
 *         ... advance ...
 *         insitu_execute(step, time, &mesh);     // fields by pointer, never copied
 *         insitu_results(&r); if (r.stop) break; // steering / stop requests
 *     }
 *     insitu_finalize();
 *     MPI_Finalize();
 *
 * Behind it runs the Python adaptor (package `adaptors`) in an embedded interpreter
 * (or in the running one when this library is loaded into a Python process). Every
 * entry point returns an insitu_status; on failure insitu_last_error() says why (the
 * message is also printed to stderr once, prefixed with the MPI rank). No entry point
 * aborts, exits or lets a Python exception escape: the simulation always goes on.
 *
 * Memory: fields are read in place (NumPy views of host memory, CuPy views of CUDA
 * device memory). The pointers need to stay valid, and the data unchanged, only for the
 * duration of insitu_execute. Device data must be ready: finish (synchronize) the
 * kernels that write it before calling insitu_execute.
 *
 * Threads: call the entry points from one thread at a time (any thread).
 *
 * Python: when the process has no interpreter yet, insitu_initialize starts one that
 * behaves as if this interpreter had been run (first that applies):
 *   1. $INSITU_PYTHON            path of a python executable (e.g. /path/.venv/bin/python);
 *   2. $VIRTUAL_ENV/bin/python3  an activated virtual environment;
 *   3. the Python3_EXECUTABLE this library was configured with (CMake; the project's venv);
 *   4. otherwise libpython's own installation.
 * Its site-packages come from that interpreter's prefix (a venv's pyvenv.cfg included);
 * PYTHONPATH and PYTHONHOME are honoured as by python itself; the project's source root
 * (baked at configure time, or $INSITU_SOURCE_DIR) is appended to sys.path, so an installed
 * `adaptors` wins over the source tree. $INSITU_ADAPTOR names another Python module with
 * the adaptor's functions (initialize, execute, results, finalize) in place of `adaptors`.
 * Python's signal handlers are not installed; the interpreter is never finalized.
 *
 * MPI: call MPI_Init (or MPI_Init_thread) before insitu_initialize and MPI_Finalize after
 * insitu_finalize. The communicator is passed as its Fortran handle (MPI_Comm_c2f in C,
 * comm%MPI_VAL with mpi_f08, the integer handle with `use mpi`), so the same call serves
 * C and Fortran without the MPI Fortran bindings. The process must hold one MPI library:
 * the one this library links (CMake's FindMPI), which mpi4py (an MPI-ABI-agnostic wheel, or
 * one built against that MPI) then finds already loaded.
 */
#ifndef INSITU_ADAPTOR_H
#define INSITU_ADAPTOR_H

#include <stddef.h>
#include <stdint.h>

/* C++: only MPI's C API is needed; keep mpi.h from pulling in the old MPI C++ bindings
 * (Open MPI's need libmpi_cxx at link time). Include mpi.h first to decide otherwise. */
#if defined(__cplusplus) && !defined(MPI_VERSION)
#  ifndef OMPI_SKIP_MPICXX
#    define OMPI_SKIP_MPICXX 1
#  endif
#  ifndef MPICH_SKIP_MPICXX
#    define MPICH_SKIP_MPICXX 1
#  endif
#endif
#include <mpi.h>

#if defined(_WIN32) && defined(INSITU_BUILDING)
#  define INSITU_API __declspec(dllexport)
#elif defined(_WIN32)
#  define INSITU_API __declspec(dllimport)
#elif defined(__GNUC__)
#  define INSITU_API __attribute__((visibility("default")))
#else
#  define INSITU_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define INSITU_ABI_VERSION 1
/* Field names are stored in the field (NUL-terminated), so Fortran can fill them. */
#define INSITU_NAME_MAX 64

/* Return codes of every entry point. */
typedef enum insitu_status {
    INSITU_OK = 0,
    INSITU_ERR_ARGUMENT = 1,           /* an entry point's own argument is invalid (NULL ...) */
    INSITU_ERR_CONFIG = 2,             /* the configuration is malformed or unreadable */
    INSITU_ERR_MESH = 3,               /* the mesh description is invalid (dims, dtype, fields ...) */
    INSITU_ERR_DEVICE_UNAVAILABLE = 4, /* CUDA memory given, but CuPy/CUDA is not usable here */
    INSITU_ERR_NOT_INITIALIZED = 5,    /* called before insitu_initialize (or after finalize) */
    INSITU_ERR_EXECUTE = 6,            /* the adaptor ran, but a pipeline/scene/extract failed */
    INSITU_ERR_NOT_FOUND = 7,          /* a getter: no such parameter, pipeline or index */
    INSITU_ERR_PYTHON = 8              /* interpreter start, import, or an unexpected exception */
} insitu_status;

/* Element type of a field. */
typedef enum insitu_dtype {
    INSITU_FLOAT32 = 1,
    INSITU_FLOAT64 = 2,
    INSITU_INT8 = 3,
    INSITU_INT16 = 4,
    INSITU_INT32 = 5,
    INSITU_INT64 = 6,
    INSITU_UINT8 = 7,
    INSITU_UINT16 = 8,
    INSITU_UINT32 = 9,
    INSITU_UINT64 = 10
} insitu_dtype;

/* Where a field's data lives. */
typedef enum insitu_memory {
    INSITU_MEMORY_HOST = 0, /* host memory (NumPy view) */
    INSITU_MEMORY_CUDA = 1  /* CUDA device memory on device `device` (CuPy view) */
} insitu_memory;

/* Vertex fields have dims (ni, nj, nk) of the domain; element fields (ni-1, nj-1, nk-1). */
typedef enum insitu_association {
    INSITU_VERTEX = 1,
    INSITU_ELEMENT = 2
} insitu_association;

/* How a field's elements (i, j, k) are laid out in memory. */
typedef enum insitu_layout {
    INSITU_LAYOUT_C = 1,       /* k fastest: a[i][j][k], offset ((i*nj)+j)*nk+k */
    INSITU_LAYOUT_FORTRAN = 2, /* i fastest: a(i,j,k) in Fortran, offset i+ni*(j+nj*k) in C */
    INSITU_LAYOUT_STRIDED = 3  /* strides[] (bytes, >= 0) per i, j, k: a view into a larger
                                  array, e.g. a block without its ghost layers */
} insitu_layout;

/* One field of a domain. Zero-initialize, then set what applies. */
typedef struct insitu_field {
    char name[INSITU_NAME_MAX]; /* NUL-terminated */
    int32_t association;        /* insitu_association */
    int32_t dtype;              /* insitu_dtype */
    int32_t memory;             /* insitu_memory */
    int32_t device;             /* CUDA device ordinal when memory == INSITU_MEMORY_CUDA */
    int32_t layout;             /* insitu_layout */
    int32_t reserved;           /* 0 */
    int64_t dims[3];            /* optional check: 0,0,0 = implied by association and the domain */
    int64_t strides[3];         /* bytes per step along i, j, k (INSITU_LAYOUT_STRIDED only) */
    const void* data;           /* first element (i, j, k) = (0, 0, 0) */
} insitu_field;

/* One block of a uniform grid: vertices x = origin + (i, j, k) * spacing. Blocks of
 * neighbouring ranks share their boundary vertex plane (or pass it as a ghost). */
typedef struct insitu_domain {
    int64_t domain_id;          /* global block number, unique across ranks */
    int64_t dims[3];            /* vertices along i, j, k, each >= 1 */
    double origin[3];
    double spacing[3];          /* each > 0 */
    int32_t nfields;
    int32_t reserved;           /* 0 */
    const insitu_field* fields; /* nfields entries */
} insitu_domain;

/* What a rank hands over in one step: zero or more domains. */
typedef struct insitu_mesh {
    int32_t ndomains;
    int32_t reserved;             /* 0 */
    const insitu_domain* domains; /* ndomains entries (may be NULL when ndomains == 0) */
} insitu_mesh;

/* A snapshot of the adaptor's results after the last execute. */
typedef struct insitu_results_t {
    int32_t stop;     /* nonzero: a trigger or a viewer asked the simulation to stop */
    int32_t nerrors;  /* errors the adaptor recorded so far (caught, not forwarded) */
    int64_t step;     /* last step executed, -1 when none */
    int32_t nparams;  /* steering parameters available through insitu_get_param */
    int32_t reserved; /* 0 */
} insitu_results_t;

/* Start the adaptor with a YAML/JSON configuration file on communicator `comm` (a Fortran
 * handle). Starts the Python interpreter on first use (see README: "C and Fortran").
 * INSITU_ERR_CONFIG names every problem of a malformed configuration with its path. */
INSITU_API int insitu_initialize(const char* config_path, MPI_Fint comm);

/* Run the configured pipelines on this rank's domains for one step. Collective: every rank
 * of the communicator calls it for every step, also with a mesh that is invalid (even
 * NULL): that rank gets its error code, the other ranks INSITU_ERR_MESH or
 * INSITU_ERR_EXECUTE for the same step, and the next step runs on all of them. (On a step
 * where nothing is due, no scene, extract or trigger, the mesh is not looked at: the
 * other ranks may then return INSITU_OK.) A rank that stops answering fails
 * the step on the others after the configuration's `timeout`. */
INSITU_API int insitu_execute(long step, double time, const insitu_mesh* mesh);

/* Fill `out` from the adaptor's results (stop flag, error count, last step). */
INSITU_API int insitu_results(insitu_results_t* out);

/* A steering parameter by name (INSITU_ERR_NOT_FOUND when the adaptor has none). */
INSITU_API int insitu_get_param(const char* name, double* value);

/* Number of iso values of contour pipeline `pipeline` (its current, possibly steered ones). */
INSITU_API int insitu_get_iso_count(const char* pipeline, int* count);

/* Iso value `index` (0-based) of contour pipeline `pipeline`. */
INSITU_API int insitu_get_iso_value(const char* pipeline, int index, double* value);

/* Shut the adaptor down (the interpreter stays up: Python cannot restart in a process).
 * Every stream and renderer is closed even when one fails to; INSITU_ERR_EXECUTE then names
 * what failed. */
INSITU_API int insitu_finalize(void);

/* Message of the last call that failed; "" after a call that succeeded. Never NULL. */
INSITU_API const char* insitu_last_error(void);

/* Name of a status code ("INSITU_ERR_MESH"); never NULL. */
INSITU_API const char* insitu_status_name(int status);

#ifdef __cplusplus
}
#endif

#endif /* INSITU_ADAPTOR_H */
