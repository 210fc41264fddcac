// The context's Cholesky calls: potrf on the tile-task engine (potrf_plan.cpp), potrs as two
// triangular solves through the TRSM planner, posv as both.
#include <tilestream/context.hpp>
#include <tilestream/error.hpp>

#include <algorithm>
#include <string>

namespace tilestream {

namespace {

/// `later`'s report with `earlier`'s time and traffic added (one call made of two runs).
blas3_report combined(const blas3_report& earlier, blas3_report later) {
    later.seconds += earlier.seconds;
    later.bytes_h2d += earlier.bytes_h2d;
    later.bytes_d2h += earlier.bytes_d2h;
    later.peak_device_bytes = std::max(later.peak_device_bytes, earlier.peak_device_bytes);
    later.cache_hits += earlier.cache_hits;
    later.cache_misses += earlier.cache_misses;
    later.bytes_saved += earlier.bytes_saved;
    later.kept_hits += earlier.kept_hits;
    later.kept_bytes_saved += earlier.kept_bytes_saved;
    for (const auto& w : earlier.warnings) later.warnings.push_back(w);
    for (const auto& f : earlier.faults) later.faults.push_back(f);
    return later;
}

std::string shape(index_t r, index_t c) { return std::to_string(r) + "x" + std::to_string(c); }

template <class A, class B>
void check_solve(const char* name, const A& a, const B& b) {
    if (a.rows() != a.cols())
        throw dimension_mismatch(std::string(name) + ": A is " + shape(a.rows(), a.cols()) + ", it must be square");
    if (b.rows() != a.rows())
        throw dimension_mismatch(std::string(name) + ": B is " + shape(b.rows(), b.cols()) + " but A is " +
                                 shape(a.rows(), a.cols()) + " (B needs " + std::to_string(a.rows()) + " rows)");
}

}  // namespace

template <class T>
blas3_report context::potrf(uplo u, host_matrix_view<T> a, const blas3_call_options& call) {
    return blas3<T>(blas3_routine::potrf, {side::left, u, op::n, diag::non_unit}, {T(1), T(0), {}, {}, a}, call);
}

template <class T>
blas3_report context::potrs(uplo u, host_matrix_view<const T> a, host_matrix_view<T> b, const blas3_call_options& call) {
    check_solve("potrs", a, b);
    // A = L L^H: L Y = B, then L^H X = Y. A = U^H U: U^H Y = B, then U X = Y.
    const op first = u == uplo::lower ? op::n : op::c, second = u == uplo::lower ? op::c : op::n;
    const blas3_report r1 = trsm<T>(side::left, u, first, diag::non_unit, T(1), a, b, call);
    return combined(r1, trsm<T>(side::left, u, second, diag::non_unit, T(1), a, b, call));
}

template <class T>
blas3_report context::posv(uplo u, host_matrix_view<T> a, host_matrix_view<T> b, const blas3_call_options& call) {
    check_solve("posv", a, b);
    blas3_report f = potrf<T>(u, a, call);
    if (f.info != 0) return f;
    return combined(f, potrs<T>(u, host_matrix_view<const T>(a), b, call));
}

#define TILESTREAM_INSTANTIATE(T)                                                                                  \
    template blas3_report context::potrf<T>(uplo, host_matrix_view<T>, const blas3_call_options&);             \
    template blas3_report context::potrs<T>(uplo, host_matrix_view<const T>, host_matrix_view<T>,              \
                                            const blas3_call_options&);                                       \
    template blas3_report context::posv<T>(uplo, host_matrix_view<T>, host_matrix_view<T>, const blas3_call_options&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
