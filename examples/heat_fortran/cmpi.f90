! cmpi: Fortran interfaces to cmpi.c, the MPI calls heat.f90 needs, for MPIs without
! Fortran bindings. Communicators are integer (MPI_Fint) handles, as with `use mpi`.
module cmpi
  use, intrinsic :: iso_c_binding
  implicit none
  interface
     integer(c_int) function cmpi_init() bind(C)
       import :: c_int
     end function cmpi_init
     subroutine cmpi_finalize() bind(C)
     end subroutine cmpi_finalize
     subroutine cmpi_abort(comm, code) bind(C)
       import :: c_int
       integer(c_int), value :: comm, code
     end subroutine cmpi_abort
     integer(c_int) function cmpi_comm_rank(comm) bind(C)
       import :: c_int
       integer(c_int), value :: comm
     end function cmpi_comm_rank
     integer(c_int) function cmpi_comm_size(comm) bind(C)
       import :: c_int
       integer(c_int), value :: comm
     end function cmpi_comm_size
     integer(c_int) function cmpi_proc_null() bind(C)
       import :: c_int
     end function cmpi_proc_null
     integer(c_int) function cmpi_sendrecv(sendbuf, count, dest, sendtag, recvbuf, source, recvtag, comm) bind(C)
       import :: c_int, c_double
       real(c_double), intent(in) :: sendbuf(*)
       real(c_double), intent(inout) :: recvbuf(*)
       integer(c_int), value :: count, dest, sendtag, source, recvtag, comm
     end function cmpi_sendrecv
     real(c_double) function cmpi_reduce_sum(value, root, comm) bind(C)
       import :: c_int, c_double
       real(c_double), value :: value
       integer(c_int), value :: root, comm
     end function cmpi_reduce_sum
  end interface
end module cmpi
