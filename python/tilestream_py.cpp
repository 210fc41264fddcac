// The Python module's native part (tilestream._tilestream): a thin front over tilestream::context.
// It turns numpy arrays into host views (never copying them), starts each run on a worker thread
// and hands back a handle the Python layer waits on with the GIL released; tilestream's exceptions
// become ValueError, MemoryError, OSError or RuntimeError carrying the library's message.
#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>
#include <tilestream/dtype_traits.hpp>
#include <tilestream/jacobi.hpp>

#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

// numpy's own C API for the direct call's few hundred nanoseconds (pybind11's array wrappers cost
// microseconds); the table is imported in the module's init.
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tilestream_numpy_api
#include <numpy/arrayobject.h>

#include "result_memory.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <complex>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace py = pybind11;
namespace ts = tilestream;

namespace {

/// Runs whose options have a cancel flag (gemm_run_options::cancel, jacobi_options::cancel) stop
/// when it is raised; where this build's options have none, a cancelled run finishes first.
template <class Options>
constexpr bool has_cancel_flag = requires(Options o, const std::atomic<bool>* f) { o.cancel = f; };

template <class Options>
void set_cancel_flag(Options& o, const std::atomic<bool>* flag) {
    if constexpr (has_cancel_flag<Options>) o.cancel = flag;
}

/// Where a 2-D array's elements lie as a BLAS operand: one axis of unit stride, the other's
/// stride at least its length (so rows or columns never overlap), aligned to the element size.
/// Empty when they do not (the Python layer then copies an input, or refuses an output).
std::optional<std::pair<ts::layout, ts::index_t>> blas_layout(const py::array& x) {
    if (x.ndim() != 2) return std::nullopt;
    const auto size = static_cast<py::ssize_t>(x.itemsize());
    const py::ssize_t rows = x.shape(0), cols = x.shape(1);
    if (rows == 0 || cols == 0) return std::pair{ts::layout::row_major, ts::index_t(std::max<py::ssize_t>(cols, 1))};
    if (reinterpret_cast<std::uintptr_t>(x.data()) % std::uintptr_t(size) != 0) return std::nullopt;
    const py::ssize_t s0 = x.strides(0), s1 = x.strides(1);
    if (s0 % size != 0 || s1 % size != 0) return std::nullopt;
    const py::ssize_t e0 = s0 / size, e1 = s1 / size;
    // A single row or column has no stride to speak of on its length-1 axis.
    if ((cols == 1 || e1 == 1) && (rows == 1 || e0 >= cols))
        return std::pair{ts::layout::row_major, ts::index_t(rows == 1 ? cols : e0)};
    if ((rows == 1 || e0 == 1) && (cols == 1 || e1 >= rows))
        return std::pair{ts::layout::col_major, ts::index_t(cols == 1 ? rows : e1)};
    return std::nullopt;
}

template <class T>
ts::host_matrix_view<T> view_of(const py::array& x, const char* name) {
    if (!x.dtype().is(py::dtype::of<std::remove_const_t<T>>()))
        throw ts::invalid_argument(std::string("internal: ") + name + " does not have the run's dtype");
    const auto where = blas_layout(x);
    if (!where) throw ts::invalid_argument(std::string("internal: ") + name + " is not a BLAS operand");
    T* data = static_cast<T*>(const_cast<void*>(x.data()));
    return ts::host_matrix_view<T>(data, x.shape(0), x.shape(1), where->first, where->second);
}

/// The runs in flight in this process. os.fork() waits for them (the Python layer registers
/// fork_prepare / fork_after with os.register_at_fork): a child must not get a copy of a context in
/// the middle of a run, its locks held by a thread the child does not have. The forking thread holds
/// the GIL while it waits, so no new run starts; the runs themselves never need the GIL.
struct runs_in_flight {
    std::mutex mutex;
    std::condition_variable none;
    int count = 0;

    static runs_in_flight& instance() {
        static auto* r = new runs_in_flight();  // never destroyed: worker threads may outlive exit
        return *r;
    }
    void started() {
        const std::lock_guard lock(mutex);
        ++count;
    }
    void ended() {
        {
            const std::lock_guard lock(mutex);
            --count;
        }
        none.notify_all();
    }
    /// Before fork(): waits until no run is in flight and keeps the lock, so that none starts.
    void fork_prepare() {
        std::unique_lock lock(mutex);
        none.wait(lock, [this] { return count == 0; });
        lock.release();
    }
    /// After fork(), in the parent and in the child.
    void fork_after() { mutex.unlock(); }
};

/// Work done with the GIL released outside a run (opening devices) counts as a run in flight. Made
/// after releasing the GIL, so that it ends before the GIL is taken again.
struct in_flight {
    in_flight() { runs_in_flight::instance().started(); }
    ~in_flight() { runs_in_flight::instance().ended(); }
    in_flight(const in_flight&) = delete;
    in_flight& operator=(const in_flight&) = delete;
};

/// One GEMM or Jacobi solve on a worker thread. The Python layer polls wait() (the GIL released
/// inside), reads progress() between waits, calls cancel() on KeyboardInterrupt and collects
/// result() (which rethrows the run's error). The handle keeps the context and the arrays alive;
/// dropping it cancels and joins the run.
class background_run {
public:
    using body_fn = std::function<void(background_run&)>;

    /// `output` is what the run writes (returned by output()); `keep_alive` what it reads. The body
    /// runs without the GIL: it must hold no Python object.
    background_run(py::object output, std::vector<py::object> keep_alive, body_fn body, bool on_this_thread = false)
        : output_(std::move(output)), keep_alive_(std::move(keep_alive)) {
        if (on_this_thread) {
            // A run too short to hand to a worker (the direct path): done here, the GIL released
            // only when it lasts longer than releasing it costs.
            try {
                body(*this);
            } catch (...) {
                error_ = std::current_exception();
            }
            finished_ = true;
            return;
        }
        runs_in_flight::instance().started();
        try {
            worker_ = std::thread([this, body = std::move(body)] {
                try {
                    body(*this);
                } catch (...) {
                    error_ = std::current_exception();
                }
                {
                    const std::lock_guard lock(mutex_);
                    finished_ = true;
                }
                finished_cv_.notify_all();
                runs_in_flight::instance().ended();
            });
        } catch (...) {
            runs_in_flight::instance().ended();
            throw;
        }
    }
    background_run(const background_run&) = delete;
    background_run& operator=(const background_run&) = delete;
    ~background_run() {
        cancel_.store(true);
        join();
    }

    /// Waits up to `seconds` for the run to end; true when it has.
    bool wait(double seconds) {
        py::gil_scoped_release release;
        std::unique_lock lock(mutex_);
        return finished_cv_.wait_for(lock, std::chrono::duration<double>(std::max(seconds, 0.0)),
                                     [this] { return finished_; });
    }
    /// (done, total) units or iterations; done never exceeds a known total.
    std::pair<std::size_t, std::size_t> progress() const {
        const std::size_t total = total_.load(), done = done_.load();
        return {total ? std::min(done, total) : done, total};
    }
    void cancel() { cancel_.store(true); }
    py::object output() const { return output_; }
    bool cancel_requested() const { return cancel_.load(); }

    /// Joins the run and returns what it made, or rethrows its error.
    py::object result() {
        {
            py::gil_scoped_release release;
            join();
        }
        if (error_) std::rethrow_exception(error_);
        return finish_ ? finish_() : py::none();
    }

