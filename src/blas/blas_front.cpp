// libtilestream_blas.so: the BLAS entry points of blas_routines.hpp for any BLAS client. Large calls
// are handed to the bridge (libtilestream_blas_context.so, loaded privately on the first such call)
// to run on a tilestream::context; small ones, and every call tilestream cannot run, go to the system
// BLAS. This library links neither libtilestream nor any BLAS: preloading it maps nothing else until
// a call needs it, and adds no symbol but the table's to the program's global scope.
#include "blas_bridge.hpp"
#include "blas_routines.hpp"
#include "settings.hpp"
#include "system_blas.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#define TILESTREAM_BLAS_EXPORT extern "C" __attribute__((visibility("default"), noinline))

namespace tilestream::blas {

namespace {

void stderr_line(const std::string& text) {
    const std::string line = "tilestream BLAS: " + text + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
}

// What exit() must wait for. Plain pthread objects and flags: nothing here has a destructor, and
// all of it works before the front exists.
//
// Exit comes in two steps. `stop_routing` is registered with atexit once libtilestream is loaded, so
// it runs before the static objects created since are destroyed: new calls stay with the system BLAS
// and exit waits for the routed calls in flight (their devices and OpenBLAS buffers stay intact).
// `finish` is registered when the drop-in loads, so it runs after every atexit handler and static
// destructor of the program, just before the libraries' finalizers (OpenBLAS frees its buffers and
// joins its threads there): from then on a BLAS call from another thread never returns, since the
// process is ending and no library can be relied on any more. A call that would have been routed
// but finds routing stopped runs on the system BLAS (a program's static destructors may still join
// threads that compute), and `finish` waits for those too: a call still inside OpenBLAS when its
// finalizer joins its threads hangs the exit (seen under ASan, exit() 10 ms into a routed dgemm_).
pthread_mutex_t flight_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t flight_done = PTHREAD_COND_INITIALIZER;
int routed_in_flight = 0;  // routed calls in flight, all threads
bool routing_stopped = false;
thread_local int routed_on_this_thread = 0;  // an exit handler on such a thread must not wait for itself
int exit_forwards = 0;  // calls sent to the system BLAS because routing had stopped, all threads
thread_local int exit_forwards_on_this_thread = 0;
std::atomic<bool> process_finishing{false};
pthread_t finishing_thread;

void stop_routing() {
    pthread_mutex_lock(&flight_mutex);
    routing_stopped = true;
    while (routed_in_flight != routed_on_this_thread) pthread_cond_wait(&flight_done, &flight_mutex);
    pthread_mutex_unlock(&flight_mutex);
}

void finish() {
    stop_routing();
    pthread_mutex_lock(&flight_mutex);
    finishing_thread = pthread_self();
    process_finishing.store(true, std::memory_order_release);
    while (exit_forwards != exit_forwards_on_this_thread) pthread_cond_wait(&flight_done, &flight_mutex);
    pthread_mutex_unlock(&flight_mutex);
}

// This process's id, kept: getpid() is a system call (about 0.1 us on a VM) and every routed call
// asks. A child after fork() starts again from 0 (register_finish's handler).
std::atomic<pid_t> cached_pid{0};
pid_t this_process() {
    pid_t p = cached_pid.load(std::memory_order_relaxed);
    if (p == 0) cached_pid.store(p = ::getpid(), std::memory_order_relaxed);
    return p;
}

__attribute__((constructor)) void register_finish() {
    std::atexit(finish);
    // A child after fork() has only the forking thread: the routed calls of the others are not its.
    pthread_atfork([] { pthread_mutex_lock(&flight_mutex); }, [] { pthread_mutex_unlock(&flight_mutex); },
                   [] {
                       cached_pid.store(0, std::memory_order_relaxed);
                       routed_in_flight = routed_on_this_thread;
                       exit_forwards = exit_forwards_on_this_thread;
                       pthread_mutex_unlock(&flight_mutex);
                   });
}

// Every entry point starts here.
void wait_if_process_finishing() {
    if (!process_finishing.load(std::memory_order_acquire) || pthread_equal(pthread_self(), finishing_thread)) return;
    for (;;) ::pause();
}

// Process-wide state, made on the first call and never destroyed (a client may call BLAS from atexit
// handlers or threads still running at exit).
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
                " system_blas=" + libraries_.system().path + " system_lapack=" +
                (config_.system_lapack.empty() ? std::string(TILESTREAM_SYSTEM_LAPACK_PATH) : config_.system_lapack));
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

    /// Opens the system LAPACK on the first LAPACK call (real_blas::add_lapack); afterwards a no-op.
    void lapack_ready() {
        std::vector<std::string> problems;
        if (libraries_.add_lapack(config_.system_lapack, problems))
            for (const auto& p : problems) stderr_line(p);
    }

    /// True when this process's context is open (opened here on the first call that needs it; in a
    /// child after fork() again, since the parent's worker threads did not come along). When it
    /// cannot be opened, says so once on stderr and in the log.
    bool context_ready() {
        const std::lock_guard lock(context_mutex_);
        const pid_t pid = this_process();
        if (context_pid_ == pid) return context_ok_;
        context_pid_ = pid;
        context_ok_ = false;
        const tilestream_blas_bridge* b = bridge_locked();
        if (!b) return false;
        char* text = nullptr;
        context_ok_ = b->open(config_.devices.c_str(), config_.memory_budget.has_value(),
                              config_.memory_budget.value_or(0), &text) == 0;
        if (!context_ok_) {
            const std::string what = "cannot open TILESTREAM_DEVICES '" + config_.devices +
                                     "': " + (text ? text : "unknown error") + "; every call goes to the system BLAS and LAPACK";
            stderr_line(what);
            log("error=\"" + what + "\"");
        }
        std::free(text);
        return context_ok_;
    }

