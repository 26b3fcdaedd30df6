/*
 * bad_mesh_client.c -- one rank alone passes a bad mesh (tests/test_faults_capi.py).
 *
 * Usage: mpiexec -n N bad_mesh_client CONFIG KIND [BAD_RANK]
 *
 * Each rank owns a z-slab of a small grid with a vertex field "T", a sphere distance whose
 * centre moves with the step (a frame built from two steps' slabs differs from either
 * step's). Steps 0..2 run; at step 1 rank BAD_RANK (default: the last) passes a bad mesh of
 * KIND while the others pass their good one (KIND "none": every rank passes a good one):
 *   null-mesh   insitu_execute(step, t, NULL)
 *   null-data   the field's data pointer is NULL
 *   zero-dims   the domain's dims are (n, n, 0)
 *   cuda        memory = INSITU_MEMORY_CUDA on host memory (no usable GPU here)
 * Every call prints "rank R step S status NAME" (and the message when it failed), then
 * "rank R finalize NAME".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "insitu_adaptor.h"

#define N 9

int main(int argc, char** argv) {
    int rank, size, step, status, bad_rank;
    int64_t k0, k1;
    double* T;
    const char* kind;
    insitu_field field;
    insitu_domain dom;
    insitu_mesh mesh;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: bad_mesh_client CONFIG KIND [BAD_RANK]\n");
        MPI_Finalize();
        return 2;
    }
    kind = argv[2];
    bad_rank = argc > 3 ? atoi(argv[3]) : size - 1;
    k0 = (int64_t)rank * (N - 1) / size;
    k1 = (int64_t)(rank + 1) * (N - 1) / size;
    T = malloc(sizeof(double) * N * N * (size_t)(k1 - k0 + 1));
    status = insitu_initialize(argv[1], MPI_Comm_c2f(MPI_COMM_WORLD));
    printf("rank %d initialize %s\n", rank, insitu_status_name(status));
    fflush(stdout);
    for (step = 0; step < 3; ++step) {
        const insitu_mesh* given = &mesh;
        int bad = step == 1 && rank == bad_rank;
        double c = 0.35 + 0.1 * step;
        for (int64_t i = 0; i < N; ++i)
            for (int64_t j = 0; j < N; ++j)
                for (int64_t k = k0; k <= k1; ++k) {
                    double x = i / (N - 1.0) - c, y = j / (N - 1.0) - 0.5, z = k / (N - 1.0) - 0.5;
                    T[(i * N + j) * (k1 - k0 + 1) + (k - k0)] = x * x + y * y + z * z;
                }
        memset(&field, 0, sizeof field);
        strcpy(field.name, "T");
        field.association = INSITU_VERTEX;
        field.dtype = INSITU_FLOAT64;
        field.memory = INSITU_MEMORY_HOST;
        field.layout = INSITU_LAYOUT_C;
        field.data = T;
        memset(&dom, 0, sizeof dom);
        dom.domain_id = rank;
        dom.dims[0] = N;
        dom.dims[1] = N;
        dom.dims[2] = k1 - k0 + 1;
        dom.origin[2] = k0 / (N - 1.0);
        dom.spacing[0] = dom.spacing[1] = dom.spacing[2] = 1.0 / (N - 1);
        dom.nfields = 1;
        dom.fields = &field;
        memset(&mesh, 0, sizeof mesh);
        mesh.ndomains = 1;
        mesh.domains = &dom;
        if (bad && strcmp(kind, "null-mesh") == 0) given = NULL;
        if (bad && strcmp(kind, "null-data") == 0) field.data = NULL;
        if (bad && strcmp(kind, "zero-dims") == 0) dom.dims[2] = 0;
        if (bad && strcmp(kind, "cuda") == 0) field.memory = INSITU_MEMORY_CUDA;
        status = insitu_execute(step, 0.1 * step, given);
        printf("rank %d step %d status %s%s%s\n", rank, step, insitu_status_name(status),
               status ? " message " : "", status ? insitu_last_error() : "");
        fflush(stdout);
    }
    status = insitu_finalize();
    printf("rank %d finalize %s\n", rank, insitu_status_name(status));
    fflush(stdout);
    free(T);
    MPI_Finalize();
    return 0;
}
