// The Level 3 diagonal blocks on CUDA devices through cuBLAS (vendor kernel, every precision): trsm,
// trmm (in place: C passed as both B and its output), symm, syrk, syr2k, hemm, herk, her2k. cuBLAS
// does not read C when beta = 0. Cholesky's diagonal tiles through cuSOLVER (?potrf).
#include "backends/cuda/cublas_values.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "core/engine/tile_kernels.hpp"

#include <tilestream/error.hpp>

#include <complex>
#include <type_traits>

namespace tilestream::cuda {

namespace {

template <class T>
void run_typed(cublasHandle_t h, const ::tilestream::detail::engine::column_major_tile& r, const std::string& id) {
    using C = cu_t<T>;
    using R = real_type_t<T>;
    constexpr dtype t = dtype_of<T>();
    const T alpha_v = scalar_as<T>(r.alpha), beta_v = scalar_as<T>(r.beta);
    const R alpha_re = R(r.alpha.real()), beta_re = R(r.beta.real());
    const C* alpha = reinterpret_cast<const C*>(&alpha_v);
    const C* beta = reinterpret_cast<const C*>(&beta_v);
    const C* a = static_cast<const C*>(r.a);
    const C* b = static_cast<const C*>(r.b);
    C* c = static_cast<C*>(r.c);
    const int m = int(r.m), n = int(r.n), k = int(r.k), lda = int(r.lda), ldb = int(r.ldb), ldc = int(r.ldc);
    const auto sd = side_of(r.side_);
    const auto ul = fill_of(r.uplo_);
    const auto tr = op_of(r.trans);
    const auto dg = diag_of(r.diag_);
    // One cuBLAS entry per precision: S, D, C, Z.
#define TS_CUBLAS(name, ...)                                                                          \
    do {                                                                                              \
        if constexpr (t == dtype::f32) TS_CUDA_CHECK(cublasS##name(h, __VA_ARGS__), id);               \
        else if constexpr (t == dtype::f64) TS_CUDA_CHECK(cublasD##name(h, __VA_ARGS__), id);          \
        else if constexpr (t == dtype::c32) TS_CUDA_CHECK(cublasC##name(h, __VA_ARGS__), id);          \
        else TS_CUDA_CHECK(cublasZ##name(h, __VA_ARGS__), id);                                         \
    } while (0)
    switch (r.kind) {
        case tile_kind::trsm: TS_CUBLAS(trsm, sd, ul, tr, dg, m, n, alpha, a, lda, c, ldc); return;
        // In place: C passed as both B and the output.
        case tile_kind::trmm: TS_CUBLAS(trmm, sd, ul, tr, dg, m, n, alpha, a, lda, c, ldc, c, ldc); return;
        case tile_kind::symm: TS_CUBLAS(symm, sd, ul, m, n, alpha, a, lda, b, ldb, beta, c, ldc); return;
        case tile_kind::syrk: TS_CUBLAS(syrk, ul, tr, n, k, alpha, a, lda, beta, c, ldc); return;
        case tile_kind::syr2k: TS_CUBLAS(syr2k, ul, tr, n, k, alpha, a, lda, b, ldb, beta, c, ldc); return;
        case tile_kind::hemm:
            if constexpr (t == dtype::c32) TS_CUDA_CHECK(cublasChemm(h, sd, ul, m, n, alpha, a, lda, b, ldb, beta, c, ldc), id);
            else if constexpr (t == dtype::c64) TS_CUDA_CHECK(cublasZhemm(h, sd, ul, m, n, alpha, a, lda, b, ldb, beta, c, ldc), id);
            else break;
            return;
        case tile_kind::herk:
            if constexpr (t == dtype::c32) TS_CUDA_CHECK(cublasCherk(h, ul, tr, n, k, &alpha_re, a, lda, &beta_re, c, ldc), id);
            else if constexpr (t == dtype::c64) TS_CUDA_CHECK(cublasZherk(h, ul, tr, n, k, &alpha_re, a, lda, &beta_re, c, ldc), id);
            else break;
            return;
        case tile_kind::her2k:
            if constexpr (t == dtype::c32) TS_CUDA_CHECK(cublasCher2k(h, ul, tr, n, k, alpha, a, lda, b, ldb, &beta_re, c, ldc), id);
            else if constexpr (t == dtype::c64) TS_CUDA_CHECK(cublasZher2k(h, ul, tr, n, k, alpha, a, lda, b, ldb, &beta_re, c, ldc), id);
            else break;
            return;
        case tile_kind::gemm:
        case tile_kind::getrf:
        case tile_kind::laswp:  // LAPACK: the engine runs them on the host
        case tile_kind::potrf: break;  // cuSOLVER: run_cusolver_potrf
    }
#undef TS_CUBLAS
    throw invalid_argument(id + ": no cuBLAS tile kernel for " + std::string(to_string(r.kind)) + " " +
                           std::string(to_string(t)));
}

}  // namespace

void run_cublas_tile(cublasHandle_t h, const ::tilestream::detail::engine::column_major_tile& r, dtype type, const std::string& device_id) {
    visit_dtype(type, [&]<class T>() { run_typed<T>(h, r, device_id); });
}

bool cuda_device::supports(tile_kind kind, dtype type, gemm_kernel k) const {
    if (kind == tile_kind::gemm) return supports(k);
    // cuSOLVER, every precision, when it can be opened (else staged to the host's LAPACK).
    if (kind == tile_kind::potrf) return k == gemm_kernel::vendor && cusolver_available();
    return k == gemm_kernel::vendor && ::tilestream::detail::engine::blas_has(kind, type);
}

}  // namespace tilestream::cuda