    const tilestream_blas_bridge* bridge() {
        const std::lock_guard lock(context_mutex_);
        return bridge_locked();
    }

    /// The entry of routine `r` of a real library for a call tilestream does not run: the system
    /// BLAS's, else (it lacks it) the one of the BLAS libtilestream links, loading the bridge.
    void* real_entry(routine r) {
        if (void* e = libraries_.system().entry[int(r)]) return e;
        return bridge() ? libraries_.tilestream().entry[int(r)] : nullptr;
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
    // Loads libtilestream_blas_context.so (beside this library) on first use, privately: its
    // libtilestream and OpenBLAS never join the global scope. Failures are said once.
    const tilestream_blas_bridge* bridge_locked() {
        if (bridge_tried_) return bridge_;
        bridge_tried_ = true;
        std::string path = "libtilestream_blas_context.so";
        Dl_info info{};
        if (dladdr(reinterpret_cast<const void*>(&stderr_line), &info) && info.dli_fname) {
            const std::string self = info.dli_fname;
            const auto slash = self.rfind('/');
            if (slash != std::string::npos) path = self.substr(0, slash + 1) + path;
        }
        void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        const char* why = handle ? nullptr : dlerror();
        using entry_fn = const tilestream_blas_bridge* (*)();
        auto entry = handle ? reinterpret_cast<entry_fn>(dlsym(handle, "tilestream_blas_bridge_entry")) : nullptr;
        const tilestream_blas_bridge* b = entry ? entry() : nullptr;
        if (!b || b->abi != TILESTREAM_BLAS_BRIDGE_ABI) {
            const std::string what = "cannot load " + path + " (" +
                                     (why ? why : b ? "built from another version of tilestream" : "no entry point") +
                                     "); every call goes to the system BLAS and LAPACK";
            stderr_line(what);
            log("error=\"" + what + "\"");
            return nullptr;
        }
        std::vector<std::string> problems;
        libraries_.add_tilestream(b->tilestream_library, problems);
        for (const auto& p : problems) stderr_line(p);
        // Registered now that libtilestream's static objects exist: exit runs handlers in reverse
        // order, so this one waits for routed calls before those objects are destroyed.
        std::atexit(stop_routing);
        bridge_ = b;
        return b;
    }

    settings config_;
    real_blas libraries_;
    int log_fd_ = -1;
    std::atomic<int> errors_printed_{0};
    std::mutex context_mutex_;  // the bridge and the context's opening
    bool bridge_tried_ = false;
    const tilestream_blas_bridge* bridge_ = nullptr;
    bool context_ok_ = false;
    pid_t context_pid_ = 0;
};

// One GEMM as the caller gave it, decoded into tilestream's terms (check_args false when an argument
// breaks a BLAS rule: the system BLAS then reports it through the xerbla_ the program reaches).
template <class T>
struct gemm_args {
    const char* routine;
    bool row_major;
    char trans_a, trans_b;  // as written in the log: N, T or C (conjugate transpose; on real data, T)
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

// The bridge's dtype of T (tilestream_blas_gemm_call::dtype).
template <class T>
constexpr int dtype_code() {
    if constexpr (std::is_same_v<T, float>) return 0;
    if constexpr (std::is_same_v<T, double>) return 1;
    if constexpr (std::is_same_v<T, std::complex<float>>) return 2;
    if constexpr (std::is_same_v<T, std::complex<double>>) return 3;
}

// N, T or C in either case; anything else is '?'.
char fortran_trans(const char* t) {
    switch (t ? *t : '?') {
        case 'N': case 'n': return 'N';
        case 'T': case 't': return 'T';
        case 'C': case 'c': return 'C';
        default: return '?';
    }
}

char cblas_trans(int t) { return t == 111 ? 'N' : t == 112 ? 'T' : t == 113 ? 'C' : '?'; }

template <class T>
bool check_args(const gemm_args<T>& g) {
    if (g.trans_a == '?' || g.trans_b == '?' || g.m < 0 || g.n < 0 || g.k < 0) return false;
    // The stored shapes of A, B and C, and the rule ld >= max(1, elements per stored line).
    auto line = [&](int rows, int cols) { return std::max(1, g.row_major ? cols : rows); };
    const int a_rows = g.trans_a == 'N' ? g.m : g.k, a_cols = g.trans_a == 'N' ? g.k : g.m;
    const int b_rows = g.trans_b == 'N' ? g.k : g.n, b_cols = g.trans_b == 'N' ? g.n : g.k;
    return g.lda >= line(a_rows, a_cols) && g.ldb >= line(b_rows, b_cols) && g.ldc >= line(g.m, g.n);
}

template <class T>
std::string shape_fields(const gemm_args<T>& g) {
    return std::string("routine=") + g.routine + " order=" + (g.row_major ? "row" : "col") +
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

template <class T>
[[noreturn]] void no_blas_at_all(const gemm_args<T>& g, const std::string& why) {
    stderr_line(std::string(g.routine) + ": " + why + ", and no system BLAS provides " + g.routine +
                " (set TILESTREAM_BLAS_LIB); stopping rather than returning a wrong C");
    std::abort();
}

// A call past the threshold, in flight, for exit. `active`: routed (exit waits for it before the
// static objects go); false once exit has stopped routing: the call runs on the system BLAS and
// `finish` waits for it before the libraries' finalizers, and once `finish` has run such a call
// from another thread never starts (as at every entry point).
class routed_call {
public:
    routed_call() {
        pthread_mutex_lock(&flight_mutex);
        active = !routing_stopped;
        if (!active && process_finishing.load(std::memory_order_relaxed) && !pthread_equal(pthread_self(), finishing_thread)) {
            pthread_mutex_unlock(&flight_mutex);
            for (;;) ::pause();
        }
        ++in_flight(), ++on_this_thread();
        pthread_mutex_unlock(&flight_mutex);
    }
    ~routed_call() {
        pthread_mutex_lock(&flight_mutex);
        --in_flight(), --on_this_thread();
        pthread_cond_broadcast(&flight_done);
        pthread_mutex_unlock(&flight_mutex);
    }
    routed_call(const routed_call&) = delete;
    routed_call& operator=(const routed_call&) = delete;
    bool active;

private:
    int& in_flight() const { return active ? routed_in_flight : exit_forwards; }
    int& on_this_thread() const { return active ? routed_on_this_thread : exit_forwards_on_this_thread; }
};

// The one decision: which library computes this call. `forward` calls an entry of a real library
// (the same routine) with the caller's own arguments.
// What route() needs of each kind of call, GEMM's here (the other Level 3 routines' below): its
// size against the threshold, its dimensions for a message, and its run through the bridge.
template <class T>
double call_size(const gemm_args<T>& g) {
    return double(g.m) * double(g.n) * double(g.k);
}
template <class T>
std::string call_dims(const gemm_args<T>& g) {
    return std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k);
}
template <class T>
int run_on_bridge(const tilestream_blas_bridge& bridge, const gemm_args<T>& g, char** text) {
    const tilestream_blas_gemm_call call{dtype_code<T>(),
                                         g.row_major ? 1 : 0,
                                         g.trans_a,
                                         g.trans_b,
                                         g.m,
                                         g.n,
                                         g.k,
                                         &g.alpha,
                                         g.a,
                                         g.lda,
                                         g.b,
                                         g.ldb,
                                         &g.beta,
                                         g.c,
                                         g.ldc,
                                         front::instance().logging() ? 1 : 0};
    return bridge.gemm(&call, text);
}

// `g` by reference: a copy of the freshly built arguments (stored piecewise, reloaded whole) stalls
// store forwarding, which cost about as much as a 2x2 GEMM per call.
template <class Args, class Forward>
void route(const void* caller, routine r, const Args& g, Forward forward) {
    wait_if_process_finishing();
    front& f = front::instance();
    if (const blas_library* lib = f.libraries().internal_target(caller)) {
        void* target = lib->entry[int(r)] ? lib->entry[int(r)] : f.libraries().system().entry[int(r)];
        if (!target) no_blas_at_all(g, "a call from inside tilestream or the system BLAS");
        f.internal_calls.fetch_add(1, std::memory_order_relaxed);
        return forward(target);
    }
    // The clock only for the log: reading it costs as much as a 2x2 GEMM on some VMs.
    const auto start = f.logging() ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    const bool valid = check_args(g);
    const std::string shape = f.logging() ? shape_fields(g) : std::string();
    void* system = f.libraries().system().entry[int(r)];
    // Size alone decides for a valid call: at threshold 0 every one runs on tilestream, the BLAS
    // quick returns (an empty C; alpha == 0 or k == 0, where C = beta C) included.
    const double size = call_size(g);
    const char* const ran_system = is_lapack(r) ? " ran=system-lapack reason=" : " ran=system-blas reason=";
    const char* reason = !valid                                          ? "invalid-arguments"
                         : size < double(f.config().threshold) && system ? "below-threshold"
                                                                         : nullptr;
    auto to_real_blas = [&](const char* why) {
        void* target = system ? system : f.real_entry(r);
        if (!target) no_blas_at_all(g, std::string("this call cannot run on tilestream (") + why + ")");
        forward(target);
        if (f.logging()) f.log(shape + ran_system + why + seconds_field(start));
    };
    if (reason) return to_real_blas(reason);
    const routed_call in_flight;
    if (!in_flight.active) return to_real_blas("exiting");
    if (!f.context_ready()) return to_real_blas("no-context");
    const long internal_before = f.internal_calls.load(std::memory_order_relaxed);
    char* text = nullptr;
    const int failed = run_on_bridge(*f.bridge(), g, &text);
    std::string what = text ? text : "unknown error";
    std::free(text);
    if (!failed) {
        if (f.logging())
            f.log(shape + " ran=tilestream" + what + " internal_calls=" +
                  std::to_string(f.internal_calls.load(std::memory_order_relaxed) - internal_before) +
                  seconds_field(start));
        return;
    }
    // No error may reach the client's C or Fortran frames: every one ends in a real BLAS.
    void* target = f.real_entry(r);
    if (!target) no_blas_at_all(g, "tilestream failed (" + what + ")");
    f.report_error(std::string(g.routine) + " " + call_dims(g) + " failed on tilestream (" + what +
                   "); computed by the system " + (is_lapack(r) ? "LAPACK (" + f.libraries().system().lapack_path
                                                                 : "BLAS (" + f.libraries().system().path) +
                   ") instead");
    forward(target);
    for (char& ch : what)
        if (ch == '"' || ch == '\n') ch = '\'';
    f.log(shape + ran_system + "tilestream-error error=\"" + what + "\"" + seconds_field(start));
}

// The bodies of each family: decode the caller's arguments, route, and forward them unchanged to an
// entry of a real library. The hidden lengths of gfortran's character arguments are not read;
// forwarded calls pass 1 (a C caller may not have passed any).
template <class T>
void fortran_gemm(const void* caller, routine r, TILESTREAM_BLAS_fortran_gemm_PARAMS(T)) {
    (void)transa_len, (void)transb_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_fortran_gemm_PARAMS(T));
    const gemm_args<T> g{routine_names[int(r)], false, fortran_trans(transa), fortran_trans(transb), *m, *n,
                         *k, *alpha, a, *lda, b, *ldb, *beta, c, *ldc};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1, 1);
    });
}

