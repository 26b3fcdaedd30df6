! heat_fortran: the heat solver of examples/heat_cxx in Fortran, on z-slabs, visualized in
! situ through the insitu Fortran module (use insitu_adaptor).
!
!   mpiexec -n 4 ./heat_fortran ../heat_cxx/heat.yaml [--n 32] [--steps 40] [--every 10]
!
! Same problem as heat_cxx (n^3 nodes on the unit cube, two Gaussian blobs, dt = h^2/8,
! boundary nodes fixed): rank p owns the z-planes [lo, hi) and stores T(1:n, 1:n, 0:nz+1),
! i fastest, with a ghost plane below and above. The adaptor gets T(:, :, 1:nz+up) -- the
! owned planes plus the plane shared with the rank above -- described in place by
! insitu_make_field (no copy), and an element field `rank` (int32).
! MPI comes through module cmpi (C MPI calls with Fortran handles; see cmpi.c).
program heat_fortran
  use, intrinsic :: iso_c_binding
  use insitu_adaptor
  use cmpi
  implicit none

  integer :: n = 32, steps = 40, every = 10
  character(len=4096) :: config = '', arg
  integer :: comm, rank, nranks, lo, hi, nz, up, below, above, status, rstatus, step, last, a, i, j, k, ierr
  real(c_double) :: h, dt, r, iso, total
  real(c_double), allocatable, target :: T(:, :, :), Tn(:, :, :)
  integer(c_int32_t), allocatable, target :: rank_cells(:, :, :)
  type(insitu_field), target :: fields(2)
  type(insitu_domain), target :: domains(1)
  type(insitu_mesh) :: mesh
  type(insitu_results_t) :: res
  logical :: insitu

  comm = cmpi_init()
  rank = cmpi_comm_rank(comm)
  nranks = cmpi_comm_size(comm)

  a = 1
  do while (a <= command_argument_count())
     call get_command_argument(a, arg)
     select case (trim(arg))
     case ('--n')
        a = a + 1; call get_command_argument(a, arg); read (arg, *) n
     case ('--steps')
        a = a + 1; call get_command_argument(a, arg); read (arg, *) steps
     case ('--every')
        a = a + 1; call get_command_argument(a, arg); read (arg, *) every
     case default
        config = arg
     end select
     a = a + 1
  end do
  if (len_trim(config) == 0 .or. n < 4 .or. every < 1) then
     if (rank == 0) write (0, '(a)') 'usage: heat_fortran CONFIG.yaml [--n N>=4] [--steps S] [--every E>=1]'
     call cmpi_abort(comm, 2)
  end if

  ! z-slab of rank: global 0-based planes [lo, hi)
  lo = int(int(rank, 8) * n / nranks)
  hi = int(int(rank + 1, 8) * n / nranks)
  nz = hi - lo
  if (nz < 2) then
     if (rank == 0) write (0, '(a,i0,a,i0)') 'heat_fortran: n=', n, ' is too small for ranks=', nranks
     call cmpi_abort(comm, 2)
  end if
  below = cmpi_proc_null(); above = cmpi_proc_null()
  if (rank > 0) below = rank - 1
  if (rank < nranks - 1) above = rank + 1
  up = merge(1, 0, rank < nranks - 1)

  h = 1.0d0 / (n - 1)
  dt = h * h / 8
  r = dt / (h * h)
  allocate(T(n, n, 0:nz + 1), Tn(n, n, 0:nz + 1))
  T = 0
  do k = 1, nz
     do j = 1, n
        do i = 1, n
           T(i, j, k) = initial((i - 1) * h, (j - 1) * h, (lo + k - 1) * h)
        end do
     end do
  end do
  call exchange(T)
  Tn = T

  allocate(rank_cells(n - 1, n - 1, nz + up - 1))
  rank_cells = rank
  fields(2) = insitu_make_field('rank', rank_cells, INSITU_ELEMENT)

  status = insitu_initialize(trim(config), comm)
  if (rank == 0) then
     write (*, '(a,i0,a,i0,a,i0,a,i0,a,i0,a,a)') 'heat_fortran: ranks=', nranks, ' split=1x1x', nranks, &
          ' n=', n, ' steps=', steps, ' every=', every, ' insitu_initialize=', trim(status_name(status))
     flush (6)
  end if
  insitu = status == INSITU_OK

  last = steps
  do step = 0, steps
     if (step > 0) then
        do k = 1, nz
           if (lo + k - 1 == 0 .or. lo + k - 1 == n - 1) cycle
           do j = 2, n - 1
              do i = 2, n - 1
                 Tn(i, j, k) = T(i, j, k) + r * (T(i - 1, j, k) + T(i + 1, j, k) + T(i, j - 1, k) + &
                      T(i, j + 1, k) + T(i, j, k - 1) + T(i, j, k + 1) - 6 * T(i, j, k))
              end do
           end do
        end do
        call swap_and_exchange()
     end if
     if (.not. insitu .or. mod(step, every) /= 0) cycle
     ! T's storage moves in swap_and_exchange: describe the current array each time.
     fields(1) = insitu_make_field('T', T(:, :, 1:nz + up), INSITU_VERTEX)
     domains(1) = insitu_make_domain(rank, [n, n, nz + up], [0d0, 0d0, lo * h], [h, h, h], fields)
     mesh = insitu_make_mesh(domains)
     status = insitu_execute(step, step * dt, mesh)
     rstatus = insitu_results(res)
     iso = ieee_nan()
     ierr = insitu_get_iso_value('p1', 0, iso)
     if (rank == 0) then
        write (*, '(a,i0,a,f8.6,a,a,a,i0,a,i0,a,g0)') 'step ', step, ' t=', step * dt, ' insitu_execute=', &
             trim(status_name(status)), ' stop=', merge(int(res%stop), -1, rstatus == INSITU_OK), &
             ' errors=', merge(int(res%nerrors), -1, rstatus == INSITU_OK), ' iso[p1]=', iso
        flush (6)
     end if
     if (rstatus == INSITU_OK .and. res%stop /= 0) then
        if (rank == 0) write (*, '(a,i0)') 'stopped by the adaptor at step ', step
        last = step
        exit
     end if
  end do
  if (insitu) status = insitu_finalize()

  total = cmpi_reduce_sum(sum(T(:, :, 1:nz)), 0, comm)
  if (rank == 0) write (*, '(a,i0,a,es24.17)') 'done steps=', last, ' sum(T)=', total
  call cmpi_finalize()

