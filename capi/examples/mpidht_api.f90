! A Fortran program on the MPI-DHT's API through ISO_C_BINDING: its own
! hash function, 4-byte keys and values, 50 buckets per rank. The ranks
! write their share of the keys one at a time, then every rank reads every
! key back. DHT_init_t's comm is Open MPI's C handle (a pointer), got from
! the Fortran one by MPI_Comm_f2c. Prints one RESULT line per rank.
module dht_c
  use iso_c_binding
  implicit none
  integer(c_int), parameter :: DHT_SUCCESS = 0, DHT_READ_MISS = -2
  type, bind(C) :: dht_init_t
    integer(c_int) :: key_size, data_size
    integer(c_int) :: bucket_count ! unsigned int in C
    type(c_funptr) :: hash_func
    type(c_ptr) :: comm
  end type
  interface
    function mpi_comm_f2c(f) bind(C, name="MPI_Comm_f2c") result(c)
      import :: c_int, c_ptr
      integer(c_int), value :: f
      type(c_ptr) :: c
    end function
    function dht_create(init) bind(C, name="DHT_create") result(t)
      import :: dht_init_t, c_ptr
      type(dht_init_t), intent(in) :: init
      type(c_ptr) :: t
    end function
    function dht_write(t, key, data, proc, idx) bind(C, name="DHT_write") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: t, key, data, proc, idx
      integer(c_int) :: rc
    end function
    function dht_read(t, key, dest) bind(C, name="DHT_read") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: t, key, dest
      integer(c_int) :: rc
    end function
    function dht_free(t, retries) bind(C, name="DHT_free") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: t, retries
      integer(c_int) :: rc
    end function
  end interface
contains
  ! The program's own hash of a 4-byte key.
  function my_hash(size, key) bind(C) result(h)
    integer(c_int), value :: size
    type(c_ptr), value :: key
    integer(c_int64_t) :: h
    integer(c_int), pointer :: k
    call c_f_pointer(key, k)
    h = int(k, c_int64_t) * 40503_c_int64_t + int(size, c_int64_t) * 977_c_int64_t
  end function
end module

program mpidht_api_f
  use mpi
  use dht_c
  implicit none
  integer, parameter :: KEYS = 40
  integer :: ierr, rank, nranks, turn, hits
  integer(c_int), target :: k, v, got
  integer(c_int) :: rc
  type(dht_init_t) :: init
  type(c_ptr) :: t
  logical :: ok

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  init = dht_init_t(4, 4, 50, c_funloc(my_hash), mpi_comm_f2c(MPI_COMM_WORLD))
  t = dht_create(init)
  ok = c_associated(t)
  if (ok) then
    do turn = 0, nranks - 1
      if (turn == rank) then
        do k = rank, KEYS - 1, nranks
          v = k * 7 + 1
          rc = dht_write(t, c_loc(k), c_loc(v), c_null_ptr, c_null_ptr)
          if (rc /= DHT_SUCCESS) ok = .false.
        end do
      end if
      call MPI_Barrier(MPI_COMM_WORLD, ierr)
    end do
    hits = 0
    do k = 0, KEYS - 1
      rc = dht_read(t, c_loc(k), c_loc(got))
      if (rc == DHT_SUCCESS .and. got == k * 7 + 1) hits = hits + 1
    end do
    k = 1000000
    if (dht_read(t, c_loc(k), c_loc(got)) /= DHT_READ_MISS) ok = .false.
    if (hits /= KEYS) ok = .false.
    if (dht_free(t, c_null_ptr) /= DHT_SUCCESS) ok = .false.
  end if
  if (ok) then
    print '(a,i0,a,i0)', 'RESULT rank ', rank, ': ok hits ', hits
  else
    print '(a,i0,a)', 'RESULT rank ', rank, ': FAIL'
  end if
  call MPI_Finalize(ierr)
  if (.not. ok) stop 1
end program
