// libtilestream_blas_context.so: the part of the BLAS drop-in that runs calls on a tilestream::context.
// The drop-in loads it privately on the first call it routes (blas_bridge.hpp says why).
#include "blas_bridge.hpp"

#include <tilestream/context.hpp>
#include <tilestream/types.hpp>

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

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

// This process's id, kept: getpid() is a system call (about 0.1 us on a VM), and a routed call
// asks twice. A child after fork() starts again from 0 (the handler below).
std::atomic<pid_t> cached_pid{0};
pid_t this_process() {
    pid_t p = cached_pid.load(std::memory_order_relaxed);
    if (p == 0) cached_pid.store(p = ::getpid(), std::memory_order_relaxed);
    return p;
}

process_context& shared() {
    static process_context* p = [] {
        auto* s = new process_context;
        // A fork while another thread opens the context must not leave the child's mutex held.
        pthread_atfork([] { shared().mutex.lock(); }, [] { shared().mutex.unlock(); },
                       [] {
                           cached_pid.store(0, std::memory_order_relaxed);
                           shared().mutex.unlock();
                       });
        return s;
    }();
    return *p;
}

int open_context(const char* devices, int has_budget, unsigned long long budget, char** text) {
    process_context& s = shared();
    const std::lock_guard lock(s.mutex);
    const pid_t pid = this_process();
    if (s.pid == pid && s.ctx) return 0;
    // A parent's context is left alone (leaked) in a child: its threads did not come along.
    s.ctx = nullptr;
    s.pid = pid;
    try {
        context_options options;
        if (has_budget) options.memory_budget = std::size_t(budget);
        // BLAS has no cancel and no progress: steps of a bounded time would only cost speed (and
        // keep a long call on one CPU device off the direct path, which is the system BLAS's call).
        options.step_seconds = 0;
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

// Runs the call on the context (its one-call gemm: a call under the crossover goes straight to the
// host's kernel, with no plan). Throws what tilestream throws; C is then as it was before the call
// (restored from a copy when beta != 0 and the call may run on the engine, which may have written
// part of it; the direct path writes C only through one kernel call, after its checks). Returns the
// log fields when `fields` is set, else nothing (no string is built on a call nobody logs).
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
    saved_lines<T> saved;
    const bool keep = beta != T(0) && !ctx.runs_direct(dtype_of<T>(), g.m, g.n, g.k);
    if (keep && !saved.save(static_cast<T*>(g.c), g.row_major ? g.m : g.n, g.row_major ? g.n : g.m, long(g.ldc)))
        throw out_of_budget("no host memory to keep a copy of C for a fallback to the system BLAS");
    try {
        const gemm_report report = ctx.gemm<T>(op_a, op_b, alpha, a, b, beta, c);
        if (!g.fields) return {};
        std::string fields = " devices=" + ctx.device_names() + " strategy=" +
                             std::string(to_string(report.plan.strategy)) +
                             " kernel=" + std::string(to_string(report.plan.kernel)) +
                             " steps=" + std::to_string(report.plan.steps);
        for (const auto& w : report.warnings) fields += " warning=\"" + w + "\"";
        return fields;
    } catch (...) {
        if (keep) saved.restore();
        throw;
    }
}


// Runs `run(ctx)` on this process's context: 0 with the log fields it returns in *text, or 1 with
// why in *text (what tilestream threw; the run has left the client's data as it was).
template <class Run>
int on_context(char** text, Run run) {
    context* ctx = nullptr;
    {
        process_context& s = shared();
        const std::lock_guard lock(s.mutex);
        if (s.pid == this_process()) ctx = s.ctx;
    }
    try {
        if (!ctx) throw error("the context is not open in this process");
        const std::string fields = run(*ctx);
        *text = fields.empty() ? nullptr : copy_out(fields);
        return 0;
    } catch (const std::exception& e) {
        *text = copy_out(e.what());
    } catch (...) {
        *text = copy_out("an exception that is not a std::exception");
    }
    return 1;
}

// f.template operator()<T>() for the call's dtype (0 f32, 1 f64, 2 c32, 3 c64).
template <class F>
std::string by_dtype(int dtype, F f) {
    switch (dtype) {
        case 0: return f.template operator()<float>();
        case 1: return f.template operator()<double>();
        case 2: return f.template operator()<std::complex<float>>();
        case 3: return f.template operator()<std::complex<double>>();
        default: throw error("dtype " + std::to_string(dtype) + " is not one the bridge knows");
    }
}

int run_gemm(const tilestream_blas_gemm_call* call, char** text) {
    return on_context(text, [&](context& ctx) {
        return by_dtype(call->dtype, [&]<class T>() { return run_on_tilestream<T>(ctx, *call); });
    });
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
    return on_context(text, [&](context& ctx) {
        return by_dtype(call->dtype, [&]<class T>() { return run_level3_on_tilestream<T>(ctx, *call); });
    });
}

// ---- LAPACK's Cholesky and LU drivers ----

std::string warnings_of(const std::vector<std::string>& warnings) {
    std::string fields;
    for (const auto& w : warnings) fields += " warning=\"" + w + "\"";
    return fields;
}

// Runs one LAPACK call on the context: A (m x n or n x n) and B (n x nrhs) are column-major with
// their leading dimensions, as LAPACK's. What the call writes (A, B, ipiv) is copied first, so
// that a failed run leaves them as they were for the system LAPACK; *info is written at the end.
template <class T>
std::string run_lapack_on_tilestream(context& ctx, const tilestream_blas_lapack_call& g) {
    const std::string routine = g.routine;
    const bool factors = routine == "potrf" || routine == "posv" || routine == "getrf" || routine == "gesv";
    const bool solves = routine != "potrf" && routine != "getrf";
    const bool lu = routine == "getrf" || routine == "getrs" || routine == "gesv";
    const int rows = routine == "getrf" ? g.m : g.n;
    const uplo u = g.uplo == 'L' ? uplo::lower : uplo::upper;
    T* a = static_cast<T*>(g.a);
    T* b = static_cast<T*>(g.b);
    const host_matrix_view<T> av(a, rows, g.n, layout::col_major, g.lda);
    const host_matrix_view<T> bv(solves ? b : nullptr, solves ? g.n : 0, solves ? g.nrhs : 0, layout::col_major,
                                 solves ? g.ldb : 1);
    saved_lines<T> saved_a, saved_b;
    if (factors && rows > 0 && g.n > 0 && !saved_a.save(a, g.n, rows, g.lda))
        throw out_of_budget("no host memory to keep a copy of A for a fallback to the system LAPACK");
    if (solves && g.n > 0 && g.nrhs > 0 && !saved_b.save(b, g.nrhs, g.n, g.ldb))
        throw out_of_budget("no host memory to keep a copy of B for a fallback to the system LAPACK");
    const int pivots = routine == "getrf" ? std::min(g.m, g.n) : g.n;
    std::vector<index_t> ipiv(lu ? std::size_t(std::max(pivots, 0)) : 0);
    if (routine == "getrs")
        for (int i = 0; i < pivots; ++i) ipiv[std::size_t(i)] = g.ipiv[i];
    index_t info = 0;
    std::string fields;
    try {
        if (routine == "potrf") {
            const blas3_report r = ctx.potrf<T>(u, av);
            info = r.info, fields = warnings_of(r.warnings);
        } else if (routine == "potrs") {
            const blas3_report r = ctx.potrs<T>(u, host_matrix_view<const T>(av), bv);
            fields = warnings_of(r.warnings);
        } else if (routine == "posv") {
            const blas3_report r = ctx.posv<T>(u, av, bv);
            info = r.info, fields = warnings_of(r.warnings);
        } else if (routine == "getrf") {
            const getrf_report r = ctx.getrf<T>(av, ipiv);
            info = r.info, fields = warnings_of(r.warnings);
        } else if (routine == "getrs") {
            // 'C' on real data is 'T'.
            const op trans = g.trans == 'N' ? op::n : g.trans == 'T' || !is_complex_v<T> ? op::t : op::c;
            const getrs_report r = ctx.getrs<T>(trans, host_matrix_view<const T>(av), ipiv, bv);
            fields = warnings_of(r.first.warnings) + warnings_of(r.second.warnings);
        } else if (routine == "gesv") {
            const gesv_report r = ctx.gesv<T>(av, ipiv, bv);
            info = r.info, fields = warnings_of(r.factor.warnings) + warnings_of(r.solve.first.warnings) +
                           warnings_of(r.solve.second.warnings);
        } else {
            throw error("LAPACK routine '" + routine + "' is not one the bridge knows");
        }
    } catch (...) {
        if (factors && rows > 0 && g.n > 0) saved_a.restore();
        if (solves && g.n > 0 && g.nrhs > 0) saved_b.restore();
        throw;
    }
    if (routine == "getrf" || routine == "gesv")
        for (int i = 0; i < pivots; ++i) g.ipiv[i] = int(ipiv[std::size_t(i)]);
    *g.info = int(info);
    return " devices=" + ctx.device_names() + " info=" + std::to_string(info) + fields;
}

int run_lapack(const tilestream_blas_lapack_call* call, char** text) {
    return on_context(text, [&](context& ctx) {
        return by_dtype(call->dtype, [&]<class T>() { return run_lapack_on_tilestream<T>(ctx, *call); });
    });
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
                                               &tilestream::blas::run_level3, &tilestream::blas::run_lapack};
    return &bridge;
}