    // For the bodies.
    const std::atomic<bool>* cancel_flag() const { return &cancel_; }
    void set_total(std::size_t n) { total_.store(n); }
    void set_done(std::size_t n) { done_.store(n); }
    void add_done() { done_.fetch_add(1); }
    /// What result() returns, built with the GIL held once the run has ended.
    void set_finish(std::function<py::object()> f) { finish_ = std::move(f); }

private:
    void join() {
        if (worker_.joinable()) worker_.join();
    }

    py::object output_;
    std::vector<py::object> keep_alive_;
    std::atomic<bool> cancel_{false};
    std::atomic<std::size_t> done_{0}, total_{0};
    std::mutex mutex_;
    std::condition_variable finished_cv_;
    bool finished_ = false;
    std::exception_ptr error_;
    std::function<py::object()> finish_;
    std::thread worker_;  // last: starts after every member above is built
};

py::dict plan_dict(ts::context& ctx, const ts::gemm_plan& p) {
    py::dict d;
    d["text"] = ctx.explain(p);
    d["strategy"] = std::string(ts::to_string(p.strategy));
    d["engine"] = std::string(ts::to_string(p.engine));
    d["kernel"] = std::string(ts::to_string(p.kernel));
    d["tile"] = py::make_tuple(p.tile_m, p.tile_n, p.tile_k);
    d["tiles"] = py::make_tuple(p.tiles_m, p.tiles_n, p.tiles_k);
    d["units"] = p.units;
    d["steps"] = p.steps;
    d["batch"] = p.batch;
    d["devices"] = p.devices;
    d["bytes_h2d"] = p.bytes_h2d;
    d["bytes_d2h"] = p.bytes_d2h;
    d["bytes_packed"] = p.bytes_packed;
    d["peak_device_bytes"] = p.peak_device_bytes;
    d["budget"] = p.budget;
    d["predicted_seconds"] = p.predicted_seconds;
    d["bound"] = p.bound;
    d["rates_measured"] = p.rates.measured;
    return d;
}

py::dict report_dict(ts::context& ctx, const ts::gemm_report& r) {
    py::dict d = plan_dict(ctx, r.plan);
    d["seconds"] = r.seconds;
    d["measured_bytes_h2d"] = r.bytes_h2d;
    d["measured_bytes_d2h"] = r.bytes_d2h;
    d["measured_bytes_packed"] = r.bytes_packed;
    d["measured_peak_device_bytes"] = r.peak_device_bytes;
    d["cache_hits"] = r.cache_hits;
    d["cache_misses"] = r.cache_misses;
    d["kept_hits"] = r.kept_hits;
    d["kept_bytes_saved"] = r.kept_bytes_saved;
    d["peer_hits"] = r.peer_hits;
    d["bytes_from_peers"] = r.bytes_from_peers;
    py::list shares;
    for (const auto& s : r.devices) {
        py::dict sd;
        sd["id"] = s.id;
        sd["units"] = s.units;
        sd["flops"] = s.flops;
        sd["bytes_h2d"] = s.bytes_h2d;
        sd["kept_hits"] = s.kept_hits;
        shares.append(sd);
    }
    d["device_shares"] = shares;
    d["warnings"] = r.warnings;
    return d;
}

/// A kept operand (context::keep) and the array it promises about, alive while the handle is.
struct kept_array {
    ts::kept_operand handle;
    py::object array;
};

struct gemm_args {
    std::complex<double> alpha = 1, beta = 0;  // real for real runs (the Python layer checks)
    std::string strategy = "auto";
    ts::index_t tile_m = 0, tile_n = 0, tile_k = 0;
    std::optional<std::string> kernel;
    bool plan_only = false;
};

/// alpha or beta in the run's type; a finite value (or part) beyond its range is an error, not an
/// infinity, and an imaginary part for a real run is an error, not dropped.
template <class T>
T scalar_of(std::complex<double> x, const char* name) {
    using part = ts::real_type_t<T>;
    for (const double v : {x.real(), x.imag()})
        if (std::isfinite(v) && std::abs(v) > double(std::numeric_limits<part>::max())) {
            char text[96];
            std::snprintf(text, sizeof text, " has a part %.6g beyond the range of the result type (largest %.6g)",
                          v, double(std::numeric_limits<part>::max()));
            throw ts::invalid_argument(std::string("matmul: ") + name + text);
        }
    if constexpr (ts::is_complex_v<T>) {
        return T(part(x.real()), part(x.imag()));
    } else {
        if (x.imag() != 0)
            throw ts::invalid_argument(std::string("matmul: ") + name + " is complex and the result is real");
        return T(x.real());
    }
}

template <class T>
std::unique_ptr<background_run> start_gemm(py::object ctx_obj, ts::context& ctx, py::array a, py::array b,
                                           py::array c, const gemm_args& g) {
    // Views and options are made here, with the GIL, so a bad argument raises at once.
    const auto av = view_of<const T>(a, "a");
    const auto bv = view_of<const T>(b, "b");
    const auto cv = view_of<T>(c, "out");
    if (!g.plan_only && !c.writeable()) throw ts::invalid_argument("output array is read-only");
    ts::gemm_call_options call;
    call.strategy = ts::parse_gemm_strategy(g.strategy);
    call.tile_m = g.tile_m;
    call.tile_n = g.tile_n;
    call.tile_k = g.tile_k;
    if (g.kernel) call.kernel = ts::parse_kernel_setting(*g.kernel);
    // A transposed numpy view is a column-major view of its base (the same as op = t on the base),
    // so every operand goes in as it lies with op = n.
    const ts::op oa = ts::op::n, ob = ts::op::n;
    const T alpha = scalar_of<T>(g.alpha, "alpha"), beta = scalar_of<T>(g.beta, "beta");
    const bool plan_only = g.plan_only;
    ts::context* ctxp = &ctx;
    // Planned here (kept plans make this a lookup; a first call may measure rates, without the GIL).
    // A direct plan runs on this thread: no worker, no polling; the others on a worker that Python
    // waits on, Ctrl-C and progress between waits.
    std::optional<ts::gemm_plan> planned;
    {
        // Planned as the run will watch it (its cancel flag and progress, set below): in steps of
        // ~step_seconds past the bound, so that Ctrl-C and progress come within a step.
        call.run.on_step_done = [](std::size_t) {};
        py::gil_scoped_release release;
        const in_flight counted;
        planned = ctxp->plan<T>(oa, ob, alpha, av, bv, beta, cv, call);
    }
    const bool here = planned->strategy == ts::gemm_strategy::direct;
    return std::make_unique<background_run>(
        c, std::vector<py::object>{std::move(ctx_obj), std::move(a), std::move(b)},
        [=, plan = std::move(*planned)](background_run& run) mutable {
            run.set_total(plan.steps);
            if (plan_only) {
                run.set_finish([ctxp, plan] { return py::object(plan_dict(*ctxp, plan)); });
                return;
            }
            call.run.on_step_done = [&run](std::size_t) { run.add_done(); };
            set_cancel_flag(call.run, run.cancel_flag());
            std::optional<ts::gemm_report> report;
            if (here && plan.predicted_seconds < 20e-6) {
                report = ctxp->execute<T>(plan, alpha, av, bv, beta, cv, call);
            } else if (here) {
                py::gil_scoped_release release;
                const in_flight counted;
                report = ctxp->execute<T>(plan, alpha, av, bv, beta, cv, call);
            } else {
                report = ctxp->execute<T>(plan, alpha, av, bv, beta, cv, call);  // on the worker, no GIL
            }
            run.set_finish([ctxp, report = std::move(*report)] { return py::object(report_dict(*ctxp, report)); });
        },
        here || plan_only);
}

/// A stack of matrices (the last two axes) as the library's batch view: one stride between
/// consecutive matrices when the leading axes allow (0 for a broadcast one), else a pointer per
/// matrix (kept in `pointers`, which must live as long as the view is used).
template <class T>
struct stack_operand {
    ts::host_batch_view<T> view;
    std::vector<T*> pointers;
};
template <class T>
stack_operand<T> stack_of(const py::array& x, const char* name) {
    if (!x.dtype().is(py::dtype::of<std::remove_const_t<T>>()))
        throw ts::invalid_argument(std::string("internal: ") + name + " does not have the run's dtype");
    const int nd = int(x.ndim());
    if (nd < 2) throw ts::invalid_argument(std::string("internal: ") + name + " is not a stack of matrices");
    const auto size = static_cast<py::ssize_t>(x.itemsize());
    const py::ssize_t rows = x.shape(nd - 2), cols = x.shape(nd - 1), s0 = x.strides(nd - 2), s1 = x.strides(nd - 1);
    ts::index_t count = 1;
    for (int d = 0; d < nd - 2; ++d) count *= ts::index_t(x.shape(d));
    std::optional<std::pair<ts::layout, ts::index_t>> where;
    if (rows == 0 || cols == 0 || count == 0) {  // no element: numpy's strides may be anything (0)
        where = std::pair{ts::layout::row_major, ts::index_t(std::max<py::ssize_t>(cols, 1))};
    } else if (s0 % size == 0 && s1 % size == 0) {
        const py::ssize_t e0 = s0 / size, e1 = s1 / size;
        if ((cols == 1 || e1 == 1) && (rows == 1 || e0 >= cols))
            where = std::pair{ts::layout::row_major, ts::index_t(rows == 1 ? cols : e0)};
        else if ((rows == 1 || e0 == 1) && (cols == 1 || e1 >= rows))
            where = std::pair{ts::layout::col_major, ts::index_t(cols == 1 ? rows : e1)};
    }
    if (!where || reinterpret_cast<std::uintptr_t>(x.data()) % std::uintptr_t(size) != 0)
        throw ts::invalid_argument(std::string("internal: ") + name + "'s matrices are not BLAS operands");
    T* base = static_cast<T*>(const_cast<void*>(x.data()));
    stack_operand<T> out;
    const ts::host_matrix_view<T> first(base, rows, cols, where->first, where->second);
    // The matrices' addresses, in C order of the leading axes.
    std::vector<py::ssize_t> index(std::size_t(std::max(nd - 2, 0)), 0);
    out.pointers.reserve(std::size_t(count));
    for (ts::index_t i = 0; i < count; ++i) {
        py::ssize_t offset = 0;
        for (int d = 0; d < nd - 2; ++d) offset += index[std::size_t(d)] * x.strides(d);
        out.pointers.push_back(reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(base) + std::uintptr_t(offset)));
        for (int d = nd - 3; d >= 0; --d) {
            if (++index[std::size_t(d)] < x.shape(d)) break;
            index[std::size_t(d)] = 0;
        }
    }
    // One step between all consecutive matrices (0 when broadcast): a strided batch.
    bool strided = true;
    std::ptrdiff_t step = count > 1 ? out.pointers[1] - out.pointers[0] : 0;
    for (ts::index_t i = 2; i < count && strided; ++i) strided = out.pointers[std::size_t(i)] - out.pointers[std::size_t(i - 1)] == step;
    if (strided && step >= 0) {
        out.view = ts::host_batch_view<T>::strided(first, ts::index_t(step), count);
        out.pointers.clear();
    } else {
        out.view = ts::host_batch_view<T>::pointers(first, std::span<T* const>(out.pointers));
    }
    return out;
}