template <class T>
void cblas_gemm(const void* caller, routine r, TILESTREAM_BLAS_cblas_gemm_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_gemm_PARAMS(T));
    const bool known_order = order == 101 || order == 102;  // CblasRowMajor, CblasColMajor
    const gemm_args<T> g{routine_names[int(r)], order == 101, known_order ? cblas_trans(transa) : '?',
                         cblas_trans(transb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_gemm_ARGS);
    });
}

// CBLAS complex: the scalars by address. A null alpha or beta is not a BLAS argument error (the
// reference CBLAS would read through it); it is forwarded without being read, and never routed.
template <class T>
void cblas_complex_gemm(const void* caller, routine r, TILESTREAM_BLAS_cblas_complex_gemm_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_complex_gemm_PARAMS(T));
    const bool known_order = order == 101 || order == 102;  // CblasRowMajor, CblasColMajor
    const bool scalars = alpha != nullptr && beta != nullptr;
    gemm_args<T> g{routine_names[int(r)], order == 101, known_order && scalars ? cblas_trans(transa) : '?',
                   cblas_trans(transb), m, n, k, scalars ? *alpha : T(), a, lda, b, ldb,
                   scalars ? *beta : T(), c, ldc};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_complex_gemm_ARGS);
    });
}


// ---- the rest of Level 3 BLAS: symm, syrk, syr2k, trmm, trsm (the GEMM route's decisions) ----

