// libtilestream_blas_context.so: the part of the BLAS drop-in that runs calls on a tilestream::context.
// The drop-in loads it privately on the first call it routes (blas_bridge.hpp says why).
#include "blas_bridge.hpp"

#include <tilestream/context.hpp>
#include <tilestream/types.hpp>

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

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

// C's m x n elements, line by line (the padding between lines is not C's and is never touched).
template <class T>
class saved_c {
public:
    bool save(const tilestream_blas_gemm_call& g) {
        lines_ = g.row_major ? g.m : g.n;
        len_ = g.row_major ? g.n : g.m;
        data_.reset(new (std::nothrow) T[std::size_t(lines_) * std::size_t(len_)]);
        if (!data_) return false;
        const T* c = static_cast<const T*>(g.c);
        for (long i = 0; i < lines_; ++i) std::memcpy(&data_[i * len_], c + i * long(g.ldc), len_ * sizeof(T));
        return true;
    }
    void restore(const tilestream_blas_gemm_call& g) const {
        T* c = static_cast<T*>(g.c);
        for (long i = 0; i < lines_; ++i) std::memcpy(c + i * long(g.ldc), &data_[i * len_], len_ * sizeof(T));
    }

private:
    std::unique_ptr<T[]> data_;
    long lines_ = 0, len_ = 0;
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
    saved_c<T> saved;
    if (beta != T(0) && !saved.save(g))
        throw out_of_budget("no host memory to keep a copy of C for a fallback to the system BLAS");
    try {
        const gemm_report report = ctx.execute<T>(plan, alpha, a, b, beta, c);
        std::string fields = " devices=" + ctx.device_names() + " strategy=" + std::string(to_string(plan.strategy));
        for (const auto& w : report.warnings) fields += " warning=\"" + w + "\"";
        return fields;
    } catch (...) {
        if (beta != T(0)) saved.restore(g);
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
        const std::string fields = call->dtype == 0 ? run_on_tilestream<float>(*ctx, *call)
                                                    : run_on_tilestream<double>(*ctx, *call);
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
                                               &tilestream::blas::open_context, &tilestream::blas::run_gemm};
    return &bridge;
}