template <class T>
std::unique_ptr<background_run> start_gemm_batched(py::object ctx_obj, ts::context& ctx, py::array a, py::array b,
                                                   py::array c, std::complex<double> alpha_in, std::complex<double> beta_in,
                                                   std::optional<std::string> kernel,
                                                   bool plan_only) {
    auto as = std::make_shared<stack_operand<const T>>(stack_of<const T>(a, "a"));
    auto bs = std::make_shared<stack_operand<const T>>(stack_of<const T>(b, "b"));
    auto cs = std::make_shared<stack_operand<T>>(stack_of<T>(c, "out"));
    if (!plan_only && !c.writeable()) throw ts::invalid_argument("output array is read-only");
    const T alpha = scalar_of<T>(alpha_in, "alpha"), beta = scalar_of<T>(beta_in, "beta");
    ts::gemm_call_options call;
    if (kernel) call.kernel = ts::parse_kernel_setting(*kernel);
    ts::context* ctxp = &ctx;
    // Stacks too small to be worth a worker (a few microseconds of products) run on this thread.
    const double flops = double(ts::dtype_traits(ts::dtype_of<T>()).flops_per_multiply_add) * double(cs->view.count()) * double(cs->view.rows()) * double(cs->view.cols()) *
                         double(as->view.cols());
    const bool here = plan_only || flops < 2e5;
    return std::make_unique<background_run>(
        c, std::vector<py::object>{std::move(ctx_obj), std::move(a), std::move(b)},
        [=](background_run& run) mutable {
            if (plan_only) {
                std::string text = "batch: " + std::to_string(cs->view.count()) + " products of " +
                                   std::to_string(cs->view.rows()) + "x" + std::to_string(cs->view.cols()) + "x" +
                                   std::to_string(as->view.cols()) + " (" + (as->view.is_strided() ? "strided" : "pointer array") +
                                   " A, " + (bs->view.is_strided() ? "strided" : "pointer array") +
                                   " B); groups are planned when it runs\n";
                run.set_finish([text] {
                    py::dict d;
                    d["text"] = text;
                    return py::object(d);
                });
                return;
            }
            call.run.on_step_done = [&run](std::size_t n) { run.set_done(n); };
            set_cancel_flag(call.run, run.cancel_flag());
            ts::gemm_report report = ctxp->gemm_batched<T>(ts::op::n, ts::op::n, alpha, as->view, bs->view, beta, cs->view, call);
            run.set_total(report.plan.units);
            run.set_done(report.plan.units);
            run.set_finish([ctxp, report = std::move(report)] { return py::object(report_dict(*ctxp, report)); });
        },
        here);
}

/// An operand of the direct call: a 2-D array, or a 1-D one as a row (1, k) or column (k, 1), as
/// the BLAS reads it where it lies (what blas_layout accepts; a vector of any positive stride).
struct raw_operand {
    void* data = nullptr;
    ts::index_t rows = 0, cols = 0, ld = 1;
    ts::layout lay = ts::layout::row_major;
};
/// The last two axes of x (nd >= 2) as a BLAS matrix operand: its layout and leading dimension.
bool raw_stack_matrix(PyArrayObject* x, raw_operand& out) {
    const int nd = PyArray_NDIM(x);
    if (!PyArray_ISALIGNED(x)) return false;
    const npy_intp es = PyArray_ITEMSIZE(x);
    const npy_intp rows = PyArray_DIM(x, nd - 2), cols = PyArray_DIM(x, nd - 1);
    const npy_intp s0 = PyArray_STRIDE(x, nd - 2), s1 = PyArray_STRIDE(x, nd - 1);
    out.data = PyArray_DATA(x);
    out.rows = rows, out.cols = cols;
    if (rows == 0 || cols == 0) {
        out.ld = std::max<npy_intp>(cols, 1);
        return true;
    }
    if (s0 % es != 0 || s1 % es != 0) return false;
    const npy_intp e0 = s0 / es, e1 = s1 / es;
    if ((cols == 1 || e1 == 1) && (rows == 1 || e0 >= cols)) {
        out.lay = ts::layout::row_major;
        out.ld = rows == 1 ? cols : e0;
        return true;
    }
    if ((rows == 1 || e0 == 1) && (cols == 1 || e1 >= rows)) {
        out.lay = ts::layout::col_major;
        out.ld = cols == 1 ? rows : e1;
        return true;
    }
    return false;
}

