#!/bin/sh
# Runs one MPI test under mpirun with what OpenMPI needs in a container and on a small machine:
# root allowed, more ranks than cores, no single-copy mechanism (no ptrace in containers).
# usage: run_mpi_test.sh RANKS COMMAND [ARGS...]
ranks=$1
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OPENBLAS_NUM_THREADS=1
exec mpirun -np "$ranks" "$@"