template <class T>
struct is_complex : std::false_type {};
template <class R>
struct is_complex<std::complex<R>> : std::true_type {};
// One call decoded: BLAS's characters ('?' where the caller's is not one BLAS knows).
template <class T>
struct level3_args {
    const char* routine;  // the symbol, for the log
    const char* kind;     // "symm", "syrk", "syr2k", "trmm", "trsm"
    bool row_major;
    char side, uplo, trans, diag;
    int m, n, k;  // symm, trmm, trsm: C (B) is m x n (k unused); syrk family: C is n x n, op(A) n x k
    T alpha;
    const T* a;
    int lda;
    const T* b;
    int ldb;
    T beta;
    T* c;
    int ldc;
};

char fortran_char(const char* t, const char* allowed) {
    const char ch = t ? char(*t >= 'a' && *t <= 'z' ? *t - 'a' + 'A' : *t) : '?';
    return std::strchr(allowed, ch) && ch ? ch : '?';
}
char cblas_side(int s) { return s == 141 ? 'L' : s == 142 ? 'R' : '?'; }
char cblas_uplo(int u) { return u == 121 ? 'U' : u == 122 ? 'L' : '?'; }
char cblas_diag(int d) { return d == 131 ? 'N' : d == 132 ? 'U' : '?'; }

// The reference BLAS's argument rules (its INFO checks), in the call's storage order.
template <class T>
bool check_args(const level3_args<T>& g) {
    const std::string kind = g.kind;
    const bool rank_k = kind == "syrk" || kind == "syr2k" || kind == "herk" || kind == "her2k";
    const bool tri = kind == "trmm" || kind == "trsm";
    if (g.uplo == '?' || g.m < 0 || g.n < 0 || g.k < 0) return false;
    if (!rank_k && g.side == '?') return false;
    if ((rank_k || tri) && g.trans == '?') return false;
    // Complex SYRK/SYR2K take N or T, HERK/HER2K N or C; real data and TRMM/TRSM any of N, T, C.
    if (rank_k && is_complex<T>::value && g.trans == (kind[1] == 'e' ? 'T' : 'C')) return false;
    if (tri && g.diag == '?') return false;
    auto line = [&](int rows, int cols) { return std::max(1, g.row_major ? cols : rows); };
    if (rank_k) {
        const int a_rows = g.trans == 'N' ? g.n : g.k, a_cols = g.trans == 'N' ? g.k : g.n;
        if (g.lda < line(a_rows, a_cols) || g.ldc < std::max(1, g.n)) return false;
        return kind == "syrk" || kind == "herk" || g.ldb >= line(a_rows, a_cols);
    }
    const int ka = g.side == 'L' ? g.m : g.n;
    if (g.lda < std::max(1, ka) || g.ldb < line(g.m, g.n)) return false;
    return tri || g.ldc >= line(g.m, g.n);
}

template <class T>
std::string shape_fields(const level3_args<T>& g) {
    return std::string("routine=") + g.routine + " order=" + (g.row_major ? "row" : "col") + " side=" + g.side +
           " uplo=" + g.uplo + " trans=" + g.trans + " diag=" + g.diag + " m=" + std::to_string(g.m) +
           " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) + " lda=" + std::to_string(g.lda) +
           " ldb=" + std::to_string(g.ldb) + " ldc=" + std::to_string(g.ldc);
}

template <class T>
[[noreturn]] void no_blas_at_all(const level3_args<T>& g, const std::string& why) {
    stderr_line(std::string(g.routine) + ": " + why + ", and no system BLAS provides " + g.routine +
                " (set TILESTREAM_BLAS_LIB); stopping rather than returning a wrong result");
    std::abort();
}