bool raw_blas_operand(PyArrayObject* x, bool vector_as_row, raw_operand& out) {
    if (!PyArray_ISALIGNED(x)) return false;
    const npy_intp es = PyArray_ITEMSIZE(x);
    out.data = PyArray_DATA(x);
    if (PyArray_NDIM(x) == 1) {
        const npy_intp len = PyArray_DIM(x, 0);
        npy_intp st = PyArray_STRIDE(x, 0);
        if (len <= 1) st = es;
        if (st <= 0 || st % es != 0) return false;
        out.ld = std::max<ts::index_t>(1, st / es);
        if (vector_as_row) {
            out.rows = 1, out.cols = len, out.lay = ts::layout::col_major;  // (0, j) at j * ld
        } else {
            out.rows = len, out.cols = 1, out.lay = ts::layout::row_major;  // (i, 0) at i * ld
        }
        return true;
    }
    return raw_stack_matrix(x, out);
}

template <class T>
PyObject* direct_matmul(ts::context& ctx, PyArrayObject* a, PyArrayObject* b, int type_num) {
    raw_operand ra, rb;
    const bool a_vec = PyArray_NDIM(a) == 1, b_vec = PyArray_NDIM(b) == 1;
    if (!raw_blas_operand(a, true, ra) || !raw_blas_operand(b, false, rb) || ra.cols != rb.rows) Py_RETURN_NONE;
    const ts::index_t m = ra.rows, n = rb.cols, k = ra.cols;
    if (!ctx.runs_direct(ts::dtype_of<T>(), m, n, k)) Py_RETURN_NONE;
    npy_intp dims[2];
    int nd = 0;
    if (!a_vec) dims[nd++] = m;
    if (!b_vec) dims[nd++] = n;
    PyObject* result = PyArray_EMPTY(nd, dims, type_num, 0);
    if (result == nullptr) return nullptr;
    const ts::host_matrix_view<const T> av(static_cast<const T*>(ra.data), m, k, ra.lay, ra.ld);
    const ts::host_matrix_view<const T> bv(static_cast<const T*>(rb.data), k, n, rb.lay, rb.ld);
    const ts::host_matrix_view<T> cv(static_cast<T*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(result))), m, n,
                                     ts::layout::row_major, std::max<ts::index_t>(1, n));
    if (double(m) * double(n) * double(k) < 32768.0) {
        ctx.gemm<T>(ts::op::n, ts::op::n, T(1), av, bv, T(0), cv);
    } else {
        py::gil_scoped_release release;
        const in_flight counted;
        ctx.gemm<T>(ts::op::n, ts::op::n, T(1), av, bv, T(0), cv);
    }
    return result;
}

/// The step, in elements, between consecutive matrices of x over the result's leading axes `lead`
/// (numpy's broadcasting: x's leading axes aligned to the right, 0 along an axis x broadcasts),
/// when one step describes them all; false otherwise (the general path takes the stack then).
bool stack_step(PyArrayObject* x, const npy_intp* lead, int nlead, ts::index_t& step) {
    const int xl = PyArray_NDIM(x) - 2;
    const npy_intp es = PyArray_ITEMSIZE(x);
    bool have = false;
    npy_intp covered = 1, st = 0;
    for (int d = nlead - 1; d >= 0; --d) {
        if (lead[d] == 1) continue;
        const int xd = d - (nlead - xl);
        npy_intp s = 0;
        if (xd >= 0 && PyArray_DIM(x, xd) != 1) {
            if (PyArray_STRIDE(x, xd) % es != 0) return false;
            s = PyArray_STRIDE(x, xd) / es;
        }
        if (!have) {
            st = s;
            covered = lead[d];
            have = true;
        } else if (s != st * covered) {
            return false;
        } else {
            covered *= lead[d];
        }
    }
    if (st < 0) return false;
    step = ts::index_t(st);
    return true;
}

/// A stack product on this thread's call (context::gemm_batched, which runs small stacks on this
/// thread and larger ones on the devices): the result array, or None when the general path must
/// take it (shapes that do not broadcast or have no element, operands that are no strided stack,
/// work long enough that Ctrl-C and progress need the general path's waiting loop).
template <class T>
PyObject* direct_matmul_stack(ts::context& ctx, PyArrayObject* a, PyArrayObject* b, int type_num) {
    raw_operand ra, rb;
    if (!ctx.computes_in_place()) Py_RETURN_NONE;  // staged devices: the general path, with its waiting loop
    if (!raw_stack_matrix(a, ra) || !raw_stack_matrix(b, rb) || ra.cols != rb.rows) Py_RETURN_NONE;
    const int nda = PyArray_NDIM(a), ndb = PyArray_NDIM(b);
    const int nlead = std::max(nda, ndb) - 2;
    if (nlead > NPY_MAXDIMS - 2) Py_RETURN_NONE;
    npy_intp dims[NPY_MAXDIMS];
    ts::index_t count = 1;
    for (int d = 0; d < nlead; ++d) {
        const int da = d - (nlead - (nda - 2)), db = d - (nlead - (ndb - 2));
        const npy_intp la = da >= 0 ? PyArray_DIM(a, da) : 1, lb = db >= 0 ? PyArray_DIM(b, db) : 1;
        if (la != lb && la != 1 && lb != 1) Py_RETURN_NONE;  // numpy's error comes from the general path
        dims[d] = std::max(la, lb);
        count *= ts::index_t(dims[d]);
    }
    const ts::index_t m = ra.rows, n = rb.cols, k = ra.cols;
    if (count == 0 || m == 0 || n == 0 || k == 0) Py_RETURN_NONE;
    const double flops = double(ts::dtype_traits(ts::dtype_of<T>()).flops_per_multiply_add) * double(count) *
                         double(m) * double(n) * double(k);
    // Up to 5e8 flops (tens of milliseconds at the slowest: a Ctrl-C waits no longer) on this call;
    // longer stacks take the general path, whose waiting loop serves Ctrl-C and progress. (At 5e7,
    // stacks of 10,000 16x16 products took the general path at twice their C time.)
    if (flops > 5e8) Py_RETURN_NONE;
    ts::index_t step_a = 0, step_b = 0;
    if (!stack_step(a, dims, nlead, step_a) || !stack_step(b, dims, nlead, step_b)) Py_RETURN_NONE;
    dims[nlead] = m;
    dims[nlead + 1] = n;
    PyObject* result = tilestream::python::empty_result(nlead + 2, dims, type_num);
    if (result == nullptr) return nullptr;
    const auto av = ts::host_batch_view<const T>::strided(
        ts::host_matrix_view<const T>(static_cast<const T*>(ra.data), m, k, ra.lay, ra.ld), step_a, count);
    const auto bv = ts::host_batch_view<const T>::strided(
        ts::host_matrix_view<const T>(static_cast<const T*>(rb.data), k, n, rb.lay, rb.ld), step_b, count);
    const auto cv = ts::host_batch_view<T>::strided(
        ts::host_matrix_view<T>(static_cast<T*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(result))), m, n,
                                ts::layout::row_major, n),
        m * n, count);
    try {
        if (flops < 2e5) {
            ctx.gemm_batched<T>(ts::op::n, ts::op::n, T(1), av, bv, T(0), cv);
        } else {
            py::gil_scoped_release release;
            const in_flight counted;
            ctx.gemm_batched<T>(ts::op::n, ts::op::n, T(1), av, bv, T(0), cv);
        }
    } catch (...) {
        Py_DECREF(result);
        throw;
    }
    return result;
}

