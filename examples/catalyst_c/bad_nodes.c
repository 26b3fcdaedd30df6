/*
 * bad_nodes: what a Catalyst 2 implementation answers to malformed nodes, and that the
 * simulation goes on (tests/test_catalyst.py runs it; catalyst.h and Conduit's C API only).
 *
 *   mpiexec -n 2 ./bad_nodes CONFIG KIND BAD_RANK
 *
 * Three steps of a small image-data mesh (a z slab per rank, field T). At step 1 rank
 * BAD_RANK passes a bad node of KIND, the other ranks a good one:
 *   missing-channel   no catalyst/channels
 *   wrong-dtype       fields/T/values given as a string
 *   string-timestep   catalyst/state/timestep given as a string
 *   null-data         fields/T/values an external pointer that is NULL
 *   channel-type      catalyst/channels/grid/type "amr"
 *   none              no fault
 * KIND py-script or missing-script instead makes every rank's initialize name a ParaView
 * Python script or a file that does not exist. Every call prints
 * "rank R <call> status N" (step S for execute).
 */
#include <catalyst.h>
#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 12

static void node(conduit_node* exec, const double* T, int nk, int k0, int step, int rank, const char* kind) {
    conduit_node* mesh;
    double h = 1.0 / (N - 1);
    if (!strcmp(kind, "string-timestep"))
        conduit_node_set_path_char8_str(exec, "catalyst/state/timestep", "one");
    else
        conduit_node_set_path_int64(exec, "catalyst/state/timestep", step);
    conduit_node_set_path_float64(exec, "catalyst/state/time", 0.5 * step);
    if (!strcmp(kind, "missing-channel")) return;
    conduit_node_set_path_char8_str(exec, "catalyst/channels/grid/type", strcmp(kind, "channel-type") ? "mesh" : "amr");
    mesh = conduit_node_fetch(exec, "catalyst/channels/grid/data");
    conduit_node_set_path_char8_str(mesh, "coordsets/coords/type", "uniform");
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/i", N);
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/j", N);
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/k", nk);
    conduit_node_set_path_float64(mesh, "coordsets/coords/origin/z", k0 * h);
    conduit_node_set_path_float64(mesh, "coordsets/coords/spacing/dx", h);
    conduit_node_set_path_float64(mesh, "coordsets/coords/spacing/dy", h);
    conduit_node_set_path_float64(mesh, "coordsets/coords/spacing/dz", h);
    conduit_node_set_path_char8_str(mesh, "topologies/mesh/type", "uniform");
    conduit_node_set_path_char8_str(mesh, "topologies/mesh/coordset", "coords");
    conduit_node_set_path_int64(mesh, "state/domain_id", rank);
    conduit_node_set_path_char8_str(mesh, "fields/T/association", "vertex");
    conduit_node_set_path_char8_str(mesh, "fields/T/topology", "mesh");
    if (!strcmp(kind, "wrong-dtype"))
        conduit_node_set_path_char8_str(mesh, "fields/T/values", "not numbers");
    else
        conduit_node_set_path_external_float64_ptr(mesh, "fields/T/values", strcmp(kind, "null-data") ? (double*)T : NULL,
                                                   (conduit_index_t)N * N * nk);
}

int main(int argc, char** argv) {
    int rank, size, step, bad_rank, k0, nk, i, j, k;
    const char* kind;
    double* T;
    conduit_node *init, *exec, *fin;
    if (argc < 4) {
        fprintf(stderr, "usage: %s CONFIG KIND BAD_RANK\n", argv[0]);
        return 2;
    }
    kind = argv[2];
    bad_rank = atoi(argv[3]);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    k0 = rank * (N - 1) / size;
    nk = (rank + 1) * (N - 1) / size - k0 + 1;
    T = malloc(sizeof(double) * N * N * nk);

    init = conduit_node_create();
    conduit_node_set_path_char8_str(init, "catalyst/scripts/main/filename",
                                    !strcmp(kind, "py-script") ? "pipeline.py"
                                    : !strcmp(kind, "missing-script") ? "no/such/insitu.yaml" : argv[1]);
    printf("rank %d initialize status %d\n", rank, (int)catalyst_initialize(init));
    fflush(stdout);
    for (step = 0; step < 3; ++step) {
        for (k = 0; k < nk; ++k)
            for (j = 0; j < N; ++j)
                for (i = 0; i < N; ++i) {
                    double x = i / (N - 1.0), y = j / (N - 1.0), z = (k0 + k) / (N - 1.0);
                    T[((size_t)k * N + j) * N + i] = (x - 0.5) * (x - 0.5) + (y - 0.5) * (y - 0.5) +
                                                     (z - 0.5) * (z - 0.5) + 0.01 * step;
                }
        exec = conduit_node_create();
        node(exec, T, nk, k0, step, rank, step == 1 && rank == bad_rank ? kind : "none");
        printf("rank %d step %d status %d\n", rank, step, (int)catalyst_execute(exec));
        fflush(stdout);
        conduit_node_destroy(exec);
    }
    fin = conduit_node_create();
    printf("rank %d finalize status %d\n", rank, (int)catalyst_finalize(fin));
    conduit_node_destroy(fin);
    conduit_node_destroy(init);
    free(T);
    MPI_Finalize();
    return 0;
}