// route()'s needs (above): the size is m*n*(order of A), or n*n*k for the rank-k updates.
template <class T>
double call_size(const level3_args<T>& g) {
    const std::string kind = g.kind;
    const bool rank_k = kind == "syrk" || kind == "syr2k" || kind == "herk" || kind == "her2k";
    return double(g.m) * double(g.n) * (rank_k ? double(g.k) : double(g.side == 'L' ? g.m : g.n));
}
template <class T>
std::string call_dims(const level3_args<T>& g) {
    return std::to_string(g.m) + "x" + std::to_string(g.n) + (g.k ? "x" + std::to_string(g.k) : std::string());
}
template <class T>
int run_on_bridge(const tilestream_blas_bridge& bridge, const level3_args<T>& g, char** text) {
    const tilestream_blas_level3_call call{dtype_code<T>(), g.row_major ? 1 : 0, g.kind, g.side, g.uplo, g.trans, g.diag,
                                           g.m, g.n, g.k, &g.alpha, g.a, g.lda, g.b, g.ldb, &g.beta, g.c, g.ldc};
    return bridge.level3(&call, text);
}

// CBLAS row-major calls keep their order: the bridge takes row-major operands as they lie.
template <class T>
void fortran_symm_kind(const void* caller, routine r, const char* kind, TILESTREAM_BLAS_fortran_symm_PARAMS(T)) {
    (void)side_len, (void)uplo_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_fortran_symm_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], kind, false, fortran_char(side, "LR"), fortran_char(uplo, "UL"),
                           'N', 'N', *m, *n, 0, *alpha, a, *lda, b, *ldb, *beta, c, *ldc};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc, 1, 1);
    });
}

template <class T>
void fortran_symm(const void* caller, routine r, TILESTREAM_BLAS_fortran_symm_PARAMS(T)) {
    fortran_symm_kind<T>(caller, r, "symm", TILESTREAM_BLAS_fortran_symm_ARGS);
}
template <class T>
void fortran_hemm(const void* caller, routine r, TILESTREAM_BLAS_fortran_hemm_PARAMS(T)) {
    fortran_symm_kind<T>(caller, r, "hemm", TILESTREAM_BLAS_fortran_hemm_ARGS);
}

template <class T>
void fortran_herk(const void* caller, routine r, TILESTREAM_BLAS_fortran_herk_PARAMS(T)) {
    (void)uplo_len, (void)trans_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_fortran_herk_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "herk", false, 'L', fortran_char(uplo, "UL"),
                           fortran_char(trans, "NTC"), 'N', *n, *n, *k, T(*alpha), a, *lda, nullptr, 1,
                           T(*beta), c, *ldc};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(uplo, trans, n, k, alpha, a, lda, beta, c, ldc, 1, 1);
    });
}

template <class T>
void fortran_her2k(const void* caller, routine r, TILESTREAM_BLAS_fortran_her2k_PARAMS(T)) {
    (void)uplo_len, (void)trans_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_fortran_her2k_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "her2k", false, 'L', fortran_char(uplo, "UL"),
                           fortran_char(trans, "NTC"), 'N', *n, *n, *k, *alpha, a, *lda, b, *ldb, T(*beta), c,
                           *ldc};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(uplo, trans, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1, 1);
    });
}

template <class T>
void fortran_syrk(const void* caller, routine r, TILESTREAM_BLAS_fortran_syrk_PARAMS(T)) {
    (void)uplo_len, (void)trans_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_fortran_syrk_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "syrk", false, 'L', fortran_char(uplo, "UL"),
                           fortran_char(trans, "NTC"), 'N', *n, *n, *k, *alpha, a, *lda, nullptr, 1, *beta,
                           c, *ldc};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(uplo, trans, n, k, alpha, a, lda, beta, c, ldc, 1, 1);
    });
}

template <class T>
void fortran_syr2k(const void* caller, routine r, TILESTREAM_BLAS_fortran_syr2k_PARAMS(T)) {
    (void)uplo_len, (void)trans_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_fortran_syr2k_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "syr2k", false, 'L', fortran_char(uplo, "UL"),
                           fortran_char(trans, "NTC"), 'N', *n, *n, *k, *alpha, a, *lda, b, *ldb, *beta, c,
                           *ldc};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(uplo, trans, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1, 1);
    });
}

template <class T>
void fortran_triangular(const void* caller, routine r, const char* kind, TILESTREAM_BLAS_fortran_trmm_PARAMS(T)) {
    (void)side_len, (void)uplo_len, (void)transa_len, (void)diag_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_fortran_trmm_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], kind, false, fortran_char(side, "LR"), fortran_char(uplo, "UL"),
                           fortran_char(transa, "NTC"), fortran_char(diag, "NU"), *m, *n, 0, *alpha, a, *lda,
                           nullptr, *ldb, T(0), b, *ldb};
    route(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb, 1, 1, 1, 1);
    });
}
template <class T>
void fortran_trmm(const void* caller, routine r, TILESTREAM_BLAS_fortran_trmm_PARAMS(T)) {
    fortran_triangular<T>(caller, r, "trmm", TILESTREAM_BLAS_fortran_trmm_ARGS);
}
template <class T>
void fortran_trsm(const void* caller, routine r, TILESTREAM_BLAS_fortran_trsm_PARAMS(T)) {
    fortran_triangular<T>(caller, r, "trsm", TILESTREAM_BLAS_fortran_trsm_ARGS);
}