/// Whether b is a's transpose on the same data (numpy's test for a @ a.T, which it gives to ?syrk)
/// and the product is at least _GRAM_MIN_MNK (tilestream/__init__.py) multiply-adds: the Python
/// layer then runs SYRK on one triangle. Smaller products stay on the direct GEMM.
bool gram_form(PyArrayObject* a, PyArrayObject* b) {
    if (PyArray_NDIM(a) != 2 || PyArray_NDIM(b) != 2 || PyArray_DATA(a) != PyArray_DATA(b)) return false;
    const npy_intp *sa = PyArray_DIMS(a), *sb = PyArray_DIMS(b), *ta = PyArray_STRIDES(a), *tb = PyArray_STRIDES(b);
    if (sa[0] != sb[1] || sa[1] != sb[0] || ta[0] != tb[1] || ta[1] != tb[0]) return false;
    return double(sa[0]) * double(sa[0]) * double(sa[1]) >= 400.0 * 400.0 * 400.0;
}

/// tilestream._tilestream.matmul_direct(capsule, a, b): a @ b computed on this thread when both are
/// float32 or both float64 ndarrays (1-D or 2-D) that are BLAS operands as they lie and the
/// context runs the shape on its direct path; None otherwise (the Python layer then takes its
/// general path, which raises numpy's errors). Its arguments are checked by the caller.
PyObject* matmul_direct(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3) Py_RETURN_NONE;
    auto* ctx = static_cast<ts::context*>(PyCapsule_GetPointer(args[0], "tilestream.context"));
    if (ctx == nullptr) return nullptr;
    if (!PyArray_CheckExact(args[1]) || !PyArray_CheckExact(args[2])) Py_RETURN_NONE;
    auto* a = reinterpret_cast<PyArrayObject*>(args[1]);
    auto* b = reinterpret_cast<PyArrayObject*>(args[2]);
    const int nda = PyArray_NDIM(a), ndb = PyArray_NDIM(b);
    const int ta = PyArray_TYPE(a);
    if (ta != PyArray_TYPE(b)) Py_RETURN_NONE;
    if (nda >= 2 && ndb >= 2 && (nda > 2 || ndb > 2)) {
        // Stacks of matrices, every precision: one batched call.
        try {
            switch (ta) {
                case NPY_FLOAT32: return direct_matmul_stack<float>(*ctx, a, b, ta);
                case NPY_FLOAT64: return direct_matmul_stack<double>(*ctx, a, b, ta);
                case NPY_COMPLEX64: return direct_matmul_stack<std::complex<float>>(*ctx, a, b, ta);
                case NPY_COMPLEX128: return direct_matmul_stack<std::complex<double>>(*ctx, a, b, ta);
                default: Py_RETURN_NONE;
            }
        } catch (...) {
            Py_RETURN_NONE;  // the general path raises the same error with the module's translation
        }
    }
    if (nda < 1 || nda > 2 || ndb < 1 || ndb > 2 || (nda == 1 && ndb == 1)) Py_RETURN_NONE;
    if (gram_form(a, b)) Py_RETURN_NONE;  // a @ a.T: the Python layer runs SYRK (Context._gram)
    if (ta != NPY_FLOAT64 && ta != NPY_FLOAT32) Py_RETURN_NONE;
    try {
        return ta == NPY_FLOAT64 ? direct_matmul<double>(*ctx, a, b, ta) : direct_matmul<float>(*ctx, a, b, ta);
    } catch (...) {
        // The general path raises the same error with the module's translation.
        Py_RETURN_NONE;
    }
}

PyMethodDef direct_methods[] = {
    {"matmul_direct", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&matmul_direct)), METH_FASTCALL,
     "a @ b on the calling thread when the context runs it directly, else None."},
    {nullptr, nullptr, 0, nullptr}};

/// alpha or beta of a Level 3 call in the run's type: an imaginary part for a real type, or a finite
/// part beyond the type's range, is an error (the Python layer names the function).
template <class T>
T blas3_scalar(std::complex<double> x, const char* name) {
    if constexpr (!ts::is_complex_v<T>) {
        if (x.imag() != 0) throw ts::invalid_argument(std::string(name) + " has an imaginary part but the operands are real");
    }
    using R = ts::real_type_t<T>;
    for (double part : {x.real(), x.imag()})
        if (std::isfinite(part) && std::abs(part) > double(std::numeric_limits<R>::max()))
            throw ts::invalid_argument(std::string(name) + " is beyond the range of the operands' dtype");
    if constexpr (ts::is_complex_v<T>) return T(R(x.real()), R(x.imag()));
    else return T(x.real());
}

/// One Level 3 call (symm, hemm, syrk, herk, syr2k, her2k, trmm, trsm) on the context, BLAS's
/// semantics: `c` (B for trmm and trsm) is updated in place; the Python layer hands arrays of one
/// dtype that are BLAS operands as they lie.
template <class T>
std::unique_ptr<background_run> start_blas3(py::object ctx_obj, ts::context& ctx, ts::blas3_routine routine,
                                            const ts::blas3_flags& flags, std::complex<double> alpha,
                                            std::complex<double> beta, py::object a, py::object b, py::array c) {
    ts::blas3_operands<T> ops;
    ops.alpha = blas3_scalar<T>(alpha, "alpha");
    ops.beta = blas3_scalar<T>(beta, "beta");
    if (!a.is_none()) ops.a = view_of<const T>(py::array(a), "a");  // None: potrf (A is c)
    if (!b.is_none()) ops.b = view_of<const T>(py::array(b), "b");
    ops.c = view_of<T>(c, "c");
    if (!c.writeable()) throw ts::invalid_argument("the output array is read-only");
    const ts::blas3_problem problem = ts::describe_blas3<T>(routine, flags, ops);
    ts::context* ctxp = &ctx;
    return std::make_unique<background_run>(
        c, std::vector<py::object>{std::move(ctx_obj), std::move(a), std::move(b)},
        [=](background_run& run) mutable {
            ts::blas3_call_options call;
            const ts::blas3_plan plan = ctxp->plan(problem, call);
            run.set_total(plan.tasks);
            call.run.on_task_done = [&run](std::size_t done, std::size_t) { run.set_done(done); };
            call.run.cancel = run.cancel_flag();
            const ts::blas3_report report = ctxp->execute<T>(plan, ops, call);
            run.set_finish([text = ctxp->explain(plan), seconds = report.seconds, tasks = plan.tasks, info = report.info] {
                py::dict d;
                d["text"] = text;
                d["seconds"] = seconds;
                d["tasks"] = tasks;
                d["info"] = info;  // potrf: LAPACK's info
                return py::object(d);
            });
        });
}

