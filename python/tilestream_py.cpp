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
#include <pybind11/complex.h>
#include <pybind11/stl.h>

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
    background_run(py::object output, std::vector<py::object> keep_alive, body_fn body)
        : output_(std::move(output)), keep_alive_(std::move(keep_alive)) {
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
    d["kernel"] = std::string(ts::to_string(p.kernel));
    d["tile"] = py::make_tuple(p.tile_m, p.tile_n, p.tile_k);
    d["tiles"] = py::make_tuple(p.tiles_m, p.tiles_n, p.tiles_k);
    d["units"] = p.units;
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
    if (g.kernel) call.kernel = ts::parse_gemm_kernel(*g.kernel);
    // A transposed numpy view is a column-major view of its base (the same as op = t on the base),
    // so every operand goes in as it lies with op = n.
    const ts::op oa = ts::op::n, ob = ts::op::n;
    const T alpha = scalar_of<T>(g.alpha, "alpha"), beta = scalar_of<T>(g.beta, "beta");
    const bool plan_only = g.plan_only;
    ts::context* ctxp = &ctx;
    return std::make_unique<background_run>(
        c, std::vector<py::object>{std::move(ctx_obj), std::move(a), std::move(b)},
        [=](background_run& run) mutable {
            const ts::gemm_plan plan = ctxp->plan<T>(oa, ob, alpha, av, bv, beta, cv, call);
            run.set_total(plan.units);
            if (plan_only) {
                run.set_finish([ctxp, plan] { return py::object(plan_dict(*ctxp, plan)); });
                return;
            }
            call.run.on_unit_done = [&run](std::size_t) { run.add_done(); };
            set_cancel_flag(call.run, run.cancel_flag());
            ts::gemm_report report = ctxp->execute<T>(plan, alpha, av, bv, beta, cv, call);
            run.set_finish([ctxp, report = std::move(report)] { return py::object(report_dict(*ctxp, report)); });
        });
}

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
    ops.a = view_of<const T>(py::array(a), "a");
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
            run.set_finish([text = ctxp->explain(plan), seconds = report.seconds, tasks = plan.tasks] {
                py::dict d;
                d["text"] = text;
                d["seconds"] = seconds;
                d["tasks"] = tasks;
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
    o.kernel = ts::parse_gemm_kernel(kernel);
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
    m.def("fork_prepare", [] { runs_in_flight::instance().fork_prepare(); },
          "Waits for the runs in flight and blocks new ones (os.register_at_fork's before).");
    m.def("fork_after", [] { runs_in_flight::instance().fork_after(); },
          "Lets runs start again (after_in_parent and after_in_child).");

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