bool cblas_order_known(int order) { return order == 101 || order == 102; }

template <class T>
void cblas_symm(const void* caller, routine r, TILESTREAM_BLAS_cblas_symm_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_symm_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "symm", order == 101,
                           cblas_order_known(order) ? cblas_side(side) : '?', cblas_uplo(uplo), 'N', 'N', m, n,
                           0, alpha, a, lda, b, ldb, beta, c, ldc};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_symm_ARGS); });
}

template <class T>
void cblas_syrk(const void* caller, routine r, TILESTREAM_BLAS_cblas_syrk_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_syrk_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "syrk", order == 101, 'L',
                           cblas_order_known(order) ? cblas_uplo(uplo) : '?', cblas_trans(trans), 'N', n, n, k,
                           alpha, a, lda, nullptr, 1, beta, c, ldc};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_syrk_ARGS); });
}

template <class T>
void cblas_syr2k(const void* caller, routine r, TILESTREAM_BLAS_cblas_syr2k_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_syr2k_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "syr2k", order == 101, 'L',
                           cblas_order_known(order) ? cblas_uplo(uplo) : '?', cblas_trans(trans), 'N', n, n, k,
                           alpha, a, lda, b, ldb, beta, c, ldc};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_syr2k_ARGS); });
}

template <class T>
void cblas_triangular(const void* caller, routine r, const char* kind, TILESTREAM_BLAS_cblas_trmm_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_trmm_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], kind, order == 101,
                           cblas_order_known(order) ? cblas_side(side) : '?', cblas_uplo(uplo), cblas_trans(transa),
                           cblas_diag(diag), m, n, 0, alpha, a, lda, nullptr, ldb, T(0), b, ldb};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_trmm_ARGS); });
}
template <class T>
void cblas_trmm(const void* caller, routine r, TILESTREAM_BLAS_cblas_trmm_PARAMS(T)) {
    cblas_triangular<T>(caller, r, "trmm", TILESTREAM_BLAS_cblas_trmm_ARGS);
}
template <class T>
void cblas_trsm(const void* caller, routine r, TILESTREAM_BLAS_cblas_trsm_PARAMS(T)) {
    cblas_triangular<T>(caller, r, "trsm", TILESTREAM_BLAS_cblas_trsm_ARGS);
}

// CBLAS's complex forms: scalars by address (HERK's alpha and beta, HER2K's beta real, by value). A null
// scalar is forwarded unread and never routed (as complex GEMM's).
template <class T>
T value_at(const void* p) {
    return p ? *static_cast<const T*>(p) : T();
}

template <class T>
void cblas_symm_kind(const void* caller, routine r, const char* kind, TILESTREAM_BLAS_cblas_symm_cx_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_symm_cx_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], kind, order == 101, cblas_order_known(order) ? cblas_side(side) : '?',
                           alpha && beta ? cblas_uplo(uplo) : '?', 'N', 'N', m, n, 0, value_at<T>(alpha), static_cast<const T*>(a),
                           lda, static_cast<const T*>(b), ldb, value_at<T>(beta), static_cast<T*>(c), ldc};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_symm_ARGS); });
}
template <class T>
void cblas_symm_cx(const void* caller, routine r, TILESTREAM_BLAS_cblas_symm_cx_PARAMS(T)) {
    cblas_symm_kind<T>(caller, r, "symm", TILESTREAM_BLAS_cblas_symm_ARGS);
}
template <class T>
void cblas_hemm_cx(const void* caller, routine r, TILESTREAM_BLAS_cblas_hemm_cx_PARAMS(T)) {
    cblas_symm_kind<T>(caller, r, "hemm", TILESTREAM_BLAS_cblas_symm_ARGS);
}

template <class T>
void cblas_syrk_cx(const void* caller, routine r, TILESTREAM_BLAS_cblas_syrk_cx_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_syrk_cx_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "syrk", order == 101, 'L',
                           cblas_order_known(order) && alpha && beta ? cblas_uplo(uplo) : '?', cblas_trans(trans), 'N', n, n, k,
                           value_at<T>(alpha), static_cast<const T*>(a), lda, nullptr, 1, value_at<T>(beta),
                           static_cast<T*>(c), ldc};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_syrk_ARGS); });
}

template <class T>
void cblas_herk_cx(const void* caller, routine r, TILESTREAM_BLAS_cblas_herk_cx_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_herk_cx_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "herk", order == 101, 'L',
                           cblas_order_known(order) ? cblas_uplo(uplo) : '?', cblas_trans(trans), 'N', n, n, k,
                           T(alpha), static_cast<const T*>(a), lda, nullptr, 1, T(beta), static_cast<T*>(c), ldc};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_syrk_ARGS); });
}

template <class T>
void cblas_syr2k_cx(const void* caller, routine r, TILESTREAM_BLAS_cblas_syr2k_cx_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_syr2k_cx_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "syr2k", order == 101, 'L',
                           cblas_order_known(order) && alpha && beta ? cblas_uplo(uplo) : '?', cblas_trans(trans), 'N', n, n, k,
                           value_at<T>(alpha), static_cast<const T*>(a), lda, static_cast<const T*>(b), ldb,
                           value_at<T>(beta), static_cast<T*>(c), ldc};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_syr2k_ARGS); });
}

template <class T>
void cblas_her2k_cx(const void* caller, routine r, TILESTREAM_BLAS_cblas_her2k_cx_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_her2k_cx_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], "her2k", order == 101, 'L',
                           cblas_order_known(order) && alpha ? cblas_uplo(uplo) : '?', cblas_trans(trans), 'N', n, n, k,
                           value_at<T>(alpha), static_cast<const T*>(a), lda, static_cast<const T*>(b), ldb, T(beta),
                           static_cast<T*>(c), ldc};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_syr2k_ARGS); });
}

