! insitu_adaptor -- Fortran module over the C ABI of the insitu adaptor (insitu_adaptor.h).
!
!   use insitu_adaptor
!   type(insitu_field), target :: fields(1)
!   type(insitu_domain), target :: domains(1)
!   type(insitu_mesh) :: mesh
!   ierr = insitu_initialize("insitu.yaml", comm)          ! comm: the integer (Fortran) handle
!   fields(1) = insitu_make_field("T", T, INSITU_VERTEX)    ! T: a TARGET array, never copied
!   domains(1) = insitu_make_domain(id, shape(T), origin, spacing, fields)
!   mesh = insitu_make_mesh(domains)
!   ierr = insitu_execute(step, time, mesh)
!   ierr = insitu_results(res); if (res%stop /= 0) exit
!   ierr = insitu_finalize()
!
! Every function returns an insitu status (INSITU_OK = 0); insitu_last_error() says why a
! call failed. Arrays are described in place: insitu_make_field takes the address and the
! strides of its actual argument (a whole array or a section, e.g. T(1:nx, 1:ny, 1:nz+1)),
! which must have the TARGET (or POINTER) attribute and stay alive and unchanged during
! insitu_execute. Index order is (i, j, k), i fastest, as Fortran stores arrays.
! Indices passed to insitu_get_iso_value are 0-based, as in C.
! The communicator: `comm` with `use mpi`, comm%MPI_VAL with `use mpi_f08`, or
! MPI_Comm_c2f(MPI_COMM_WORLD) obtained from C when the MPI has no Fortran bindings.
module insitu_adaptor
  use, intrinsic :: iso_c_binding
  implicit none
  private

  integer, parameter, public :: INSITU_NAME_MAX = 64

  ! insitu_status
  integer(c_int), parameter, public :: INSITU_OK = 0, INSITU_ERR_ARGUMENT = 1, INSITU_ERR_CONFIG = 2, &
       INSITU_ERR_MESH = 3, INSITU_ERR_DEVICE_UNAVAILABLE = 4, INSITU_ERR_NOT_INITIALIZED = 5, &
       INSITU_ERR_EXECUTE = 6, INSITU_ERR_NOT_FOUND = 7, INSITU_ERR_PYTHON = 8
  ! insitu_dtype
  integer(c_int32_t), parameter, public :: INSITU_FLOAT32 = 1, INSITU_FLOAT64 = 2, INSITU_INT8 = 3, &
       INSITU_INT16 = 4, INSITU_INT32 = 5, INSITU_INT64 = 6, INSITU_UINT8 = 7, INSITU_UINT16 = 8, &
       INSITU_UINT32 = 9, INSITU_UINT64 = 10
  ! insitu_memory, insitu_association, insitu_layout
  integer(c_int32_t), parameter, public :: INSITU_MEMORY_HOST = 0, INSITU_MEMORY_CUDA = 1
  integer(c_int32_t), parameter, public :: INSITU_VERTEX = 1, INSITU_ELEMENT = 2
  integer(c_int32_t), parameter, public :: INSITU_LAYOUT_C = 1, INSITU_LAYOUT_FORTRAN = 2, &
       INSITU_LAYOUT_STRIDED = 3

  ! The C structs, member for member.
  type, bind(C), public :: insitu_field
     character(kind=c_char) :: name(INSITU_NAME_MAX) = c_null_char
     integer(c_int32_t) :: association = 0, dtype = 0, memory = INSITU_MEMORY_HOST, device = 0
     integer(c_int32_t) :: layout = 0, reserved = 0
     integer(c_int64_t) :: dims(3) = 0, strides(3) = 0
     type(c_ptr) :: data = c_null_ptr
  end type insitu_field

  type, bind(C), public :: insitu_domain
     integer(c_int64_t) :: domain_id = 0
     integer(c_int64_t) :: dims(3) = 0
     real(c_double) :: origin(3) = 0, spacing(3) = 1
     integer(c_int32_t) :: nfields = 0, reserved = 0
     type(c_ptr) :: fields = c_null_ptr
  end type insitu_domain

  type, bind(C), public :: insitu_mesh
     integer(c_int32_t) :: ndomains = 0, reserved = 0
     type(c_ptr) :: domains = c_null_ptr
  end type insitu_mesh

  type, bind(C), public :: insitu_results_t
     integer(c_int32_t) :: stop = 0, nerrors = 0
     integer(c_int64_t) :: step = -1
     integer(c_int32_t) :: nparams = 0, reserved = 0
  end type insitu_results_t

  public :: insitu_initialize, insitu_execute, insitu_results, insitu_get_param, insitu_get_iso_count, &
       insitu_get_iso_value, insitu_finalize, insitu_last_error, insitu_make_field, insitu_make_domain, &
       insitu_make_mesh, insitu_set_name

  interface insitu_make_field
     module procedure make_field_r8, make_field_r4, make_field_i4, make_field_i8
  end interface insitu_make_field

  interface
     function c_initialize(config_path, comm) bind(C, name="insitu_initialize") result(status)
       import :: c_char, c_int
       character(kind=c_char), intent(in) :: config_path(*)
       integer(c_int), value :: comm           ! MPI_Fint
       integer(c_int) :: status
     end function c_initialize
     function c_execute(step, time, mesh) bind(C, name="insitu_execute") result(status)
       import :: c_long, c_double, c_int, insitu_mesh
       integer(c_long), value :: step
       real(c_double), value :: time
       type(insitu_mesh), intent(in) :: mesh
       integer(c_int) :: status
     end function c_execute
     function c_results(out) bind(C, name="insitu_results") result(status)
       import :: c_int, insitu_results_t
       type(insitu_results_t), intent(out) :: out
       integer(c_int) :: status
     end function c_results
     function c_get_param(name, value) bind(C, name="insitu_get_param") result(status)
       import :: c_char, c_double, c_int
       character(kind=c_char), intent(in) :: name(*)
       real(c_double), intent(out) :: value
       integer(c_int) :: status
     end function c_get_param
     function c_get_iso_count(pipeline, count) bind(C, name="insitu_get_iso_count") result(status)
       import :: c_char, c_int
       character(kind=c_char), intent(in) :: pipeline(*)
       integer(c_int), intent(out) :: count
       integer(c_int) :: status
     end function c_get_iso_count
     function c_get_iso_value(pipeline, index, value) bind(C, name="insitu_get_iso_value") result(status)
       import :: c_char, c_int, c_double
       character(kind=c_char), intent(in) :: pipeline(*)
       integer(c_int), value :: index
       real(c_double), intent(out) :: value
       integer(c_int) :: status
     end function c_get_iso_value
     function c_finalize() bind(C, name="insitu_finalize") result(status)
       import :: c_int
       integer(c_int) :: status
     end function c_finalize
     function c_last_error() bind(C, name="insitu_last_error") result(msg)
       import :: c_ptr
       type(c_ptr) :: msg
     end function c_last_error
     function c_strlen(s) bind(C, name="strlen") result(n)
       import :: c_ptr, c_size_t
       type(c_ptr), value :: s
       integer(c_size_t) :: n
     end function c_strlen
  end interface

