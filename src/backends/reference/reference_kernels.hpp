// Sequential, obviously correct kernels: the oracle every other kernel is tested against.
#pragma once

#include <tilestream/kernels.hpp>
#include <tilestream/tile_ops.hpp>

namespace tilestream::reference {

/// GEMM on host memory described by call, accumulating each dot product in double.
void gemm(const gemm_call& call);

/// Any tile operation on host memory (reference_blas3.cpp), accumulating in double (complex<double>).
void execute(const tile_op& op);

/// One Jacobi sweep on host memory (see jacobi_call), residual accumulated in double.
void jacobi_sweep(const jacobi_call& call);

}  // namespace tilestream::reference
