#pragma once
// The PBLAS GEMM routines that libtilestream_scalapack exports (ScaLAPACK's Fortran calling
// convention: every argument by address, 1-based IA/JA, 9- or 11-entry descriptors), for C++
// programs that call them directly; Fortran programs and ScaLAPACK itself bind to them by name.

#include <complex>

extern "C" {
#define TILESTREAM_PBLAS_GEMM(name, T)                                                                           \
    void name(const char* transa, const char* transb, const int* m, const int* n, const int* k, const T* alpha,   \
              const T* a, const int* ia, const int* ja, const int* desca, const T* b, const int* ib, const int* jb, \
              const int* descb, const T* beta, T* c, const int* ic, const int* jc, const int* descc);
TILESTREAM_PBLAS_GEMM(psgemm_, float)
TILESTREAM_PBLAS_GEMM(pdgemm_, double)
TILESTREAM_PBLAS_GEMM(pcgemm_, std::complex<float>)
TILESTREAM_PBLAS_GEMM(pzgemm_, std::complex<double>)
#undef TILESTREAM_PBLAS_GEMM
}
