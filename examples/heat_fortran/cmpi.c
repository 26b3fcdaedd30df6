/*
 * cmpi.c -- the few MPI calls examples/heat_fortran makes, with Fortran (MPI_Fint) handles,
 * for MPIs without Fortran bindings (the `mpich` PyPI wheel has none).
 *
 * Handles cross the language boundary as MPI_Fint, converted here with the MPI library's
 * own MPI_Comm_f2c/MPI_Comm_c2f, so no handle value or type (an int in MPICH, a pointer in
 * Open MPI) is assumed in Fortran. This file is built with the same MPI (MPI::MPI_C) as
 * libinsitu_adaptor, and mpi4py inside the adaptor finds that library already loaded in the
 * process: one MPI library in the process, whatever it is.
 * With an MPI that has Fortran bindings, `use mpi_f08` replaces all of this.
 */
#include <stddef.h>

#include <mpi.h>

MPI_Fint cmpi_init(void) {
    int done = 0;
    MPI_Initialized(&done);
    if (!done) MPI_Init(NULL, NULL);
    return MPI_Comm_c2f(MPI_COMM_WORLD);
}

void cmpi_finalize(void) { MPI_Finalize(); }

void cmpi_abort(MPI_Fint comm, int code) { MPI_Abort(MPI_Comm_f2c(comm), code); }

int cmpi_comm_rank(MPI_Fint comm) {
    int r;
    MPI_Comm_rank(MPI_Comm_f2c(comm), &r);
    return r;
}

int cmpi_comm_size(MPI_Fint comm) {
    int s;
    MPI_Comm_size(MPI_Comm_f2c(comm), &s);
    return s;
}

/* `rank` of MPI_PROC_NULL: pass it to cmpi_sendrecv for "no neighbour". */
int cmpi_proc_null(void) { return MPI_PROC_NULL; }

/* MPI_Sendrecv of `count` doubles each way. */
int cmpi_sendrecv(const double* sendbuf, int count, int dest, int sendtag, double* recvbuf, int source,
                  int recvtag, MPI_Fint comm) {
    return MPI_Sendrecv(sendbuf, count, MPI_DOUBLE, dest, sendtag, recvbuf, count, MPI_DOUBLE, source, recvtag,
                        MPI_Comm_f2c(comm), MPI_STATUS_IGNORE);
}

/* MPI_Reduce of one double with MPI_SUM to `root`. */
double cmpi_reduce_sum(double value, int root, MPI_Fint comm) {
    double total = 0;
    MPI_Reduce(&value, &total, 1, MPI_DOUBLE, MPI_SUM, root, MPI_Comm_f2c(comm));
    return total;
}
