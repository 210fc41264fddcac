// The portable GEMM micro-kernels: 16-byte GCC vectors (SSE2 on any x86-64, NEON elsewhere),
// f32 6x8 and f64 6x4, 12 accumulators each.
#include "cpu_isa.hpp"

namespace tilestream::cpu {
namespace {

template <class T>
struct generic_vector {
    using value = T;
    typedef T reg __attribute__((vector_size(16)));
    static constexpr int width = 16 / sizeof(T);
    static reg zero() { return reg{}; }
    static reg load(const T* p) {
        reg r;
        __builtin_memcpy(&r, p, sizeof r);
        return r;
    }
    static void store(T* p, reg r) { __builtin_memcpy(p, &r, sizeof r); }
    static void stream(T* p, reg r) { store(p, r); }  // no streaming store in portable C++
    static void fence() {}
    static reg broadcast(const T* p) { return reg{} + *p; }
    static reg mul(reg x, reg y) { return x * y; }
    static reg fma(reg x, reg y, reg z) { return x * y + z; }
    static reg load_part(const T* p, int n) {
        reg r{};
        __builtin_memcpy(&r, p, std::size_t(n) * sizeof(T));
        return r;
    }
    static void store_part(T* p, reg r, int n) { __builtin_memcpy(p, &r, std::size_t(n) * sizeof(T)); }
};

}  // namespace
}  // namespace tilestream::cpu

#include "gemm_micro_kernel.hpp"

namespace tilestream::cpu {
namespace {
using generic_f32 = generic_vector<float>;
using generic_f64 = generic_vector<double>;
constexpr int mr_f32 = 6, nv_f32 = 2, mr_f64 = 6, nv_f64 = 2;
}  // namespace

constinit const isa_config generic_config{
    isa::generic,
    &micro::kernel<generic_f32, mr_f32, nv_f32>, mr_f32, nv_f32 * generic_f32::width,
    &micro::kernel<generic_f64, mr_f64, nv_f64>, mr_f64, nv_f64 * generic_f64::width,
    /*l1_share_f32=*/0.5, /*l1_share_f64=*/0.5, /*l2_share=*/0.5, /*l3_share=*/0.5,
    4 * generic_f32::width, 4 * generic_f64::width,
    &micro::stack_kernel<generic_f32>, &micro::stack_kernel<generic_f64>};

}  // namespace tilestream::cpu
