// Multiplies two random matrices on every device present and checks the result against the
// sequential reference: the smallest complete use of the public API.
#include <tilestream/context.hpp>
#include <tilestream/verify.hpp>

#include <cstdio>

int main() {
    namespace ts = tilestream;
    const ts::index_t m = 301, n = 257, k = 199;
    ts::host_matrix<float> a(m, k), b(k, n), c(m, n);
    ts::fill_random(a.view(), 1);
    ts::fill_random(b.view(), 2);

    ts::context ctx("all", {.kernel = ts::gemm_kernel::tiled});  // opened once, reused by every call
    const auto report = ctx.gemm<float>(a.view(), b.view(), c.view());

    const double err = ts::gemm_relative_error<float>(ts::op::n, ts::op::n, 1.0f, a.view(), b.view(), 0.0f,
                                                      c.view(), c.view());
    std::printf("gemm %lldx%lldx%lld on %s (%s): %.2f GFLOP/s, relative error %.2e\n", (long long)m,
                (long long)n, (long long)k, ctx.device_names().c_str(),
                std::string(ts::to_string(report.plan.strategy)).c_str(), 2.0 * m * n * k / report.seconds * 1e-9, err);
    return err < ts::gemm_tolerance(ts::dtype::f32, k) ? 0 : 1;
}
