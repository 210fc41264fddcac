// Multiplies two random matrices on the first CPU device and checks the result against the
// sequential reference: the smallest complete use of the public API.
#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <cstdio>

int main() {
    namespace ts = tilestream;
    const ts::index_t m = 301, n = 257, k = 199;
    ts::host_matrix<float> a(m, k), b(k, n), c(m, n);
    ts::fill_random(a.view(), 1);
    ts::fill_random(b.view(), 2);

    auto devices = ts::open_devices("cpu");
    ts::gemm_options opt;
    opt.kernel = ts::gemm_kernel::tiled;
    const auto report = ts::gemm<float>(*devices.front(), ts::op::n, ts::op::n, 1.0f, a.view(), b.view(),
                                        0.0f, c.view(), opt);

    ts::host_matrix<double> ad(m, k), bd(k, n), ref(m, n);
    for (ts::index_t i = 0; i < m; ++i)
        for (ts::index_t p = 0; p < k; ++p) ad(i, p) = a(i, p);
    for (ts::index_t p = 0; p < k; ++p)
        for (ts::index_t j = 0; j < n; ++j) bd(p, j) = b(p, j);
    ts::reference_gemm<double>(ts::op::n, ts::op::n, 1.0, ad.view(), bd.view(), 0.0, ref.view());
    const double err = ts::relative_frobenius_error<float>(c.view(), ref.view());
    std::printf("gemm %lldx%lldx%lld on %s: %.2f GFLOP/s, relative error %.2e\n", (long long)m,
                (long long)n, (long long)k, devices.front()->id().c_str(),
                2.0 * m * n * k / report.seconds * 1e-9, err);
    return err < ts::gemm_tolerance(ts::dtype::f32, k) ? 0 : 1;
}