template <class T>
void cblas_triangular_cx(const void* caller, routine r, const char* kind, TILESTREAM_BLAS_cblas_trmm_cx_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_cblas_trmm_cx_PARAMS(T));
    const level3_args<T> g{routine_names[int(r)], kind, order == 101, cblas_order_known(order) ? cblas_side(side) : '?',
                           alpha ? cblas_uplo(uplo) : '?', cblas_trans(transa), cblas_diag(diag), m, n, 0, value_at<T>(alpha),
                           static_cast<const T*>(a), lda, nullptr, ldb, T(0), static_cast<T*>(b), ldb};
    route(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_cblas_trmm_ARGS); });
}
template <class T>
void cblas_trmm_cx(const void* caller, routine r, TILESTREAM_BLAS_cblas_trmm_cx_PARAMS(T)) {
    cblas_triangular_cx<T>(caller, r, "trmm", TILESTREAM_BLAS_cblas_trmm_ARGS);
}
template <class T>
void cblas_trsm_cx(const void* caller, routine r, TILESTREAM_BLAS_cblas_trsm_cx_PARAMS(T)) {
    cblas_triangular_cx<T>(caller, r, "trsm", TILESTREAM_BLAS_cblas_trmm_ARGS);
}

// ---- LAPACK: ?potrf ?potrs ?posv ?getrf ?getrs ?gesv (Fortran) ----

// One LAPACK call decoded. first_illegal() is the number of the first argument LAPACK rejects, in
// its order (0: none); such a call goes to the system LAPACK, which reports it to the xerbla_ the
// program reaches and returns info = -illegal.
template <class T>
struct lapack_args {
    const char* routine;  // the symbol, for the log
    const char* kind;     // "potrf", "potrs", "posv", "getrf", "getrs", "gesv"
    char uplo, trans;     // '?' where the caller's is not one LAPACK knows; '-' where unused
    int m, n, nrhs;       // A is m x n (getrf) or n x n; B n x nrhs
    T* a;
    int lda;
    int* ipiv;
    T* b;
    int ldb;
    int* info;
};

// LAPACK 3.11's checks, in its order (the first failing argument is reported).
template <class T>
int first_illegal(const lapack_args<T>& g) {
    const std::string kind = g.kind;
    const int n1 = std::max(1, g.n);
    if (kind == "potrf") return g.uplo == '?' ? 1 : g.n < 0 ? 2 : g.lda < n1 ? 4 : 0;
    if (kind == "potrs" || kind == "posv")
        return g.uplo == '?' ? 1 : g.n < 0 ? 2 : g.nrhs < 0 ? 3 : g.lda < n1 ? 5 : g.ldb < n1 ? 7 : 0;
    if (kind == "getrf") return g.m < 0 ? 1 : g.n < 0 ? 2 : g.lda < std::max(1, g.m) ? 4 : 0;
    if (kind == "getrs")
        return g.trans == '?' ? 1 : g.n < 0 ? 2 : g.nrhs < 0 ? 3 : g.lda < n1 ? 5 : g.ldb < n1 ? 8 : 0;
    return g.n < 0 ? 1 : g.nrhs < 0 ? 2 : g.lda < n1 ? 4 : g.ldb < n1 ? 7 : 0;  // gesv
}

template <class T>
bool check_args(const lapack_args<T>& g) {
    return first_illegal(g) == 0;
}

template <class T>
std::string shape_fields(const lapack_args<T>& g) {
    std::string s = std::string("routine=") + g.routine + " order=col uplo=" + g.uplo + " trans=" + g.trans +
                    " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " nrhs=" + std::to_string(g.nrhs) +
                    " lda=" + std::to_string(g.lda) + " ldb=" + std::to_string(g.ldb);
    if (const int illegal = first_illegal(g)) s += " illegal=" + std::to_string(illegal);
    return s;
}

template <class T>
[[noreturn]] void no_blas_at_all(const lapack_args<T>& g, const std::string& why) {
    stderr_line(std::string(g.routine) + ": " + why + ", and no system LAPACK provides " + g.routine +
                " (set TILESTREAM_LAPACK_LIB); stopping rather than returning a wrong result");
    std::abort();
}

// route()'s needs: the size is the call's flop count (real flops; Level 3's m*n*(order of A) is
// TRSM's): potrf n^3/3, getrf m n k - (m + n) k^2 / 2 + k^3 / 3 multiply-adds (k = min(m, n); 2/3 n^3
// flops when square), a solve two triangular solves of n^2 nrhs each; posv and gesv both.
template <class T>
double call_size(const lapack_args<T>& g) {
    const std::string kind = g.kind;
    const double m = g.m, n = g.n, k = std::min(m, n), nrhs = g.nrhs;
    const double potrf = n * n * n / 3, getrf = 2 * (m * n * k - (m + n) * k * k / 2 + k * k * k / 3),
                 solve = 2 * n * n * nrhs;
    if (kind == "potrf") return potrf;
    if (kind == "getrf") return getrf;
    if (kind == "potrs" || kind == "getrs") return solve;
    return (kind == "posv" ? potrf : getrf) + solve;
}
template <class T>
std::string call_dims(const lapack_args<T>& g) {
    const std::string kind = g.kind;
    if (kind == "getrf") return std::to_string(g.m) + "x" + std::to_string(g.n);
    if (kind == "potrf") return std::to_string(g.n) + "x" + std::to_string(g.n);
    return std::to_string(g.n) + "x" + std::to_string(g.n) + ", " + std::to_string(g.nrhs) + " right-hand sides";
}
template <class T>
int run_on_bridge(const tilestream_blas_bridge& bridge, const lapack_args<T>& g, char** text) {
    const tilestream_blas_lapack_call call{dtype_code<T>(), g.kind, g.uplo,  g.trans, g.m,   g.n,    g.nrhs,
                                           g.a,             g.lda,  g.ipiv, g.b,     g.ldb, g.info};
    return bridge.lapack(&call, text);
}

