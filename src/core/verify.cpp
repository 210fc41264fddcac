// Random fills, poison and error norms shared by the CLI's --check, the tests and the benchmarks.
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <cmath>
#include <limits>
#include <random>

namespace tilestream {

template <class T>
void fill_random(host_matrix_view<T> m, std::uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    // Walk in storage order so the values depend only on seed, shape and layout.
    const bool row = m.layout() == layout::row_major;
    const index_t outer = row ? m.rows() : m.cols(), inner = row ? m.cols() : m.rows();
    for (index_t o = 0; o < outer; ++o)
        for (index_t i = 0; i < inner; ++i) {
            double v = dist(gen);
            if (std::abs(v) < 1e-3) v = v < 0 ? -0.5 : 0.5;  // never (nearly) zero
            (row ? m(o, i) : m(i, o)) = static_cast<T>(v);
        }
}

template <class T>
void fill_nan(host_matrix_view<T> m) {
    for (index_t i = 0; i < m.rows(); ++i)
        for (index_t j = 0; j < m.cols(); ++j) m(i, j) = std::numeric_limits<T>::quiet_NaN();
}

template <class T>
double relative_frobenius_error(host_matrix_view<const T> x, host_matrix_view<const double> ref) {
    double diff = 0, norm = 0;
    for (index_t i = 0; i < x.rows(); ++i)
        for (index_t j = 0; j < x.cols(); ++j) {
            const double v = static_cast<double>(x(i, j));
            if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
            const double d = v - ref(i, j);
            diff += d * d;
            norm += ref(i, j) * ref(i, j);
        }
    return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

namespace {
template <class T>
host_matrix<double> to_double(host_matrix_view<const T> v) {
    host_matrix<double> d(v.rows(), v.cols());
    for (index_t i = 0; i < v.rows(); ++i)
        for (index_t j = 0; j < v.cols(); ++j) d(i, j) = static_cast<double>(v(i, j));
    return d;
}
}  // namespace

template <class T>
double gemm_relative_error(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                           T beta, host_matrix_view<const T> c0, host_matrix_view<const T> c) {
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    const host_matrix<double> ad = to_double(a), bd = to_double(b);
    host_matrix<double> ref(c.rows(), c.cols());
    if (beta != T(0)) {
        validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c0.rows(), c0.cols());
        ref = to_double(c0);
    } else {
        fill_nan(ref.view());  // beta = 0: the reference must not read it either
    }
    reference_gemm<double>(op_a, op_b, double(alpha), ad.view(), bd.view(), double(beta), ref.view());
    return relative_frobenius_error<T>(c, ref.view());
}

double gemm_tolerance(dtype t, index_t k, math_mode m) {
    double u = t == dtype::f32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
    if (t == dtype::f32 && m == math_mode::tf32) u = std::ldexp(1.0, -11);
    return std::max(16.0, 8.0 * std::sqrt(static_cast<double>(std::max<index_t>(k, 1)))) * u;
}

template void fill_random<float>(host_matrix_view<float>, std::uint64_t);
template void fill_random<double>(host_matrix_view<double>, std::uint64_t);
template void fill_nan<float>(host_matrix_view<float>);
template void fill_nan<double>(host_matrix_view<double>);
template double relative_frobenius_error<float>(host_matrix_view<const float>, host_matrix_view<const double>);
template double gemm_relative_error<float>(op, op, float, host_matrix_view<const float>, host_matrix_view<const float>,
                                          float, host_matrix_view<const float>, host_matrix_view<const float>);
template double gemm_relative_error<double>(op, op, double, host_matrix_view<const double>,
                                           host_matrix_view<const double>, double, host_matrix_view<const double>,
                                           host_matrix_view<const double>);
template double relative_frobenius_error<double>(host_matrix_view<const double>, host_matrix_view<const double>);

}  // namespace tilestream
