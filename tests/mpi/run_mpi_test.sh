#!/bin/sh
# Runs one MPI test under mpirun with what OpenMPI needs in a container and on a small machine:
# root allowed, more ranks than cores, no single-copy mechanism (no ptrace in containers).
# usage: run_mpi_test.sh RANKS COMMAND [ARGS...]
ranks=$1
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# More ranks than cores: a rank waiting in MPI gives its core to the others instead of spinning.
export OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1
# Under LeakSanitizer: OpenMPI's and BLACS's allocations kept until exit are suppressed, added to
# any suppressions file already given (LSan reads one).
supp=$(dirname "$0")/mpi_lsan.supp
combined=
case "${LSAN_OPTIONS:-}" in
  *suppressions=*)
    given=${LSAN_OPTIONS##*suppressions=}
    given=${given%%:*}
    combined=$(mktemp)
    cat "$given" "$supp" > "$combined" 2>/dev/null
    export LSAN_OPTIONS="suppressions=$combined"
    ;;
  *) export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$supp" ;;
esac
# Leaks are checked before MPI_Finalize (environment's destructor); the full unwinder puts OpenMPI's
# own frames in the stacks of allocations made inside plugins it loads and unloads in MPI_Init,
# so the suppressions above match them (the fast one stops at the unloaded plugin).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
mpirun -np "$ranks" "$@"
status=$?
[ -n "$combined" ] && rm -f "$combined"
exit $status