/// ipiv of an LU call: a 1-D contiguous int64 array of at least `count` entries (the Python layer makes it).
std::int64_t* pivots_of(const py::array& ipiv, ts::index_t count) {
    if (!ipiv.dtype().is(py::dtype::of<std::int64_t>()) || ipiv.ndim() != 1 || ipiv.shape(0) < count ||
        (ipiv.strides(0) != py::ssize_t(sizeof(std::int64_t)) && ipiv.shape(0) > 1))
        throw ts::invalid_argument("internal: ipiv must be a contiguous int64 array of at least " + std::to_string(count) +
                                   " entries");
    return static_cast<std::int64_t*>(const_cast<void*>(ipiv.data()));
}

/// getrf on the context (LAPACK's semantics): `a` is factored in place and `ipiv` gets the 1-based
/// pivots; the finish dict carries info.
template <class T>
std::unique_ptr<background_run> start_getrf(py::object ctx_obj, ts::context& ctx, py::array a, py::array ipiv) {
    const ts::host_matrix_view<T> av = view_of<T>(a, "a");
    if (!a.writeable()) throw ts::invalid_argument("the array to factor is read-only");
    const ts::index_t mn = std::min(av.rows(), av.cols());
    const std::span<ts::index_t> piv(pivots_of(ipiv, mn), std::size_t(mn));
    const ts::getrf_problem problem = ts::describe_getrf<T>(av);
    ts::context* ctxp = &ctx;
    return std::make_unique<background_run>(
        a, std::vector<py::object>{std::move(ctx_obj), std::move(ipiv)}, [=](background_run& run) mutable {
            ts::getrf_call_options call;
            const ts::getrf_plan plan = ctxp->plan(problem, call);
            run.set_total(plan.tasks);
            call.run.on_task_done = [&run](std::size_t done, std::size_t) { run.set_done(done); };
            call.run.cancel = run.cancel_flag();
            const ts::getrf_report report = ctxp->execute<T>(plan, av, piv, call);
            run.set_finish([text = ctxp->explain(plan), seconds = report.seconds, tasks = plan.tasks, info = report.info] {
                py::dict d;
                d["text"] = text;
                d["seconds"] = seconds;
                d["tasks"] = tasks;
                d["info"] = info;
                return py::object(d);
            });
        });
}

/// getrs on the context: B <- op(A)^-1 B with A's LU factors `lu` and 1-based pivots `ipiv`.
template <class T>
std::unique_ptr<background_run> start_getrs(py::object ctx_obj, ts::context& ctx, ts::op trans, py::array lu,
                                            py::array ipiv, py::array b) {
    const ts::host_matrix_view<const T> lv = view_of<const T>(lu, "lu");
    const ts::host_matrix_view<T> bv = view_of<T>(b, "b");
    if (!b.writeable()) throw ts::invalid_argument("the right-hand sides' array is read-only");
    const std::span<const ts::index_t> piv(pivots_of(ipiv, lv.rows()), std::size_t(lv.rows()));
    ts::context* ctxp = &ctx;
    return std::make_unique<background_run>(
        b, std::vector<py::object>{std::move(ctx_obj), std::move(lu), std::move(ipiv)}, [=](background_run& run) mutable {
            ts::blas3_call_options call;
            call.run.cancel = run.cancel_flag();
            const ts::getrs_report report = ctxp->getrs<T>(trans, lv, piv, bv, call);
            run.set_finish([seconds = report.seconds] {
                py::dict d;
                d["text"] = std::string();
                d["seconds"] = seconds;
                return py::object(d);
            });
        });
}

struct jacobi_args {
    ts::index_t nx = 0, ny = 0;
    std::string dtype = "f64";
    ts::index_t iters = 1000, check_every = 10;
    double tol = 0;
    std::string decomposition = "auto";
    bool overlap = true;
};

template <class T>
std::unique_ptr<background_run> start_jacobi(py::object ctx_obj, ts::context& ctx, const ts::jacobi_problem& problem,
                                             ts::jacobi_options options, const py::object& start) {
    // The plan first: a bad grid or decomposition raises before the field is allocated.
    const ts::jacobi_plan plan = ctx.plan_jacobi(problem, options);
    const std::size_t bytes = ts::checked_bytes(problem.ny, problem.nx, problem.type, "jacobi: field");
    ts::check_host_memory(bytes, "jacobi: the " + std::to_string(problem.ny) + "x" + std::to_string(problem.nx) +
                                     " field");
    py::array_t<T> field({py::ssize_t(problem.ny), py::ssize_t(problem.nx)});
    const ts::host_matrix_view<T> fv(field.mutable_data(), problem.ny, problem.nx);
    if (start.is_none()) {
        ts::fill_jacobi_start<T>(fv);
    } else {
        // The Python layer hands a C-contiguous array of the field's shape and dtype.
        const auto sv = view_of<const T>(py::array(start), "start");
        if (sv.rows() != problem.ny || sv.cols() != problem.nx || sv.layout() != ts::layout::row_major ||
            sv.ld() != problem.nx)
            throw ts::invalid_argument("internal: start is not the field's shape");
        std::copy(sv.data(), sv.data() + bytes / sizeof(T), fv.data());
    }
    ts::context* ctxp = &ctx;
    return std::make_unique<background_run>(
        field, std::vector<py::object>{std::move(ctx_obj)},
        [=, plan_text = plan.explain()](background_run& run) mutable {
            run.set_total(std::size_t(options.iters));
            options.progress = [&run](const ts::jacobi_progress& p) {
                run.set_total(std::size_t(p.iterations));
                run.set_done(std::size_t(p.iteration));
            };
            set_cancel_flag(options, run.cancel_flag());
            const ts::jacobi_report r = ctxp->jacobi<T>(problem, fv, options);
            run.set_done(std::size_t(r.iterations));
            run.set_finish([r, plan_text] {
                py::dict d;
                d["text"] = plan_text;
                d["iterations"] = r.iterations;
                d["seconds"] = r.seconds;
                d["total_seconds"] = r.total_seconds;
                d["glups"] = r.glups;
                d["gbps"] = r.gbps;
                d["residual"] = r.residual;
                d["converged"] = r.converged;
                d["converged_at"] = r.converged_at;
                d["halo_bytes"] = r.halo_bytes;
                return py::object(d);
            });
        });
}

py::dict device_dict(const ts::device_info& i) {
    py::dict d;
    d["id"] = i.id;
    d["kind"] = std::string(ts::to_string(i.kind));
    d["name"] = i.name;
    d["memory_bytes"] = i.memory_bytes;
    d["memory_free_bytes"] = i.memory_free;
    d["budget_bytes"] = i.budget_bytes;
    d["threads"] = i.threads;
    if (i.kind == ts::device_kind::cpu) {
        d["isa"] = i.isa;
        d["blocking"] = i.blocking;
    }
    if (i.kind == ts::device_kind::cuda) {
        d["compute_capability"] = std::to_string(i.cc_major) + "." + std::to_string(i.cc_minor);
        d["sm_count"] = i.threads;
        d["peer_access"] = i.peer_access;
    }
    if (i.kind == ts::device_kind::opencl) {
        d["platform"] = i.platform;
        d["vendor"] = i.vendor;
        d["type"] = i.device_type;
        d["driver"] = i.driver;
        d["fp64"] = i.fp64;
    }
    return d;
}

