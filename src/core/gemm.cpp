// In-core GEMM through one device: validate, stage operands into device memory, run, copy back.
#include "backends/reference/reference_kernels.hpp"

#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>

#include <chrono>
#include <string>

namespace tilestream {
namespace {

std::string shape(index_t r, index_t c) { return std::to_string(r) + "x" + std::to_string(c); }

template <class T>
gemm_call make_call(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                    T beta, host_matrix_view<T> c) {
    gemm_call call;
    call.type = dtype_of<T>();
    call.op_a = op_a;
    call.op_b = op_b;
    call.m = c.rows();
    call.n = c.cols();
    call.k = op_a == op::n ? a.cols() : a.rows();
    call.alpha = alpha;
    call.beta = beta;
    call.a = a.data();
    call.lda = a.ld();
    call.layout_a = a.layout();
    call.b = b.data();
    call.ldb = b.ld();
    call.layout_b = b.layout();
    call.c = c.data();
    call.ldc = c.ld();
    call.layout_c = c.layout();
    return call;
}

/// Copies a host view into packed device storage (same layout) with one 2-D copy.
template <class T>
copy_2d_desc pack_desc(void* dst, host_matrix_view<const T> v) {
    const bool row = v.layout() == layout::row_major;
    const index_t inner = row ? v.cols() : v.rows();
    const index_t outer = row ? v.rows() : v.cols();
    copy_2d_desc d;
    d.dst = dst;
    d.dst_pitch = std::size_t(inner) * sizeof(T);
    d.src = v.data();
    d.src_pitch = std::size_t(v.ld()) * sizeof(T);
    d.width_bytes = std::size_t(inner) * sizeof(T);
    d.height = std::size_t(outer);
    return d;
}

index_t packed_ld(index_t rows, index_t cols, layout l) {
    return std::max<index_t>(1, l == layout::row_major ? cols : rows);
}

}  // namespace

void validate_gemm(op op_a, op op_b, index_t a_rows, index_t a_cols, index_t b_rows, index_t b_cols,
                   index_t c_rows, index_t c_cols) {
    for (index_t v : {a_rows, a_cols, b_rows, b_cols, c_rows, c_cols})
        if (v < 0) throw size_overflow("gemm: negative matrix extent " + std::to_string(v));
    const index_t m = op_a == op::n ? a_rows : a_cols;
    const index_t ka = op_a == op::n ? a_cols : a_rows;
    const index_t kb = op_b == op::n ? b_rows : b_cols;
    const index_t n = op_b == op::n ? b_cols : b_rows;
    if (ka != kb)
        throw dimension_mismatch("gemm: inner dimensions differ: op(A) is " + shape(m, ka) +
                                 ", op(B) is " + shape(kb, n));
    if (c_rows != m || c_cols != n)
        throw dimension_mismatch("gemm: C is " + shape(c_rows, c_cols) + " but op(A)*op(B) is " +
                                 shape(m, n));
    checked_mul(m, ka, "gemm: op(A)");
    checked_mul(kb, n, "gemm: op(B)");
    checked_mul(m, n, "gemm: C");
}

template <class T>
void reference_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                    T beta, host_matrix_view<T> c) {
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    reference::gemm(make_call(op_a, op_b, alpha, a, b, beta, c));
}

template <class T>
gemm_report gemm(device& dev, op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                 host_matrix_view<const T> b, T beta, host_matrix_view<T> c, const gemm_options& opt) {
    using clock = std::chrono::steady_clock;
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    if (!dev.supports(opt.kernel))
        throw invalid_argument("gemm: device " + dev.id() + " has no '" +
                               std::string(to_string(opt.kernel)) +
                               "' kernel (the reference kernel runs on CPU devices only)");
    gemm_report rep;
    const auto t_start = clock::now();
    gemm_call call = make_call(op_a, op_b, alpha, a, b, beta, c);
    if (call.m == 0 || call.n == 0) return rep;
    const bool read_ab = alpha != T(0) && call.k > 0;
    const bool read_c = beta != T(0);
    call.kernel = opt.kernel;
    call.math = opt.math;

    const std::size_t peak_before = dev.bytes_in_use();
    device_buffer da, db;
    if (read_ab) {
        da = dev.allocate(checked_bytes(a.rows(), a.cols(), dtype_of<T>(), "gemm: A"));
        db = dev.allocate(checked_bytes(b.rows(), b.cols(), dtype_of<T>(), "gemm: B"));
    }
    device_buffer dc = dev.allocate(checked_bytes(c.rows(), c.cols(), dtype_of<T>(), "gemm: C"));
    rep.peak_device_bytes = dev.bytes_in_use() - peak_before;

    auto s = dev.create_stream();
    if (read_ab) {
        dev.copy_2d_to_device(*s, pack_desc<T>(da.get(), a));
        dev.copy_2d_to_device(*s, pack_desc<T>(db.get(), b));
        rep.bytes_h2d += da.size() + db.size();
    }
    if (read_c) {
        dev.copy_2d_to_device(*s, pack_desc<T>(dc.get(), host_matrix_view<const T>(c)));
        rep.bytes_h2d += dc.size();
    }
    call.a = da.get();
    call.lda = packed_ld(a.rows(), a.cols(), a.layout());
    call.b = db.get();
    call.ldb = packed_ld(b.rows(), b.cols(), b.layout());
    call.c = dc.get();
    call.ldc = packed_ld(c.rows(), c.cols(), c.layout());

    clock::time_point k0, k1;
    dev.enqueue_host(*s, [&k0] { k0 = clock::now(); }, "kernel start");
    dev.gemm(*s, call);
    dev.enqueue_host(*s, [&k1] { k1 = clock::now(); }, "kernel end");
    copy_2d_desc back = pack_desc<T>(nullptr, host_matrix_view<const T>(c));
    std::swap(back.dst_pitch, back.src_pitch);
    back.dst = c.data();
    back.src = dc.get();
    dev.copy_2d_to_host(*s, back);
    rep.bytes_d2h += dc.size();
    s->synchronize();
    rep.kernel_seconds = std::chrono::duration<double>(k1 - k0).count();
    rep.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
    return rep;
}

#define TILESTREAM_INSTANTIATE(T)                                                                   \
    template gemm_report gemm<T>(device&, op, op, T, host_matrix_view<const T>,                    \
                                 host_matrix_view<const T>, T, host_matrix_view<T>, const gemm_options&); \
    template void reference_gemm<T>(op, op, T, host_matrix_view<const T>, host_matrix_view<const T>, T, \
                                    host_matrix_view<T>);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