contains

  pure function cstr(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char) :: c(len_trim(s) + 1)
    integer :: i
    do i = 1, len_trim(s)
       c(i) = s(i:i)
    end do
    c(len_trim(s) + 1) = c_null_char
  end function cstr

  integer function insitu_initialize(config_path, comm) result(status)
    character(len=*), intent(in) :: config_path
    integer, intent(in) :: comm
    status = c_initialize(cstr(config_path), int(comm, c_int))
  end function insitu_initialize

  integer function insitu_execute(step, time, mesh) result(status)
    integer, intent(in) :: step
    real(c_double), intent(in) :: time
    type(insitu_mesh), intent(in) :: mesh
    status = c_execute(int(step, c_long), time, mesh)
  end function insitu_execute

  integer function insitu_results(res) result(status)
    type(insitu_results_t), intent(out) :: res
    status = c_results(res)
  end function insitu_results

  integer function insitu_get_param(name, value) result(status)
    character(len=*), intent(in) :: name
    real(c_double), intent(out) :: value
    status = c_get_param(cstr(name), value)
  end function insitu_get_param

  integer function insitu_get_iso_count(pipeline, count) result(status)
    character(len=*), intent(in) :: pipeline
    integer, intent(out) :: count
    integer(c_int) :: n
    n = 0
    status = c_get_iso_count(cstr(pipeline), n)
    count = n
  end function insitu_get_iso_count

  integer function insitu_get_iso_value(pipeline, index, value) result(status)
    character(len=*), intent(in) :: pipeline
    integer, intent(in) :: index                ! 0-based
    real(c_double), intent(out) :: value
    status = c_get_iso_value(cstr(pipeline), int(index, c_int), value)
  end function insitu_get_iso_value

  integer function insitu_finalize() result(status)
    status = c_finalize()
  end function insitu_finalize

  ! Message of the last failing call ("" after a success).
  function insitu_last_error() result(msg)
    character(len=:), allocatable :: msg
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i
    p = c_last_error()
    n = int(c_strlen(p))
    allocate(character(len=n) :: msg)
    if (n == 0) return
    call c_f_pointer(p, chars, [n])
    do i = 1, n
       msg(i:i) = chars(i)
    end do
  end function insitu_last_error

  subroutine insitu_set_name(field, name)
    type(insitu_field), intent(inout) :: field
    character(len=*), intent(in) :: name
    integer :: i, n
    n = min(len_trim(name), INSITU_NAME_MAX - 1)
    field%name = c_null_char
    do i = 1, n
       field%name(i) = name(i:i)
    end do
  end subroutine insitu_set_name

  ! Address difference in bytes between two elements.
  integer(c_int64_t) function bytes_between(a, b)
    type(c_ptr), intent(in) :: a, b
    bytes_between = int(transfer(b, 0_c_intptr_t) - transfer(a, 0_c_intptr_t), c_int64_t)
  end function bytes_between

  ! Fill the generic part of a host field; strides from the addresses of neighbouring elements.
  subroutine describe(f, name, association, dtype, itemsize, n, first, next_i, next_j, next_k)
    type(insitu_field), intent(inout) :: f
    character(len=*), intent(in) :: name
    integer, intent(in) :: association, itemsize
    integer(c_int32_t), intent(in) :: dtype
    integer, intent(in) :: n(3)
    type(c_ptr), intent(in) :: first, next_i, next_j, next_k
    call insitu_set_name(f, name)
    f%association = int(association, c_int32_t)
    f%dtype = dtype
    f%memory = INSITU_MEMORY_HOST
    f%layout = INSITU_LAYOUT_STRIDED
    f%dims = int(n, c_int64_t)
    f%data = first
    ! An axis of extent 1 is never stepped along: any positive stride does.
    f%strides = int(itemsize, c_int64_t)
    if (n(1) > 1) f%strides(1) = bytes_between(first, next_i)
    if (n(2) > 1) f%strides(2) = bytes_between(first, next_j)
    if (n(3) > 1) f%strides(3) = bytes_between(first, next_k)
  end subroutine describe

  function make_field_r8(name, values, association) result(f)
    character(len=*), intent(in) :: name
    real(c_double), intent(in), target :: values(:, :, :)
    integer, intent(in) :: association
    type(insitu_field) :: f
    integer :: n(3), a(3)
    n = shape(values)
    a = max(min(n, 2), 1)
    if (any(n < 1)) then  ! nothing to point at: the adaptor reports the dims
       call describe(f, name, association, INSITU_FLOAT64, 8, n, c_null_ptr, c_null_ptr, c_null_ptr, c_null_ptr)
       return
    end if
    call describe(f, name, association, INSITU_FLOAT64, 8, n, c_loc(values(1, 1, 1)), &
         c_loc(values(a(1), 1, 1)), c_loc(values(1, a(2), 1)), c_loc(values(1, 1, a(3))))
  end function make_field_r8

  function make_field_r4(name, values, association) result(f)
    character(len=*), intent(in) :: name
    real(c_float), intent(in), target :: values(:, :, :)
    integer, intent(in) :: association
    type(insitu_field) :: f
    integer :: n(3), a(3)
    n = shape(values)
    a = max(min(n, 2), 1)
    if (any(n < 1)) then  ! nothing to point at: the adaptor reports the dims
       call describe(f, name, association, INSITU_FLOAT32, 4, n, c_null_ptr, c_null_ptr, c_null_ptr, c_null_ptr)
       return
    end if
    call describe(f, name, association, INSITU_FLOAT32, 4, n, c_loc(values(1, 1, 1)), &
         c_loc(values(a(1), 1, 1)), c_loc(values(1, a(2), 1)), c_loc(values(1, 1, a(3))))
  end function make_field_r4

  function make_field_i4(name, values, association) result(f)
    character(len=*), intent(in) :: name
    integer(c_int32_t), intent(in), target :: values(:, :, :)
    integer, intent(in) :: association
    type(insitu_field) :: f
    integer :: n(3), a(3)
    n = shape(values)
    a = max(min(n, 2), 1)
    if (any(n < 1)) then  ! nothing to point at: the adaptor reports the dims
       call describe(f, name, association, INSITU_INT32, 4, n, c_null_ptr, c_null_ptr, c_null_ptr, c_null_ptr)
       return
    end if
    call describe(f, name, association, INSITU_INT32, 4, n, c_loc(values(1, 1, 1)), &
         c_loc(values(a(1), 1, 1)), c_loc(values(1, a(2), 1)), c_loc(values(1, 1, a(3))))
  end function make_field_i4

  function make_field_i8(name, values, association) result(f)
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in), target :: values(:, :, :)
    integer, intent(in) :: association
    type(insitu_field) :: f
    integer :: n(3), a(3)
    n = shape(values)
    a = max(min(n, 2), 1)
    if (any(n < 1)) then  ! nothing to point at: the adaptor reports the dims
       call describe(f, name, association, INSITU_INT64, 8, n, c_null_ptr, c_null_ptr, c_null_ptr, c_null_ptr)
       return
    end if
    call describe(f, name, association, INSITU_INT64, 8, n, c_loc(values(1, 1, 1)), &
         c_loc(values(a(1), 1, 1)), c_loc(values(1, a(2), 1)), c_loc(values(1, 1, a(3))))
  end function make_field_i8

  ! A domain of dims vertices (i, j, k) at origin with spacing, holding `fields` (TARGET).
  function insitu_make_domain(domain_id, dims, origin, spacing, fields) result(d)
    integer, intent(in) :: domain_id
    integer, intent(in) :: dims(3)
    real(c_double), intent(in) :: origin(3), spacing(3)
    type(insitu_field), intent(in), target :: fields(:)
    type(insitu_domain) :: d
    d%domain_id = int(domain_id, c_int64_t)
    d%dims = int(dims, c_int64_t)
    d%origin = origin
    d%spacing = spacing
    d%nfields = int(size(fields), c_int32_t)
    if (size(fields) > 0) d%fields = c_loc(fields(1))
  end function insitu_make_domain

  ! A mesh of this rank's `domains` (TARGET, contiguous).
  function insitu_make_mesh(domains) result(m)
    type(insitu_domain), intent(in), target :: domains(:)
    type(insitu_mesh) :: m
    m%ndomains = int(size(domains), c_int32_t)
    if (size(domains) > 0) m%domains = c_loc(domains(1))
  end function insitu_make_mesh

end module insitu_adaptor