std::unique_ptr<ts::context> make_context(const std::string& spec, std::optional<std::size_t> memory_budget,
                                          const std::string& kernel, int cpu_threads, const std::string& math,
                                          const std::string& cache, bool reproducible) {
    ts::context_options o;
    o.memory_budget = memory_budget;
    o.cpu_threads = cpu_threads;
    o.kernel = ts::parse_kernel_setting(kernel);
    o.math = ts::parse_math_mode(math);
    o.cache = ts::parse_cache_mode(cache);
    o.reproducible = reproducible;
    py::gil_scoped_release release;  // opening devices may take a while (CUDA contexts, OpenCL programs)
    const in_flight counted;         // (ends before the GIL is taken again: a fork may be waiting, holding it)
    return std::make_unique<ts::context>(spec, o);
}

}  // namespace

PYBIND11_MODULE(_tilestream, m) {
    m.doc() = "tilestream's native part; use the tilestream package";
    if (_import_array() < 0) throw py::error_already_set();
    if (PyModule_AddFunctions(m.ptr(), direct_methods) < 0) throw py::error_already_set();

    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const ts::invalid_argument& e) {  // dimension_mismatch and size_overflow included
            PyErr_SetString(PyExc_ValueError, e.what());
        } catch (const ts::out_of_budget& e) {
            PyErr_SetString(PyExc_MemoryError, e.what());
        } catch (const ts::file_error& e) {
            PyErr_SetString(PyExc_OSError, e.what());
        } catch (const ts::error& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        }
    });

    m.attr("version") = TILESTREAM_PYTHON_VERSION;
    m.def("fork_prepare", [] {
              runs_in_flight::instance().fork_prepare();
              tilestream::python::result_memory_fork_prepare();
          },
          "Waits for the runs in flight and blocks new ones (os.register_at_fork's before).");
    m.def("fork_after", [] {
              tilestream::python::result_memory_fork_after();
              runs_in_flight::instance().fork_after();
          },
          "Lets runs start again (after_in_parent and after_in_child).");
    m.def(
        "empty_result",
        [](const std::vector<npy_intp>& shape, const py::dtype& dtype) {
            PyObject* r = tilestream::python::empty_result(int(shape.size()), shape.data(), reinterpret_cast<PyArray_Descr*>(dtype.ptr())->type_num);
            if (r == nullptr) throw py::error_already_set();
            return py::reinterpret_steal<py::object>(r);
        },
        "np.empty(shape, dtype) for a result: large ones on huge pages, reusing the last large result freed.");
    m.def("kept_result_bytes", &tilestream::python::kept_result_bytes,
          "Bytes of the freed large result kept for the next one (0: none).");
    m.def("release_memory", &tilestream::python::release_kept_result,
          "Gives the freed large result kept for the next one back to the system.");

    m.attr("cancel_supported") =
        py::bool_(has_cancel_flag<ts::gemm_run_options> && has_cancel_flag<ts::jacobi_options>);

    m.def("parse_bytes", [](const std::string& text) { return ts::parse_bytes(text); },
          "Bytes in '512MiB', '1.5GiB', '64KB' or '4096' (the CLI's --memory-budget grammar).");
    m.def("format_bytes", &ts::format_bytes);
    m.def(
        "operand_layout",
        [](const py::array& x) -> py::object {
            const auto where = blas_layout(x);
            if (!where) return py::none();
            return py::make_tuple(where->first == ts::layout::row_major ? "row" : "col", where->second);
        },
        "('row' | 'col', leading dimension) when the 2-D array is a BLAS operand as it lies, else None.");
    m.def(
        "stack_layout",
        [](const py::array& x) -> py::object {
            // The last two axes of a stack, as operand_layout judges a matrix (strides only).
            if (x.ndim() < 2) return py::none();
            if (x.size() == 0) return py::make_tuple("row", std::max<py::ssize_t>(x.shape(x.ndim() - 1), 1));
            py::array first = x;
            if (x.ndim() > 2) {
                std::vector<py::ssize_t> shape{x.shape(x.ndim() - 2), x.shape(x.ndim() - 1)};
                std::vector<py::ssize_t> strides{x.strides(x.ndim() - 2), x.strides(x.ndim() - 1)};
                first = py::array(x.dtype(), shape, strides, x.data(), x);
            }
            const auto where = blas_layout(first);
            if (!where) return py::none();
            return py::make_tuple(where->first == ts::layout::row_major ? "row" : "col", where->second);
        },
        "operand_layout of the matrices of a stack (the last two axes).");
    m.def("devices", [] {
        std::vector<std::unique_ptr<ts::device>> devs;
        {
            py::gil_scoped_release release;
            const in_flight counted;
            devs = ts::open_devices("all");
        }
        py::list out;
        for (const auto& d : devs) out.append(device_dict(d->info()));
        return out;
    });

    py::class_<background_run>(m, "Run")
        .def("wait", &background_run::wait, py::arg("seconds"))
        .def("progress", &background_run::progress)
        .def("cancel", &background_run::cancel)
        .def_property_readonly("output", &background_run::output)
        .def_property_readonly("cancel_requested", &background_run::cancel_requested)
        .def("result", &background_run::result);

    py::class_<kept_array>(m, "Kept")
        .def("changed", [](kept_array& k) { k.handle.changed(); })
        .def("release", [](kept_array& k) {
            k.handle.reset();
            k.array = py::none();
        })
        .def_property_readonly("active", [](const kept_array& k) { return bool(k.handle); });

    py::class_<ts::context>(m, "Context")
        .def(py::init(&make_context), py::arg("spec"), py::arg("memory_budget"), py::arg("kernel"),
             py::arg("cpu_threads"), py::arg("math"), py::arg("cache"), py::arg("reproducible"))
        .def_property_readonly("device_names", &ts::context::device_names)
        .def_property_readonly("budget", &ts::context::budget)
        .def_property_readonly("computes_in_place", &ts::context::computes_in_place)
        .def_property_readonly("direct_handle",
                               [](ts::context& c) {
                                   // For matmul_direct; valid while the Context lives (the caller keeps both).
                                   return py::reinterpret_steal<py::object>(PyCapsule_New(&c, "tilestream.context", nullptr));
                               })
        .def_property_readonly("devices",
                               [](const ts::context& c) {
                                   py::list out;
                                   for (auto* d : c.devices()) out.append(device_dict(d->info()));
                                   return out;
                               })
        .def(
            "start_gemm",
            [](py::object self, py::array a, py::array b, py::array c, std::complex<double> alpha,
               std::complex<double> beta, const std::string& strategy, ts::index_t tile_m, ts::index_t tile_n,
               ts::index_t tile_k, std::optional<std::string> kernel, bool plan_only) {
                auto& ctx = self.cast<ts::context&>();
                const gemm_args g{alpha, beta, strategy, tile_m, tile_n, tile_k, std::move(kernel),
                                  plan_only};
                if (c.dtype().is(py::dtype::of<float>())) return start_gemm<float>(self, ctx, a, b, c, g);
                if (c.dtype().is(py::dtype::of<double>())) return start_gemm<double>(self, ctx, a, b, c, g);
                if (c.dtype().is(py::dtype::of<std::complex<float>>()))
                    return start_gemm<std::complex<float>>(self, ctx, a, b, c, g);
                if (c.dtype().is(py::dtype::of<std::complex<double>>()))
                    return start_gemm<std::complex<double>>(self, ctx, a, b, c, g);
                throw ts::invalid_argument("internal: out is not float32, float64, complex64 or complex128");
            },
            py::arg("a"), py::arg("b"), py::arg("c"), py::arg("alpha"),
            py::arg("beta"), py::arg("strategy"), py::arg("tile_m"), py::arg("tile_n"), py::arg("tile_k"),
            py::arg("kernel"), py::arg("plan_only"))
        .def(
            "start_gemm_batched",
            [](py::object self, py::array a, py::array b, py::array c, std::complex<double> alpha,
               std::complex<double> beta, std::optional<std::string> kernel, bool plan_only) {
                auto& ctx = self.cast<ts::context&>();
                if (c.dtype().is(py::dtype::of<float>()))
                    return start_gemm_batched<float>(self, ctx, a, b, c, alpha, beta, std::move(kernel), plan_only);
                if (c.dtype().is(py::dtype::of<double>()))
                    return start_gemm_batched<double>(self, ctx, a, b, c, alpha, beta, std::move(kernel), plan_only);
                if (c.dtype().is(py::dtype::of<std::complex<float>>()))
                    return start_gemm_batched<std::complex<float>>(self, ctx, a, b, c, alpha, beta, std::move(kernel),
                                                                   plan_only);
                if (c.dtype().is(py::dtype::of<std::complex<double>>()))
                    return start_gemm_batched<std::complex<double>>(self, ctx, a, b, c, alpha, beta, std::move(kernel),
                                                                    plan_only);
                throw ts::invalid_argument("internal: out is not float32, float64, complex64 or complex128");
            },
            py::arg("a"), py::arg("b"), py::arg("c"), py::arg("alpha"), py::arg("beta"), py::arg("kernel"),
            py::arg("plan_only"))
        .def(
            "keep",
            [](ts::context& ctx, py::array x) {
                if (!blas_layout(x))
                    throw ts::invalid_argument("Context.keep: the array must be 2-D with one unit stride (C or Fortran "
                                               "order, or a strided view of one), as matmul reads it in place");
                kept_array k;
                if (x.dtype().is(py::dtype::of<float>())) k.handle = ctx.keep(view_of<const float>(x, "a"));
                else if (x.dtype().is(py::dtype::of<double>())) k.handle = ctx.keep(view_of<const double>(x, "a"));
                else if (x.dtype().is(py::dtype::of<std::complex<float>>()))
                    k.handle = ctx.keep(view_of<const std::complex<float>>(x, "a"));
                else if (x.dtype().is(py::dtype::of<std::complex<double>>()))
                    k.handle = ctx.keep(view_of<const std::complex<double>>(x, "a"));
                else throw ts::invalid_argument("Context.keep: the array must be float32, float64, complex64 or "
                                                "complex128");
                k.array = std::move(x);
                return k;
            },
            py::arg("a"))
        .def(
            "start_blas3",
            [](py::object self, const std::string& routine, const std::string& side, const std::string& uplo,
               const std::string& trans, const std::string& diag, std::complex<double> alpha, std::complex<double> beta,
               py::object a, py::object b, py::array c) {
                auto& ctx = self.cast<ts::context&>();
                const ts::blas3_routine r = ts::parse_blas3_routine(routine);
                ts::blas3_flags f;
                f.side = ts::parse_side(side);
                f.uplo = ts::parse_uplo(uplo);
                f.trans = ts::parse_op(trans);
                f.diag = ts::parse_diag(diag);
                if (c.dtype().is(py::dtype::of<float>())) return start_blas3<float>(self, ctx, r, f, alpha, beta, a, b, c);
                if (c.dtype().is(py::dtype::of<double>())) return start_blas3<double>(self, ctx, r, f, alpha, beta, a, b, c);
                if (c.dtype().is(py::dtype::of<std::complex<float>>()))
                    return start_blas3<std::complex<float>>(self, ctx, r, f, alpha, beta, a, b, c);
                if (c.dtype().is(py::dtype::of<std::complex<double>>()))
                    return start_blas3<std::complex<double>>(self, ctx, r, f, alpha, beta, a, b, c);
                throw ts::invalid_argument("internal: c is not float32, float64, complex64 or complex128");
            },
            py::arg("routine"), py::arg("side"), py::arg("uplo"), py::arg("trans"), py::arg("diag"), py::arg("alpha"),
            py::arg("beta"), py::arg("a"), py::arg("b"), py::arg("c"))
        .def(
            "start_getrf",
            [](py::object self, py::array a, py::array ipiv) {
                auto& ctx = self.cast<ts::context&>();
                if (a.dtype().is(py::dtype::of<float>())) return start_getrf<float>(self, ctx, a, ipiv);
                if (a.dtype().is(py::dtype::of<double>())) return start_getrf<double>(self, ctx, a, ipiv);
                if (a.dtype().is(py::dtype::of<std::complex<float>>())) return start_getrf<std::complex<float>>(self, ctx, a, ipiv);
                if (a.dtype().is(py::dtype::of<std::complex<double>>()))
                    return start_getrf<std::complex<double>>(self, ctx, a, ipiv);
                throw ts::invalid_argument("internal: a is not float32, float64, complex64 or complex128");
            },
            py::arg("a"), py::arg("ipiv"))
        .def(
            "start_getrs",
            [](py::object self, const std::string& trans, py::array lu, py::array ipiv, py::array b) {
                auto& ctx = self.cast<ts::context&>();
                const ts::op t = ts::parse_op(trans);
                if (b.dtype().is(py::dtype::of<float>())) return start_getrs<float>(self, ctx, t, lu, ipiv, b);
                if (b.dtype().is(py::dtype::of<double>())) return start_getrs<double>(self, ctx, t, lu, ipiv, b);
                if (b.dtype().is(py::dtype::of<std::complex<float>>()))
                    return start_getrs<std::complex<float>>(self, ctx, t, lu, ipiv, b);
                if (b.dtype().is(py::dtype::of<std::complex<double>>()))
                    return start_getrs<std::complex<double>>(self, ctx, t, lu, ipiv, b);
                throw ts::invalid_argument("internal: b is not float32, float64, complex64 or complex128");
            },
            py::arg("trans"), py::arg("lu"), py::arg("ipiv"), py::arg("b"))
        .def(
            "start_jacobi",
            [](py::object self, const jacobi_args& j, const py::object& start) {
                auto& ctx = self.cast<ts::context&>();
                ts::jacobi_problem problem{j.nx, j.ny, ts::parse_dtype(j.dtype)};
                ts::jacobi_options o;
                o.decomposition = ts::parse_jacobi_decomposition(j.decomposition);
                o.overlap = j.overlap;
                o.iters = j.iters;
                o.check_every = j.check_every;
                o.tol = j.tol;
                if (problem.type == ts::dtype::f32) return start_jacobi<float>(self, ctx, problem, o, start);
                return start_jacobi<double>(self, ctx, problem, o, start);
            },
            py::arg("args"), py::arg("start"));

    py::class_<jacobi_args>(m, "JacobiArgs")
        .def(py::init<>())
        .def_readwrite("nx", &jacobi_args::nx)
        .def_readwrite("ny", &jacobi_args::ny)
        .def_readwrite("dtype", &jacobi_args::dtype)
        .def_readwrite("iters", &jacobi_args::iters)
        .def_readwrite("check_every", &jacobi_args::check_every)
        .def_readwrite("tol", &jacobi_args::tol)
        .def_readwrite("decomposition", &jacobi_args::decomposition)
        .def_readwrite("overlap", &jacobi_args::overlap);
}