// route(), then LAPACK's info for an illegal argument: the system LAPACK reported it to xerbla_, but
// not every one sets info (OpenBLAS 0.3.21's ?getrs_ leaves it unwritten); LAPACK's is -number.
template <class T, class Forward>
void route_lapack(const void* caller, routine r, const lapack_args<T>& g, Forward forward) {
    const int illegal = first_illegal(g);
    route(caller, r, g, forward);
    if (illegal) *g.info = -illegal;
}

// Each body opens the system LAPACK first (once), then routes. Forwarded calls pass 1 as the hidden
// length (numpy's C callers pass none).
template <class T>
void lapack_potrf(const void* caller, routine r, TILESTREAM_BLAS_lapack_potrf_PARAMS(T)) {
    (void)uplo_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_lapack_potrf_PARAMS(T));
    front::instance().lapack_ready();
    const lapack_args<T> g{routine_names[int(r)], "potrf", fortran_char(uplo, "UL"), '-', *n, *n, 0,
                           a, *lda, nullptr, nullptr, 1, info};
    route_lapack(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(uplo, n, a, lda, info, 1); });
}

template <class T>
void lapack_potrs(const void* caller, routine r, TILESTREAM_BLAS_lapack_potrs_PARAMS(T)) {
    (void)uplo_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_lapack_potrs_PARAMS(T));
    front::instance().lapack_ready();
    const lapack_args<T> g{routine_names[int(r)], "potrs", fortran_char(uplo, "UL"), '-', *n, *n, *nrhs,
                           const_cast<T*>(a), *lda, nullptr, b, *ldb, info};
    route_lapack(caller, r, g,
          [&](void* entry) { reinterpret_cast<entry_fn>(entry)(uplo, n, nrhs, a, lda, b, ldb, info, 1); });
}

template <class T>
void lapack_posv(const void* caller, routine r, TILESTREAM_BLAS_lapack_posv_PARAMS(T)) {
    (void)uplo_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_lapack_posv_PARAMS(T));
    front::instance().lapack_ready();
    const lapack_args<T> g{routine_names[int(r)], "posv", fortran_char(uplo, "UL"), '-', *n, *n, *nrhs,
                           a, *lda, nullptr, b, *ldb, info};
    route_lapack(caller, r, g,
          [&](void* entry) { reinterpret_cast<entry_fn>(entry)(uplo, n, nrhs, a, lda, b, ldb, info, 1); });
}

template <class T>
void lapack_getrf(const void* caller, routine r, TILESTREAM_BLAS_lapack_getrf_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_lapack_getrf_PARAMS(T));
    front::instance().lapack_ready();
    const lapack_args<T> g{routine_names[int(r)], "getrf", '-', '-', *m, *n, 0,
                           a, *lda, ipiv, nullptr, 1, info};
    route_lapack(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_lapack_getrf_ARGS); });
}

template <class T>
void lapack_getrs(const void* caller, routine r, TILESTREAM_BLAS_lapack_getrs_PARAMS(T)) {
    (void)trans_len;
    using entry_fn = void (*)(TILESTREAM_BLAS_lapack_getrs_PARAMS(T));
    front::instance().lapack_ready();
    const lapack_args<T> g{routine_names[int(r)], "getrs", '-', fortran_char(trans, "NTC"), *n, *n, *nrhs,
                           const_cast<T*>(a), *lda, const_cast<int*>(ipiv), b, *ldb, info};
    route_lapack(caller, r, g, [&](void* entry) {
        reinterpret_cast<entry_fn>(entry)(trans, n, nrhs, a, lda, ipiv, b, ldb, info, 1);
    });
}

template <class T>
void lapack_gesv(const void* caller, routine r, TILESTREAM_BLAS_lapack_gesv_PARAMS(T)) {
    using entry_fn = void (*)(TILESTREAM_BLAS_lapack_gesv_PARAMS(T));
    front::instance().lapack_ready();
    const lapack_args<T> g{routine_names[int(r)], "gesv", '-', '-', *n, *n, *nrhs,
                           a, *lda, ipiv, b, *ldb, info};
    route_lapack(caller, r, g, [&](void* entry) { reinterpret_cast<entry_fn>(entry)(TILESTREAM_BLAS_lapack_gesv_ARGS); });
}

}  // namespace

}  // namespace tilestream::blas

using namespace tilestream::blas;

// One exported function per row of blas_routines.hpp. Each reads its own return address: the caller
// that route() tells apart.
#define TILESTREAM_BLAS_DEFINE(name, family, T)                                                         \
    TILESTREAM_BLAS_EXPORT void name(TILESTREAM_BLAS_##family##_PARAMS(T)) {                             \
        family<T>(__builtin_return_address(0), routine::name, TILESTREAM_BLAS_##family##_ARGS);          \
    }
TILESTREAM_BLAS_ROUTINES(TILESTREAM_BLAS_DEFINE)
#undef TILESTREAM_BLAS_DEFINE
