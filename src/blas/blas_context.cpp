// libtilestream_blas_context.so: the part of the BLAS drop-in that runs calls on a tilestream::context.
// The drop-in loads it privately on the first call it routes (blas_bridge.hpp says why).
#include "blas_bridge.hpp"

#include <tilestream/context.hpp>
#include <tilestream/types.hpp>

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <complex>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

namespace tilestream::blas {

namespace {

char* copy_out(const std::string& s) {
    char* p = static_cast<char*>(std::malloc(s.size() + 1));
    if (p) std::memcpy(p, s.c_str(), s.size() + 1);
    return p;
}

// The process's context, opened by `open` and never destroyed: a call may still run on it while
// the process exits (the drop-in's exit handler waits for such calls, but the devices' threads stay).
struct process_context {
    std::mutex mutex;
    context* ctx = nullptr;
    pid_t pid = 0;
};

process_context& shared() {
    static process_context* p = [] {
        auto* s = new process_context;
        // A fork while another thread opens the context must not leave the child's mutex held.
        pthread_atfork([] { shared().mutex.lock(); }, [] { shared().mutex.unlock(); },
                       [] { shared().mutex.unlock(); });
        return s;
    }();
    return *p;
}

int open_context(const char* devices, int has_budget, unsigned long long budget, char** text) {
    process_context& s = shared();
    const std::lock_guard lock(s.mutex);
    const pid_t pid = ::getpid();
    if (s.pid == pid && s.ctx) return 0;
    // A parent's context is left alone (leaked) in a child: its threads did not come along.
    s.ctx = nullptr;
    s.pid = pid;
    try {
        context_options options;
        if (has_budget) options.memory_budget = std::size_t(budget);
        s.ctx = new context(devices, options);
        return 0;
    } catch (const std::exception& e) {
        *text = copy_out(e.what());
    } catch (...) {
        *text = copy_out("an exception that is not a std::exception");
    }
    return 1;
}

// The m x n matrix a call writes (C, or B for trmm/trsm), line by line (the padding between lines
// is not the matrix's and is never touched), to put back when a routed call fails.
template <class T>
class saved_lines {
public:
    bool save(T* p, long lines, long len, long ld) {
        p_ = p, lines_ = lines, len_ = len, ld_ = ld;
        data_.reset(new (std::nothrow) T[std::size_t(lines) * std::size_t(len)]);
        if (!data_) return false;
        for (long i = 0; i < lines_; ++i) std::memcpy(&data_[i * len_], p_ + i * ld_, len_ * sizeof(T));
        return true;
    }
    void restore() const {
        for (long i = 0; i < lines_; ++i) std::memcpy(p_ + i * ld_, &data_[i * len_], len_ * sizeof(T));
    }

private:
    std::unique_ptr<T[]> data_;
    T* p_ = nullptr;
    long lines_ = 0, len_ = 0, ld_ = 0;
};

// The BLAS character, already checked by the drop-in: C is the conjugate transpose (T on real data).
op op_of(char trans) { return trans == 'N' ? op::n : trans == 'T' ? op::t : op::c; }

// Runs the call on the context. Throws what tilestream throws; C is then as it was before the call
// (restored from a copy when beta != 0, since a run may have written part of it).
template <class T>
std::string run_on_tilestream(context& ctx, const tilestream_blas_gemm_call& g) {
    const op op_a = op_of(g.trans_a), op_b = op_of(g.trans_b);
    const layout order = g.row_major ? layout::row_major : layout::col_major;
    const T alpha = *static_cast<const T*>(g.alpha), beta = *static_cast<const T*>(g.beta);
    const host_matrix_view<const T> a(static_cast<const T*>(g.a), op_a == op::n ? g.m : g.k,
                                      op_a == op::n ? g.k : g.m, order, g.lda);
    const host_matrix_view<const T> b(static_cast<const T*>(g.b), op_b == op::n ? g.k : g.n,
                                      op_b == op::n ? g.n : g.k, order, g.ldb);
    const host_matrix_view<T> c(static_cast<T*>(g.c), g.m, g.n, order, g.ldc);
    const gemm_plan plan = ctx.plan<T>(op_a, op_b, alpha, a, b, beta, c);
    saved_lines<T> saved;
    if (beta != T(0) && !saved.save(static_cast<T*>(g.c), g.row_major ? g.m : g.n, g.row_major ? g.n : g.m, long(g.ldc)))
        throw out_of_budget("no host memory to keep a copy of C for a fallback to the system BLAS");
    try {
        const gemm_report report = ctx.execute<T>(plan, alpha, a, b, beta, c);
        std::string fields = " devices=" + ctx.device_names() + " strategy=" + std::string(to_string(plan.strategy)) +
                             " kernel=" + std::string(to_string(plan.kernel));
        for (const auto& w : report.warnings) fields += " warning=\"" + w + "\"";
        return fields;
    } catch (...) {
        if (beta != T(0)) saved.restore();
        throw;
    }
}

int run_gemm(const tilestream_blas_gemm_call* call, char** text) {
    context* ctx = nullptr;
    {
        process_context& s = shared();
        const std::lock_guard lock(s.mutex);
        if (s.pid == ::getpid()) ctx = s.ctx;
    }
    try {
        if (!ctx) throw error("the context is not open in this process");
        std::string fields;
        switch (call->dtype) {
            case 0: fields = run_on_tilestream<float>(*ctx, *call); break;
            case 1: fields = run_on_tilestream<double>(*ctx, *call); break;
            case 2: fields = run_on_tilestream<std::complex<float>>(*ctx, *call); break;
            case 3: fields = run_on_tilestream<std::complex<double>>(*ctx, *call); break;
            default: throw error("dtype " + std::to_string(call->dtype) + " is not one the bridge knows");
        }
        *text = copy_out(fields);
        return 0;
    } catch (const std::exception& e) {
        *text = copy_out(e.what());
    } catch (...) {
        *text = copy_out("an exception that is not a std::exception");
    }
    return 1;
}

// ---- the rest of Level 3 BLAS ----

template <class T>
std::string run_level3_on_tilestream(context& ctx, const tilestream_blas_level3_call& g) {
    const blas3_routine routine = parse_blas3_routine(g.routine);
    const bool rank_k = routine == blas3_routine::syrk || routine == blas3_routine::syr2k ||
                        routine == blas3_routine::herk || routine == blas3_routine::her2k;
    const bool tri = routine == blas3_routine::trmm || routine == blas3_routine::trsm;
    const layout order = g.row_major ? layout::row_major : layout::col_major;
    blas3_flags flags;
    flags.side = g.side == 'R' ? side::right : side::left;
    flags.uplo = g.uplo == 'L' ? uplo::lower : uplo::upper;
    flags.trans = g.trans == 'N' ? op::n : g.trans == 'T' || !is_complex_v<T> ? op::t : op::c;  // 'C' on real data is 'T'
    flags.diag = g.diag == 'U' ? diag::unit : diag::non_unit;
    blas3_operands<T> ops;
    ops.alpha = *static_cast<const T*>(g.alpha);
    if (!tri) ops.beta = *static_cast<const T*>(g.beta);
    if (rank_k) {
        const int rows = flags.trans == op::n ? g.n : g.k, cols = flags.trans == op::n ? g.k : g.n;
        ops.a = host_matrix_view<const T>(static_cast<const T*>(g.a), rows, cols, order, g.lda);
        if (routine == blas3_routine::syr2k || routine == blas3_routine::her2k)
            ops.b = host_matrix_view<const T>(static_cast<const T*>(g.b), rows, cols, order, g.ldb);
        ops.c = host_matrix_view<T>(static_cast<T*>(g.c), g.n, g.n, order, g.ldc);
    } else {
        const int ka = flags.side == side::left ? g.m : g.n;
        ops.a = host_matrix_view<const T>(static_cast<const T*>(g.a), ka, ka, order, g.lda);
        if (!tri) ops.b = host_matrix_view<const T>(static_cast<const T*>(g.b), g.m, g.n, order, g.ldb);
        ops.c = host_matrix_view<T>(static_cast<T*>(g.c), g.m, g.n, order, g.ldc);  // trmm, trsm: B, with ldb
    }
    const blas3_problem problem = describe_blas3<T>(routine, flags, ops);
    const blas3_plan plan = ctx.plan(problem);
    // A run may have written part of C (B) before failing: it is put back for the real BLAS.
    const bool reads_output = tri || ops.beta != T(0);
    saved_lines<T> saved;
    const long rows = ops.c.rows(), cols = ops.c.cols();
    if (reads_output && rows > 0 && cols > 0 &&
        !saved.save(ops.c.data(), g.row_major ? rows : cols, g.row_major ? cols : rows, ops.c.ld()))
        throw out_of_budget("no host memory to keep a copy of the output for a fallback to the system BLAS");
    try {
        const blas3_report report = ctx.execute<T>(plan, ops);
        std::string fields = " devices=" + ctx.device_names() + " tasks=" + std::to_string(plan.tasks);
        for (const auto& w : report.warnings) fields += " warning=\"" + w + "\"";
        return fields;
    } catch (...) {
        if (reads_output && rows > 0 && cols > 0) saved.restore();
        throw;
    }
}

int run_level3(const tilestream_blas_level3_call* call, char** text) {
    context* ctx = nullptr;
    {
        process_context& s = shared();
        const std::lock_guard lock(s.mutex);
        if (s.pid == ::getpid()) ctx = s.ctx;
    }
    try {
        if (!ctx) throw error("the context is not open in this process");
        const std::string fields = call->dtype == 0   ? run_level3_on_tilestream<float>(*ctx, *call)
                                   : call->dtype == 1 ? run_level3_on_tilestream<double>(*ctx, *call)
                                   : call->dtype == 2 ? run_level3_on_tilestream<std::complex<float>>(*ctx, *call)
                                                      : run_level3_on_tilestream<std::complex<double>>(*ctx, *call);
        *text = copy_out(fields);
        return 0;
    } catch (const std::exception& e) {
        *text = copy_out(e.what());
    } catch (...) {
        *text = copy_out("an exception that is not a std::exception");
    }
    return 1;
}

std::string tilestream_file() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(&tilestream::parse_bytes), &info) && info.dli_fname)
        return info.dli_fname;
    return {};
}

}  // namespace

}  // namespace tilestream::blas

extern "C" __attribute__((visibility("default"))) const tilestream_blas_bridge* tilestream_blas_bridge_entry(void) {
    // Leaked, not static objects: nothing here is destroyed while a call may still read it at exit.
    static const std::string& library = *new std::string(tilestream::blas::tilestream_file());
    static const tilestream_blas_bridge bridge{TILESTREAM_BLAS_BRIDGE_ABI, library.c_str(),
                                               &tilestream::blas::open_context, &tilestream::blas::run_gemm,
                                               &tilestream::blas::run_level3};
    return &bridge;
}
