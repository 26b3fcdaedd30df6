/*
 * grid: a Catalyst 2 client in C, written against catalyst.h and the Conduit C API only.
 *
 *   mpiexec -n 2 ./grid insitu.yaml [--n 24] [--steps 3] [--param name=value] [--device 1]
 *
 * The unit cube holds n^3 nodes (spacing h = 1/(n-1)); the nodes are split along z into one
 * slab per rank, neighbouring slabs sharing their boundary plane. Every step each rank hands
 * Catalyst its slab as an image-data mesh (a uniform coordset: origin/x,y,z and
 * spacing/dx,dy,dz) with
 *   T         a point field (float64): two Gaussian blobs drifting along x,
 *   pressure  a cell field (float32),
 *   velocity  a 3-component point field, an mcarray whose x, y, z components interleave in
 *             one array (stride 3 doubles);
 * all passed by pointer (set_external): nothing is copied. With --device 1 the fields live in
 * GPU memory, as a GPU solver keeps them (rank r on GPU r mod count): each step they are filled
 * on the host and copied once to the device by the program itself (the CUDA driver API, loaded
 * at run time: no CUDA headers or toolkit needed to build), and Catalyst is handed the device
 * pointers. Which implementation runs is the
 * user's choice at run time: with CATALYST_IMPLEMENTATION_NAME=insitu (and
 * CATALYST_IMPLEMENTATION_PATHS=<insitu prefix>/lib/catalyst) it is insitu, drawing what
 * insitu.yaml asks for; unset, Catalyst's stub. --param strings go to
 * catalyst/state/parameters (insitu takes numeric "name=value" ones as steering parameters).
 * Every call's status is printed ("rank R step S status N"), rank 0 prints what
 * catalyst_about and the last catalyst_results said (YAML), and the program goes on whatever
 * a call returns.
 */
#include <catalyst.h>
#include <mpi.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n;            /* global nodes per axis */
    int k0, nk;       /* this slab: global z nodes k0 .. k0+nk-1 */
    double h;         /* node spacing */
    double *T, *velocity;
    float* pressure;
    void *dT, *dvelocity, *dpressure; /* their device copies (--device 1), else NULL */
} Slab;

/* ------------------------------------------------------------------ GPU memory (--device 1)
 * The few CUDA driver entry points the program needs, looked up in libcuda.so.1 at run time. */
typedef unsigned long long cu_ptr;
static struct {
    int (*init)(unsigned);
    int (*count)(int*);
    int (*get)(int*, int);
    int (*retain)(void**, int);
    int (*set_current)(void*);
    int (*alloc)(cu_ptr*, size_t);
    int (*copy)(cu_ptr, const void*, size_t);
    int (*release)(cu_ptr);
} cu;

