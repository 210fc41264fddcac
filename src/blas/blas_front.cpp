// libtilestream_blas.so: sgemm_, dgemm_, cblas_sgemm and cblas_dgemm for any BLAS client. Large calls
// are translated into one tilestream::context call; small ones, and every call tilestream cannot run,
// go to the system BLAS. The only symbols exported are these four (blas_exports.map).
#include "settings.hpp"
#include "system_blas.hpp"

#include <tilestream/context.hpp>
#include <tilestream/types.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>

#define TILESTREAM_BLAS_EXPORT extern "C" __attribute__((visibility("default"), noinline))

namespace tilestream::blas {

namespace {

void stderr_line(const std::string& text) {
    const std::string line = "tilestream BLAS: " + text + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
}

// Process-wide state, made on the first GEMM call and never destroyed (a client may call BLAS from
// atexit handlers or threads still running at exit).
class front {
public:
    front()
        : config_(read_settings()),
          libraries_(config_.system_blas, reinterpret_cast<const void*>(&stderr_line), config_.problems) {
        for (const auto& p : config_.problems) stderr_line(p);
        if (!config_.log_path.empty()) {
            log_fd_ = ::open(config_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (log_fd_ < 0)
                stderr_line("cannot open TILESTREAM_BLAS_LOG '" + config_.log_path + "': " + std::strerror(errno));
            log("settings pid=" + std::to_string(::getpid()) + " threshold=" + std::to_string(config_.threshold) +
                " devices=" + config_.devices + " memory_budget=" +
                (config_.memory_budget ? std::to_string(*config_.memory_budget) : std::string("device")) +
                " system_blas=" + libraries_.system().path);
        }
        pthread_atfork([] { instance().context_mutex_.lock(); }, [] { instance().context_mutex_.unlock(); },
                       [] { instance().context_mutex_.unlock(); });
    }

    static front& instance() {
        static front* f = new front();
        return *f;
    }

    const settings& config() const { return config_; }
    const real_blas& libraries() const { return libraries_; }

    /// The context of this process, opened on the first call that needs it; nullptr when it cannot
    /// be opened (said once on stderr and in the log). A child after fork() opens its own: the
    /// parent's worker threads did not come along.
    context* shared_context() {
        const std::lock_guard lock(context_mutex_);
        const pid_t pid = ::getpid();
        if (context_pid_ == pid) return context_;
        context_pid_ = pid;
        context_ = nullptr;  // a parent's context is left alone (leaked): its threads are not here
        try {
            context_options options;
            options.memory_budget = config_.memory_budget;
            context_ = new context(config_.devices, options);
        } catch (const std::exception& e) {
            const std::string what = std::string("cannot open TILESTREAM_DEVICES '") + config_.devices +
                                     "': " + e.what() + "; every GEMM goes to the system BLAS";
            stderr_line(what);
            log("error=\"" + what + "\"");
        }
        return context_;
    }

    bool logging() const { return log_fd_ >= 0; }
    void log(const std::string& fields) const {
        if (log_fd_ < 0) return;
        const std::string line = fields + "\n";
        // One write on an O_APPEND descriptor: lines from concurrent calls do not interleave.
        [[maybe_unused]] const auto written = ::write(log_fd_, line.data(), line.size());
    }

    /// A tilestream error is printed for the first few calls, then only logged.
    void report_error(const std::string& text) {
        const int n = errors_printed_.fetch_add(1);
        if (n < 5) stderr_line(text);
        if (n == 4)
            stderr_line(config_.log_path.empty()
                            ? "further errors are not printed (set TILESTREAM_BLAS_LOG to keep them)"
                            : "further errors are only logged in " + config_.log_path);
    }

    std::atomic<long> internal_calls{0};  ///< tilestream's own BLAS calls, forwarded

private:
    settings config_;
    real_blas libraries_;
    int log_fd_ = -1;
    std::atomic<int> errors_printed_{0};
    std::mutex context_mutex_;
    context* context_ = nullptr;
    pid_t context_pid_ = 0;
};

// One GEMM as the caller gave it, decoded into tilestream's terms (`valid` false when an argument
// breaks a BLAS rule: the system BLAS then reports it the way the client expects).
template <class T>
struct gemm_args {
    const char* routine;
    layout order;
    char trans_a, trans_b;  // as written in the log: N or T
    bool valid;
    int m, n, k;
    T alpha;
    const T* a;
    int lda;
    const T* b;
    int ldb;
    T beta;
    T* c;
    int ldc;
};

op op_of(char t) { return t == 'N' ? op::n : op::t; }

// N, T or C in either case; anything else is '?'.
char fortran_trans(const char* t) {
    switch (t ? *t : '?') {
        case 'N': case 'n': return 'N';
        case 'T': case 't': case 'C': case 'c': return 'T';
        default: return '?';
    }
}

char cblas_trans(int t) { return t == 111 ? 'N' : (t == 112 || t == 113) ? 'T' : '?'; }

template <class T>
bool check_args(gemm_args<T>& g) {
    if (g.trans_a == '?' || g.trans_b == '?' || g.m < 0 || g.n < 0 || g.k < 0) return false;
    // The stored shapes of A, B and C, and the rule ld >= max(1, elements per stored line).
    auto line = [&](int rows, int cols) { return std::max(1, g.order == layout::row_major ? cols : rows); };
    const int a_rows = g.trans_a == 'N' ? g.m : g.k, a_cols = g.trans_a == 'N' ? g.k : g.m;
    const int b_rows = g.trans_b == 'N' ? g.k : g.n, b_cols = g.trans_b == 'N' ? g.n : g.k;
    return g.lda >= line(a_rows, a_cols) && g.ldb >= line(b_rows, b_cols) && g.ldc >= line(g.m, g.n);
}

template <class T>
std::string shape_fields(const gemm_args<T>& g) {
    return std::string("routine=") + g.routine + " order=" + (g.order == layout::row_major ? "row" : "col") +
           " transa=" + g.trans_a + " transb=" + g.trans_b + " m=" + std::to_string(g.m) + " n=" +
           std::to_string(g.n) + " k=" + std::to_string(g.k) + " lda=" + std::to_string(g.lda) +
           " ldb=" + std::to_string(g.ldb) + " ldc=" + std::to_string(g.ldc);
}

std::string seconds_field(std::chrono::steady_clock::time_point start) {
    char text[48];
    std::snprintf(text, sizeof text, " seconds=%.6f",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return text;
}

// C's m x n elements, line by line (the padding between lines is not C's and is never touched).
template <class T>
class saved_c {
public:
    bool save(const gemm_args<T>& g) {
        lines_ = g.order == layout::row_major ? g.m : g.n;
        len_ = g.order == layout::row_major ? g.n : g.m;
        data_.reset(new (std::nothrow) T[std::size_t(lines_) * std::size_t(len_)]);
        if (!data_) return false;
        for (long i = 0; i < lines_; ++i) std::memcpy(&data_[i * len_], g.c + i * long(g.ldc), len_ * sizeof(T));
        return true;
    }
    void restore(const gemm_args<T>& g) const {
        for (long i = 0; i < lines_; ++i) std::memcpy(g.c + i * long(g.ldc), &data_[i * len_], len_ * sizeof(T));
    }

private:
    std::unique_ptr<T[]> data_;
    long lines_ = 0, len_ = 0;
};

// Runs the call on tilestream. Throws what tilestream throws; C is then as it was before the call
// (restored from a copy when beta != 0, since a run may have written part of it).
template <class T>
std::string run_on_tilestream(context& ctx, const gemm_args<T>& g) {
    const op op_a = op_of(g.trans_a), op_b = op_of(g.trans_b);
    const host_matrix_view<const T> a(g.a, op_a == op::n ? g.m : g.k, op_a == op::n ? g.k : g.m, g.order, g.lda);
    const host_matrix_view<const T> b(g.b, op_b == op::n ? g.k : g.n, op_b == op::n ? g.n : g.k, g.order, g.ldb);
    const host_matrix_view<T> c(g.c, g.m, g.n, g.order, g.ldc);
    const gemm_plan plan = ctx.plan<T>(op_a, op_b, g.alpha, a, b, g.beta, c);
    saved_c<T> saved;
    if (g.beta != T(0) && !saved.save(g))
        throw out_of_budget("no host memory to keep a copy of C for a fallback to the system BLAS");
    try {
        const gemm_report report = ctx.execute<T>(plan, g.alpha, a, b, g.beta, c);
        std::string fields = " devices=" + ctx.device_names() + " strategy=" + std::string(to_string(plan.strategy));
        for (const auto& w : report.warnings) fields += " warning=\"" + w + "\"";
        return fields;
    } catch (...) {
        if (g.beta != T(0)) saved.restore(g);
        throw;
    }
}

template <class T>
void no_blas_at_all(const gemm_args<T>& g, const std::string& why) {
    stderr_line(std::string(g.routine) + ": " + why + ", and no system BLAS provides " + g.routine +
                " (set TILESTREAM_BLAS_LIB); stopping rather than returning a wrong C");
    std::abort();
}

// The one decision: which library computes this call. `forward` calls the same entry point of a
// real library with the caller's own arguments; `entry` picks that entry from a gemm_entries.
template <class T, class Entry, class Forward>
void route(const void* caller, gemm_args<T> g, Entry entry, Forward forward) {
    front& f = front::instance();
    if (const gemm_entries* lib = f.libraries().internal_target(caller)) {
        const gemm_entries& target = entry(*lib) ? *lib : f.libraries().system();
        if (!entry(target)) no_blas_at_all(g, "a call from inside tilestream or the system BLAS");
        f.internal_calls.fetch_add(1, std::memory_order_relaxed);
        return forward(target);
    }
    const auto start = std::chrono::steady_clock::now();
    g.valid = check_args(g);
    const std::string shape = f.logging() ? shape_fields(g) : std::string();
    const gemm_entries& system = f.libraries().system();
    const bool system_has_it = entry(system) != nullptr;
    const double size = double(g.m) * double(g.n) * double(g.k);
    const char* reason = !g.valid                                               ? "invalid-arguments"
                         : g.m == 0 || g.n == 0 || g.k == 0                     ? "empty"
                         : g.alpha == T(0)                                      ? "alpha-zero"
                         : size < double(f.config().threshold) && system_has_it ? "below-threshold"
                                                                                : nullptr;
    context* ctx = reason ? nullptr : f.shared_context();
    if (!reason && !ctx) reason = "no-context";
    if (reason) {
        if (!system_has_it) no_blas_at_all(g, std::string("this call cannot run on tilestream (") + reason + ")");
        forward(system);
        if (f.logging()) f.log(shape + " ran=system-blas reason=" + reason + seconds_field(start));
        return;
    }
    // No exception may reach the client's C or Fortran frames: every one ends in the system BLAS.
    auto fall_back = [&](std::string what) {
        if (!system_has_it) no_blas_at_all(g, "tilestream failed (" + what + ")");
        f.report_error(std::string(g.routine) + " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                       std::to_string(g.k) + " failed on tilestream (" + what + "); computed by the system BLAS (" +
                       system.path + ") instead");
        forward(system);
        for (char& ch : what)
            if (ch == '"' || ch == '\n') ch = '\'';
        f.log(shape + " ran=system-blas reason=tilestream-error error=\"" + what + "\"" + seconds_field(start));
    };
    const long internal_before = f.internal_calls.load(std::memory_order_relaxed);
    try {
        const std::string fields = run_on_tilestream(*ctx, g);
        if (f.logging())
            f.log(shape + " ran=tilestream" + fields + " internal_calls=" +
                  std::to_string(f.internal_calls.load(std::memory_order_relaxed) - internal_before) +
                  seconds_field(start));
    } catch (const std::exception& e) {
        fall_back(e.what());
    } catch (...) {
        fall_back("an exception that is not a std::exception");
    }
}

// The entry points of one precision: decode, route, and forward with the caller's own arguments to
// the same entry (`entry`) of a real library. The hidden lengths of gfortran's character arguments
// are not read; forwarded calls pass 1 (a C caller may not have passed any).
template <class T, class Fn>
void fortran_gemm(const void* caller, const char* routine, Fn gemm_entries::*entry, const char* transa,
                  const char* transb, const int* m, const int* n, const int* k, const T* alpha, const T* a,
                  const int* lda, const T* b, const int* ldb, const T* beta, T* c, const int* ldc) {
    const gemm_args<T> g{routine, layout::col_major, fortran_trans(transa), fortran_trans(transb), false, *m, *n,
                         *k, *alpha, a, *lda, b, *ldb, *beta, c, *ldc};
    route(caller, g, [entry](const gemm_entries& l) { return l.*entry; },
          [&](const gemm_entries& l) {
              (l.*entry)(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1, 1);
          });
}

template <class T, class Fn>
void cblas_gemm(const void* caller, const char* routine, Fn gemm_entries::*entry, int order, int transa, int transb,
                int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc) {
    const bool known_order = order == 101 || order == 102;  // CblasRowMajor, CblasColMajor
    const gemm_args<T> g{routine, order == 101 ? layout::row_major : layout::col_major,
                         known_order ? cblas_trans(transa) : '?', cblas_trans(transb), false, m, n, k, alpha, a,
                         lda, b, ldb, beta, c, ldc};
    route(caller, g, [entry](const gemm_entries& l) { return l.*entry; },
          [&](const gemm_entries& l) {
              (l.*entry)(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
          });
}

}  // namespace

}  // namespace tilestream::blas

using namespace tilestream::blas;

// Each export reads its own return address: the caller that route() tells apart.
TILESTREAM_BLAS_EXPORT void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                                   const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                                   const float* beta, float* c, const int* ldc, std::size_t, std::size_t) {
    fortran_gemm(__builtin_return_address(0), "sgemm_", &gemm_entries::sgemm, transa, transb, m, n, k, alpha, a, lda,
                 b, ldb, beta, c, ldc);
}

TILESTREAM_BLAS_EXPORT void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                                   const double* alpha, const double* a, const int* lda, const double* b,
                                   const int* ldb, const double* beta, double* c, const int* ldc, std::size_t,
                                   std::size_t) {
    fortran_gemm(__builtin_return_address(0), "dgemm_", &gemm_entries::dgemm, transa, transb, m, n, k, alpha, a, lda,
                 b, ldb, beta, c, ldc);
}

TILESTREAM_BLAS_EXPORT void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha,
                                        const float* a, int lda, const float* b, int ldb, float beta, float* c,
                                        int ldc) {
    cblas_gemm(__builtin_return_address(0), "cblas_sgemm", &gemm_entries::cblas_sgemm, order, transa, transb, m, n,
               k, alpha, a, lda, b, ldb, beta, c, ldc);
}

TILESTREAM_BLAS_EXPORT void cblas_dgemm(int order, int transa, int transb, int m, int n, int k, double alpha,
                                        const double* a, int lda, const double* b, int ldb, double beta, double* c,
                                        int ldc) {
    cblas_gemm(__builtin_return_address(0), "cblas_dgemm", &gemm_entries::cblas_dgemm, order, transa, transb, m, n,
               k, alpha, a, lda, b, ldb, beta, c, ldc);
}