contains

  pure real(c_double) function initial(x, y, z)
    real(c_double), intent(in) :: x, y, z
    initial = blob(x - 0.35d0, y - 0.5d0, z - 0.5d0) + blob(x - 0.65d0, y - 0.5d0, z - 0.55d0)
  end function initial

  pure real(c_double) function blob(dx, dy, dz)
    real(c_double), intent(in) :: dx, dy, dz
    blob = exp(-(dx * dx + dy * dy + dz * dz) / (2 * 0.12d0**2))
  end function blob

  ! Ghost planes from the ranks below and above (planes are contiguous: k is slowest).
  subroutine exchange(U)
    real(c_double), intent(inout) :: U(:, :, 0:)
    integer :: m
    m = n * n
    ierr = cmpi_sendrecv(U(:, :, 1), m, below, 1, U(:, :, nz + 1), above, 1, comm)
    ierr = cmpi_sendrecv(U(:, :, nz), m, above, 2, U(:, :, 0), below, 2, comm)
  end subroutine exchange

  subroutine swap_and_exchange()
    call move_alloc_swap()
    call exchange(T)
  end subroutine swap_and_exchange

  subroutine move_alloc_swap()
    real(c_double), allocatable :: tmp(:, :, :)
    call move_alloc(T, tmp)
    call move_alloc(Tn, T)
    call move_alloc(tmp, Tn)
  end subroutine move_alloc_swap

  function status_name(s) result(name)
    integer, intent(in) :: s
    character(len=32) :: name
    select case (s)
    case (INSITU_OK); name = 'INSITU_OK'
    case (INSITU_ERR_ARGUMENT); name = 'INSITU_ERR_ARGUMENT'
    case (INSITU_ERR_CONFIG); name = 'INSITU_ERR_CONFIG'
    case (INSITU_ERR_MESH); name = 'INSITU_ERR_MESH'
    case (INSITU_ERR_DEVICE_UNAVAILABLE); name = 'INSITU_ERR_DEVICE_UNAVAILABLE'
    case (INSITU_ERR_NOT_INITIALIZED); name = 'INSITU_ERR_NOT_INITIALIZED'
    case (INSITU_ERR_EXECUTE); name = 'INSITU_ERR_EXECUTE'
    case (INSITU_ERR_NOT_FOUND); name = 'INSITU_ERR_NOT_FOUND'
    case default; name = 'INSITU_ERR_PYTHON'
    end select
  end function status_name

  real(c_double) function ieee_nan()
    use, intrinsic :: ieee_arithmetic
    ieee_nan = ieee_value(1d0, ieee_quiet_nan)
  end function ieee_nan

end program heat_fortran
