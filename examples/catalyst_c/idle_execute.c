/*
 * idle_execute: the cost of a catalyst_execute on a step where the configuration has nothing
 * to do (a trigger fires later): what an instrumented simulation pays for insitu on most steps.
 *
 *   CATALYST_IMPLEMENTATION_NAME=insitu ... ./idle_execute CONFIG [CALLS] [PASSES]
 *
 * Builds one node (a 32^3 image-data mesh, field T by pointer), then in each pass calls
 * catalyst_execute CALLS times with steps 1, 2, ... (updating catalyst/state each time, as a
 * simulation does) and prints "pass P us_per_call X". tests/test_catalyst.py runs it.
 */
#include <catalyst.h>
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
    const int n = 32;
    int calls = argc > 2 ? atoi(argv[2]) : 10000, passes = argc > 3 ? atoi(argv[3]) : 3, pass, i;
    long step = 0;
    double* T = calloc((size_t)n * n * n, sizeof(double));
    conduit_node *init, *exec, *mesh, *fin;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CONFIG [CALLS] [PASSES]\n", argv[0]);
        return 2;
    }
    MPI_Init(&argc, &argv);
    init = conduit_node_create();
    conduit_node_set_path_char8_str(init, "catalyst/scripts/insitu", argv[1]);
    printf("rank 0 initialize status %d\n", (int)catalyst_initialize(init));
    exec = conduit_node_create();
    conduit_node_set_path_char8_str(exec, "catalyst/channels/grid/type", "mesh");
    mesh = conduit_node_fetch(exec, "catalyst/channels/grid/data");
    conduit_node_set_path_char8_str(mesh, "coordsets/coords/type", "uniform");
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/i", n);
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/j", n);
    conduit_node_set_path_int64(mesh, "coordsets/coords/dims/k", n);
    conduit_node_set_path_char8_str(mesh, "topologies/mesh/type", "uniform");
    conduit_node_set_path_char8_str(mesh, "topologies/mesh/coordset", "coords");
    conduit_node_set_path_char8_str(mesh, "fields/T/association", "vertex");
    conduit_node_set_path_char8_str(mesh, "fields/T/topology", "mesh");
    conduit_node_set_path_external_float64_ptr(mesh, "fields/T/values", T, (conduit_index_t)n * n * n);
    for (pass = 0; pass < passes; ++pass) {
        int failed = 0;
        double t0 = MPI_Wtime();
        for (i = 0; i < calls; ++i) {
            ++step;
            conduit_node_set_path_int64(exec, "catalyst/state/timestep", step);
            conduit_node_set_path_float64(exec, "catalyst/state/time", 0.01 * step);
            failed += catalyst_execute(exec) != catalyst_status_ok;
        }
        printf("pass %d us_per_call %.3f failed %d\n", pass, (MPI_Wtime() - t0) / calls * 1e6, failed);
    }
    fin = conduit_node_create();
    printf("rank 0 finalize status %d\n", (int)catalyst_finalize(fin));
    conduit_node_destroy(fin);
    conduit_node_destroy(exec);
    conduit_node_destroy(init);
    free(T);
    MPI_Finalize();
    return 0;
}