static void cu_check(int rc, const char* what) {
    if (rc != 0) {
        fprintf(stderr, "grid: %s failed (CUDA error %d)\n", what, rc);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

/* Open the driver and make GPU `rank mod count` current (its primary context, the one CUDA
 * runtime users such as insitu's CuPy share). */
static void cu_open(int rank) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    void* ctx;
    int n = 0, dev;
    if (!lib) {
        fprintf(stderr, "grid: --device 1 needs the CUDA driver: %s\n", dlerror());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    *(void**)&cu.init = dlsym(lib, "cuInit");
    *(void**)&cu.count = dlsym(lib, "cuDeviceGetCount");
    *(void**)&cu.get = dlsym(lib, "cuDeviceGet");
    *(void**)&cu.retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void**)&cu.set_current = dlsym(lib, "cuCtxSetCurrent");
    *(void**)&cu.alloc = dlsym(lib, "cuMemAlloc_v2");
    *(void**)&cu.copy = dlsym(lib, "cuMemcpyHtoD_v2");
    *(void**)&cu.release = dlsym(lib, "cuMemFree_v2");
    cu_check(cu.init(0), "cuInit");
    cu_check(cu.count(&n), "cuDeviceGetCount");
    if (n < 1) cu_check(-1, "finding a GPU");
    cu_check(cu.get(&dev, rank % n), "cuDeviceGet");
    cu_check(cu.retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    cu_check(cu.set_current(ctx), "cuCtxSetCurrent");
}

static void* cu_upload(void* dst, const void* src, size_t bytes) {
    cu_ptr p = (cu_ptr)(size_t)dst;
    if (!p) cu_check(cu.alloc(&p, bytes), "cuMemAlloc");
    cu_check(cu.copy(p, src, bytes), "cuMemcpyHtoD");
    return (void*)(size_t)p;
}

static double blob(double dx, double dy, double dz, double s) {
    return exp(-(dx * dx + dy * dy + dz * dz) / (2 * s * s));
}

/* Fill the slab's fields for `step`, Blueprint order (i fastest, then j, then k). */
static void fill(Slab* s, int step) {
    int i, j, k, n = s->n;
    double shift = 0.04 * step;
    for (k = 0; k < s->nk; ++k)
        for (j = 0; j < n; ++j)
            for (i = 0; i < n; ++i) {
                size_t v = ((size_t)k * n + j) * n + i;
                double x = i * s->h, y = j * s->h, z = (s->k0 + k) * s->h;
                s->T[v] = blob(x - 0.35 - shift, y - 0.5, z - 0.5, 0.14) + blob(x - 0.65, y - 0.5, z - 0.55, 0.12);
                s->velocity[3 * v + 0] = -(y - 0.5);
                s->velocity[3 * v + 1] = x - 0.5 + 0.1 * step;
                s->velocity[3 * v + 2] = 0.25 * z;
            }
    for (k = 0; k < s->nk - 1; ++k)
        for (j = 0; j < n - 1; ++j)
            for (i = 0; i < n - 1; ++i) {
                double x = (i + 0.5) * s->h, y = (j + 0.5) * s->h, z = (s->k0 + k + 0.5) * s->h;
                s->pressure[((size_t)k * (n - 1) + j) * (n - 1) + i] = (float)(x * y + z + 0.1 * step);
            }
}

/* The mesh of this rank (a Conduit Mesh Blueprint uniform mesh) under `mesh`; the fields in
 * device memory when the slab has device copies. */
static void describe(conduit_node* mesh, Slab* s, int rank) {
    conduit_index_t nv = (conduit_index_t)s->n * s->n * s->nk;
    conduit_index_t nc = (conduit_index_t)(s->n - 1) * (s->n - 1) * (s->nk - 1);
    double* T = s->dT ? (double*)s->dT : s->T;
    double* velocity = s->dvelocity ? (double*)s->dvelocity : s->velocity;
    float* pressure = s->dpressure ? (float*)s->dpressure : s->pressure;
    conduit_node_set_path_char8_str(mesh, "coordsets/coords/type", "uniform");
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/i", s->n);
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/j", s->n);
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/k", s->nk);
    conduit_node_set_path_float64(mesh, "coordsets/coords/origin/x", 0.0);
    conduit_node_set_path_float64(mesh, "coordsets/coords/origin/y", 0.0);
    conduit_node_set_path_float64(mesh, "coordsets/coords/origin/z", s->k0 * s->h);
    conduit_node_set_path_float64(mesh, "coordsets/coords/spacing/dx", s->h);
    conduit_node_set_path_float64(mesh, "coordsets/coords/spacing/dy", s->h);
    conduit_node_set_path_float64(mesh, "coordsets/coords/spacing/dz", s->h);
    conduit_node_set_path_char8_str(mesh, "topologies/mesh/type", "uniform");
    conduit_node_set_path_char8_str(mesh, "topologies/mesh/coordset", "coords");
    conduit_node_set_path_int64(mesh, "state/domain_id", rank);

    conduit_node_set_path_char8_str(mesh, "fields/T/association", "vertex");
    conduit_node_set_path_char8_str(mesh, "fields/T/topology", "mesh");
    conduit_node_set_path_external_float64_ptr(mesh, "fields/T/values", T, nv);

    conduit_node_set_path_char8_str(mesh, "fields/pressure/association", "element");
    conduit_node_set_path_char8_str(mesh, "fields/pressure/topology", "mesh");
    conduit_node_set_path_external_float32_ptr(mesh, "fields/pressure/values", pressure, nc);

    /* mcarray: one component per child, interleaved xyzxyz... (offset, stride in bytes) */
    conduit_node_set_path_char8_str(mesh, "fields/velocity/association", "vertex");
    conduit_node_set_path_char8_str(mesh, "fields/velocity/topology", "mesh");
    conduit_node_set_path_external_float64_ptr_detailed(mesh, "fields/velocity/values/x", velocity, nv, 0,
                                                        3 * sizeof(double), sizeof(double), 0);
    conduit_node_set_path_external_float64_ptr_detailed(mesh, "fields/velocity/values/y", velocity, nv,
                                                        sizeof(double), 3 * sizeof(double), sizeof(double), 0);
    conduit_node_set_path_external_float64_ptr_detailed(mesh, "fields/velocity/values/z", velocity, nv,
                                                        2 * sizeof(double), 3 * sizeof(double), sizeof(double), 0);
}

int main(int argc, char** argv) {
    int rank, size, a, step, n = 24, steps = 3, stop = 0, device = 0;
    const char* param = NULL;
    char* text;
    Slab s;
    conduit_node *init, *exec, *fin, *res, *about;
    enum catalyst_status st;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CONFIG [--n N] [--steps S] [--param NAME=VALUE] [--device 1]\n", argv[0]);
        return 2;
    }
    for (a = 2; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "--n")) n = atoi(argv[a + 1]);
        if (!strcmp(argv[a], "--steps")) steps = atoi(argv[a + 1]);
        if (!strcmp(argv[a], "--param")) param = argv[a + 1];
        if (!strcmp(argv[a], "--device")) device = atoi(argv[a + 1]);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* z nodes split into slabs sharing a plane: cells [c0, c1) per rank */
    s.n = n;
    s.h = 1.0 / (n - 1);
    s.k0 = rank * (n - 1) / size;
    s.nk = (rank + 1) * (n - 1) / size - s.k0 + 1;
    s.T = malloc(sizeof(double) * (size_t)n * n * s.nk);
    s.velocity = malloc(3 * sizeof(double) * (size_t)n * n * s.nk);
    s.pressure = malloc(sizeof(float) * (size_t)(n - 1) * (n - 1) * (s.nk - 1));
    s.dT = s.dvelocity = s.dpressure = NULL;
    if (device) cu_open(rank);

    init = conduit_node_create();
    conduit_node_set_path_char8_str(init, "catalyst/scripts/insitu", argv[1]);
    conduit_node_set_path_int64(init, "catalyst/mpi_comm", MPI_Comm_c2f(MPI_COMM_WORLD));
    st = catalyst_initialize(init);
    printf("rank %d initialize status %d\n", rank, (int)st);

    about = conduit_node_create();
    catalyst_about(about);
    if (rank == 0) {
        text = conduit_node_to_yaml(about);
        printf("--- about\n%s\n--- end\n", text);
        free(text);
    }
    res = conduit_node_create();

    for (step = 0; step < steps; ++step) {
        fill(&s, step);
        if (device) {
            s.dT = cu_upload(s.dT, s.T, sizeof(double) * (size_t)n * n * s.nk);
            s.dvelocity = cu_upload(s.dvelocity, s.velocity, 3 * sizeof(double) * (size_t)n * n * s.nk);
            s.dpressure = cu_upload(s.dpressure, s.pressure, sizeof(float) * (size_t)(n - 1) * (n - 1) * (s.nk - 1));
        }
        exec = conduit_node_create();
        conduit_node_set_path_int64(exec, "catalyst/state/timestep", step);
        conduit_node_set_path_float64(exec, "catalyst/state/time", 0.1 * step);
        if (param) conduit_node_set_char8_str(conduit_node_append(conduit_node_fetch(exec, "catalyst/state/parameters")),
                                              param);
        conduit_node_set_path_char8_str(exec, "catalyst/channels/grid/type", "mesh");
        describe(conduit_node_fetch(exec, "catalyst/channels/grid/data"), &s, rank);
        st = catalyst_execute(exec);
        printf("rank %d step %d status %d\n", rank, step, (int)st);
        conduit_node_destroy(exec);

        st = catalyst_results(res); /* fills insitu/{stop, step, params/..., iso_values/..., errors} */
        stop = st == catalyst_status_ok && conduit_node_has_path(res, "insitu/stop") &&
               conduit_node_fetch_path_as_int64(res, "insitu/stop");
        if (stop) break; /* steering asked the simulation to stop */
    }
    if (rank == 0) {
        text = conduit_node_to_yaml(res);
        printf("--- results\n%s\n--- end\n", text);
        free(text);
    }
    conduit_node_destroy(res);

    fin = conduit_node_create();
    st = catalyst_finalize(fin);
    printf("rank %d finalize status %d\n", rank, (int)st);
    conduit_node_destroy(fin);
    conduit_node_destroy(about);
    conduit_node_destroy(init);
    if (device) {
        cu.release((cu_ptr)(size_t)s.dT);
        cu.release((cu_ptr)(size_t)s.dvelocity);
        cu.release((cu_ptr)(size_t)s.dpressure);
    }
    free(s.T);
    free(s.velocity);
    free(s.pressure);
    MPI_Finalize();
    return 0;
}
