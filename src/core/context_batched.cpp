// Batched GEMM through a context (context::gemm_batched): a stack of products of one shape cut into
// groups, each one batched kernel call on a device; in place on CPU devices, staged through device
// memory (out of core) on devices that copy, groups from a shared queue; tiny stacks on the calling
// thread.
#include <tilestream/context.hpp>
#include <tilestream/error.hpp>

#include "core/context_routes.hpp"
#include "core/gemm_direct.hpp"
#include "core/gemm_memory.hpp"
#include "core/rate_probes.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tilestream {

namespace {

using clock_type = std::chrono::steady_clock;

/// Bytes of one stored matrix of a stack, packed (what a device slot holds of it).
template <class V>
std::size_t packed_bytes(const V& v) {
    return std::size_t(v.rows()) * std::size_t(v.cols()) * sizeof(typename V::value_type);
}

/// A 2-D copy between matrix `i` of a host stack and its packed place in a device slot.
template <class V>
copy_2d_desc matrix_copy(const V& v, index_t i, void* slot, bool to_device) {
    using T = typename V::value_type;
    const bool rows = v.layout() == layout::row_major;
    const std::size_t inner = std::size_t(rows ? v.cols() : v.rows()), outer = std::size_t(rows ? v.rows() : v.cols());
    copy_2d_desc d;
    d.width_bytes = inner * sizeof(T);
    d.height = outer;
    char* host = reinterpret_cast<char*>(const_cast<T*>(v.data(i)));
    if (to_device) {
        d.src = host;
        d.src_pitch = std::size_t(v.ld()) * sizeof(T);
        d.dst = slot;
        d.dst_pitch = d.width_bytes;
    } else {
        d.src = slot;
        d.src_pitch = d.width_bytes;
        d.dst = host;
        d.dst_pitch = std::size_t(v.ld()) * sizeof(T);
    }
    return d;
}

/// Whether matrices [first, first + count) of a stack lie one after the other with no gap (one copy).
template <class V>
bool contiguous_run(const V& v) {
    const bool rows = v.layout() == layout::row_major;
    const index_t inner = rows ? v.cols() : v.rows();
    return v.is_strided() && v.ld() == std::max<index_t>(1, inner) && v.stride() == v.rows() * v.cols();
}

}  // namespace

template <class T>
gemm_report context::gemm_batched(op op_a, op op_b, T alpha, host_batch_view<const T> a, host_batch_view<const T> b,
                                  T beta, host_batch_view<T> c, const gemm_call_options& call) {
    check_process();
    const index_t batch = c.count();
    const auto count_ok = [&](index_t n) { return n == batch || n == 1; };
    if (!count_ok(a.count()) || !count_ok(b.count()))
        throw dimension_mismatch("gemm_batched: A holds " + std::to_string(a.count()) + " matrices and B " +
                                 std::to_string(b.count()) + ", C " + std::to_string(batch) +
                                 " (each must hold as many as C, or one for every product)");
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    // One matrix for every product is a stride of 0.
    const auto broadcast = [&](host_batch_view<const T> v) {
        return v.count() == 1 && batch != 1 ? host_batch_view<const T>::strided(v[0], 0, batch) : v;
    };
    a = broadcast(a);
    b = broadcast(b);
    const index_t m = c.rows(), n = c.cols(), k = is_transposed(op_a) ? a.rows() : a.cols();
    const dtype type = dtype_of<T>();
    gemm_report rep;
    rep.plan.problem.type = type;
    rep.plan.problem.op_a = op_a;
    rep.plan.problem.op_b = op_b;
    rep.plan.problem.m = m;
    rep.plan.problem.n = n;
    rep.plan.problem.k = k;
    rep.plan.devices = int(device_ptrs_.size());
    rep.plan.batch = batch;
    if (batch == 0 || m == 0 || n == 0) return rep;
    rep.plan.problem = describe_gemm<T>(op_a, op_b, alpha, a[0], b[0], beta, c[0]);
    const double item_flops = alpha != T(0) ? double(dtype_traits(type).flops_per_multiply_add) * double(m) * double(n) * double(k) : 0.0;
    const std::optional<gemm_kernel> asked = call.kernel ? call.kernel : options_.kernel;
    const detail::route& route = routes_->get(type, classify_gemm(m, n, k), asked);
    const auto t0 = clock_type::now();
    const bool cancelled_now = call.run.cancel != nullptr && call.run.cancel->load();
    if (cancelled_now) throw cancelled("gemm_batched: cancelled before it started");

    // The kernel of products that run one per thread: the route's (measured on single calls of the
    // shape class) unless a stack of such products was measured (choose_stack_kernel: vendor
    // against tiled on a stack of products of this size, once per process and size bucket). A
    // kernel asked for, reproducible mode and declared rates keep the route's.
    gemm_kernel stack_kernel = route.host_kernel;
    double item_seconds = route.host_item_fixed + item_flops / std::max(route.host_flops, 1.0);
    bool stack_measured = false;
    if (!asked && !options_.reproducible && !options_.rates && route.direct_possible && item_flops > 0 && k > 0 &&
        (classify_gemm(m, n, k) == shape_class::small || classify_gemm(m, n, k) == shape_class::tiny)) {
        const detail::stack_choice sc = detail::choose_stack_kernel(type, m, n, k);
        if (sc.seconds_per_product > 0) {
            stack_kernel = sc.choice.kernel;
            item_seconds = sc.seconds_for(m, n, k);
            stack_measured = true;
        }
    }
    const gemm_call item0 = detail::host_gemm_call<T>(op_a, op_b, alpha, a[0], b[0], beta, c[0], stack_kernel);
    const index_t kb = options_.reproducible ? reproducible_k_block(type) : 0;
    // A stack runs on this thread unless the devices' threads, each taking whole products, finish
    // it sooner after the hand-off (the engine's fixed cost).
    const double host_seconds = route.host_fixed + double(batch) * item_seconds;
    // Pointer lists of the whole stack when one stride does not describe it (in place: this thread
    // and host-addressable devices read the matrices where they lie).
    std::vector<const void*> a_list, b_list;
    std::vector<void*> c_list;
    if (in_place_ && (!a.is_strided() || !b.is_strided() || !c.is_strided())) {
        a_list.resize(std::size_t(batch));
        b_list.resize(std::size_t(batch));
        c_list.resize(std::size_t(batch));
        for (index_t i = 0; i < batch; ++i) {
            a_list[std::size_t(i)] = a.data(i);
            b_list[std::size_t(i)] = b.data(i);
            c_list[std::size_t(i)] = c.data(i);
        }
    }
    int threads = 0;
    for (const device* d : device_ptrs_) threads += std::max(1, d->info().threads);
    const double spread = double(std::min<index_t>(batch, std::max(1, threads)));
    const auto engine_fixed = [&] { return route.engine_fixed > 0 ? route.engine_fixed : routes_->engine_fixed(); };
    if (route.direct_possible && in_place_ && host_seconds <= engine_fixed() + host_seconds / spread) {
        rep.plan.strategy = gemm_strategy::direct;
        rep.plan.kernel = stack_kernel;
        rep.plan.units = rep.plan.steps = 1;
        rep.plan.batch_group = batch;
        rep.plan.predicted_seconds = host_seconds;
        // One call over the stack: kernel settings (OpenBLAS's threads, the tiled kernel's blocking)
        // made once, then only the products.
        gemm_batched_call g;
        g.call = item0;
        g.count = batch;
        if (a_list.empty()) {
            g.stride_a = a.stride();
            g.stride_b = b.stride();
            g.stride_c = c.stride();
        } else {
            g.a_list = a_list.data();
            g.b_list = b_list.data();
            g.c_list = c_list.data();
        }
        detail::host_gemm_batched(g, kb);
        rep.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
        if (call.run.on_step_done) call.run.on_step_done(1);
        if (call.run.on_unit_done) call.run.on_unit_done(1);
        return rep;
    }

    // Each device's kernel and rate for products of this class; groups short enough that a cancel
    // or a progress report comes within a step (step_seconds), and at least one group per device.
    const std::size_t devices = device_ptrs_.size();
    std::vector<gemm_kernel> kernels = route.device_kernels;
    if (asked) std::fill(kernels.begin(), kernels.end(), options_.reproducible && *asked == gemm_kernel::vendor ? gemm_kernel::tiled : *asked);
    // CPU devices split a stack of small products one per worker: the kernel measured on such stacks.
    if (stack_measured)
        for (std::size_t i = 0; i < devices; ++i)
            if (device_ptrs_[i]->info().kind == device_kind::cpu && device_ptrs_[i]->host_addressable()) kernels[i] = stack_kernel;
    for (std::size_t i = 0; i < devices; ++i)
        if (!device_ptrs_[i]->supports(kernels[i]))
            throw invalid_argument("gemm_batched: device " + device_ptrs_[i]->id() + " has no '" +
                                   std::string(to_string(kernels[i])) + "' kernel");
    double rate = route.engine_flops > 0 ? route.engine_flops / double(devices) : 0;
    if (rate <= 0) rate = options_.rates ? options_.rates->flops : device_rates{}.flops;
    index_t group = batch;
    if (options_.step_seconds > 0 && item_flops > 0) {
        double per_step = options_.step_seconds * rate / item_flops;
        // CPU devices in place run whole products on each of their threads at the time per product
        // measured on stacks (or the host kernel's): the engine's rate for the shape class is that
        // of single calls, fixed cost included, a small fraction of a stack's for small products
        // (10,000 f64 16x16 products, about 2 ms, ran as 16 groups of 624, each a hand-off to the
        // device's stream and workers).
        const bool cpu_only = std::all_of(device_ptrs_.begin(), device_ptrs_.end(),
                                          [](const device* d) { return d->info().kind == device_kind::cpu; });
        if (in_place_ && cpu_only && stack_measured && item_seconds > 0)
            per_step = options_.step_seconds * (double(threads) / double(devices)) / item_seconds;
        group = std::max<index_t>(1, index_t(std::min(per_step, double(batch))));
    }
    group = std::min(group, std::max<index_t>(1, (batch + index_t(devices) - 1) / index_t(devices)));

    // Devices that copy: the group's A, B and C in two sets of buffers (the next group's copies
    // overlap the current one's products), at most half the budget each.
    const std::size_t es = sizeof(T);
    const std::size_t a_one = packed_bytes(a[0]), b_one = packed_bytes(b[0]), c_one = std::size_t(m) * std::size_t(n) * es;
    const bool a_shared = a.is_strided() && a.stride() == 0, b_shared = b.is_strided() && b.stride() == 0;
    const bool reads_ab = alpha != T(0) && k > 0;
    if (!in_place_) {
        const std::size_t room = budget() / 2;
        const std::size_t fixed = reads_ab ? (a_shared ? a_one : 0) + (b_shared ? b_one : 0) : 0;
        const std::size_t per = (reads_ab ? (a_shared ? 0 : a_one) + (b_shared ? 0 : b_one) : 0) + c_one;
        const index_t fits = room > fixed ? index_t((room - fixed) / std::max<std::size_t>(per, 1)) : 0;
        if (fits < 1) {
            // One product alone is larger than the buffers allow: each runs as its own gemm, out of core.
            for (index_t i = 0; i < batch; ++i) {
                if (call.run.cancel != nullptr && call.run.cancel->load())
                    throw cancelled("gemm_batched: cancelled after " + std::to_string(i) + " of " + std::to_string(batch) +
                                    " products");
                gemm_call_options one = call;
                one.run.on_step_done = nullptr;
                one.run.on_unit_done = nullptr;
                const gemm_report r = gemm<T>(op_a, op_b, alpha, a[i], b[i], beta, c[i], one);
                rep.bytes_h2d += r.bytes_h2d;
                rep.bytes_d2h += r.bytes_d2h;
                rep.peak_device_bytes = std::max(rep.peak_device_bytes, r.peak_device_bytes);
                if (i == 0) {
                    const index_t keep_batch = rep.plan.batch;
                    rep.plan = r.plan;
                    rep.plan.batch = keep_batch;
                    rep.plan.batch_group = 1;
                }
                if (call.run.on_step_done) call.run.on_step_done(std::size_t(i + 1));
                if (call.run.on_unit_done) call.run.on_unit_done(std::size_t(i + 1));
            }
            rep.plan.units = rep.plan.steps = std::size_t(batch);
            rep.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
            return rep;
        }
        group = std::min(group, fits);
    }
    const index_t units = (batch + group - 1) / group;
    rep.plan.strategy = in_place_ ? gemm_strategy::zero_copy : gemm_strategy::in_core;
    rep.plan.kernel = kernels.front();
    if (std::any_of(kernels.begin(), kernels.end(), [&](gemm_kernel x) { return x != kernels.front(); }))
        rep.plan.device_kernels = kernels;
    rep.plan.batch_group = group;
    rep.plan.units = rep.plan.steps = std::size_t(units);
    rep.plan.tile_m = m;
    rep.plan.tile_n = n;
    rep.plan.tile_k = k;
    rep.plan.k_block = kb;
    rep.plan.predicted_seconds = double(batch) * item_flops / std::max(rate * double(devices), 1.0);


    const std::lock_guard lock(mutex_);  // runs queue, as GEMM runs do
    std::atomic<index_t> next{0}, done{0};
    std::atomic<bool> stop{false};
    std::atomic<std::size_t> bytes_h2d{0}, bytes_d2h{0}, peak{0};
    std::vector<std::exception_ptr> errors(devices);
    std::vector<std::size_t> shares(devices, 0);
    std::mutex progress_mutex;
    const auto stopping = [&] { return stop.load() || (call.run.cancel != nullptr && call.run.cancel->load()); };
    const auto report_unit = [&] {
        const index_t d = ++done;
        std::lock_guard plock(progress_mutex);
        if (call.run.on_step_done) call.run.on_step_done(std::size_t(d));
        if (call.run.on_unit_done) call.run.on_unit_done(std::size_t(d));
    };
    const auto group_call = [&](std::size_t dev_index, index_t first, index_t count) {
        gemm_batched_call g;
        g.call = item0;
        g.call.kernel = kernels[dev_index];
        g.count = count;
        if (!a_list.empty()) {
            g.a_list = a_list.data() + first;
            g.b_list = b_list.data() + first;
            g.c_list = c_list.data() + first;
        } else {
            g.call.a = a.data(first);
            g.call.b = b.data(first);
            g.call.c = c.data(first);
            g.stride_a = a.stride();
            g.stride_b = b.stride();
            g.stride_c = c.stride();
        }
        return g;
    };

    const auto in_place_worker = [&](std::size_t d) {
        device& dev = *device_ptrs_[d];
        // The compute stream the context keeps for its GEMM runs (a CPU stream is a thread: making
        // one per call would cost more than a small stack), given back when the stack is done.
        std::unique_ptr<stream> s;
        {
            const std::lock_guard kept(memory_->mutex);
            if (d < memory_->kits.size() && memory_->kits[d] && memory_->kits[d]->compute)
                s = std::move(memory_->kits[d]->compute);
        }
        if (!s) s = dev.create_stream(stream_priority::high);
        struct give_back {
            detail::gemm_memory& memory;
            std::size_t d;
            std::unique_ptr<stream>& s;
            ~give_back() {
                if (!s || std::uncaught_exceptions() > 0) return;
                const std::lock_guard kept(memory.mutex);
                if (d >= memory.kits.size()) return;
                if (!memory.kits[d]) memory.kits[d] = std::make_unique<detail::device_kit>();
                if (!memory.kits[d]->compute) memory.kits[d]->compute = std::move(s);
            }
        } back{*memory_, d, s};
        for (;;) {
            if (stopping()) return;
            const index_t u = next++;
            if (u >= units) return;
            const index_t first = u * group, count = std::min(group, batch - first);
            gemm_batched_call g = group_call(d, first, count);
            if (kb > 0) {
                for (index_t i = 0; i < count; ++i)
                    detail::for_each_k_block(g.item(i), kb, [&](const gemm_call& part) { dev.gemm(*s, part); });
            } else {
                dev.gemm_batched(*s, g);
            }
            s->synchronize();
            ++shares[d];
            report_unit();
        }
    };

    const auto staged_worker = [&](std::size_t d) {
        device& dev = *device_ptrs_[d];
        budget_reservation reservation(dev, 2 * (group * ((reads_ab ? (a_shared ? 0 : a_one) + (b_shared ? 0 : b_one) : 0) + c_one)) +
                                                (reads_ab ? (a_shared ? a_one : 0) + (b_shared ? b_one : 0) : 0));
        struct stage {
            device_buffer a, b, c;
            std::unique_ptr<event> loaded, computed, stored;
            bool used = false;
        };
        stage stages[2];
        for (stage& st : stages) {
            if (reads_ab && !a_shared) st.a = dev.allocate(std::size_t(group) * a_one, &reservation);
            if (reads_ab && !b_shared) st.b = dev.allocate(std::size_t(group) * b_one, &reservation);
            st.c = dev.allocate(std::size_t(group) * c_one, &reservation);
            st.loaded = dev.create_event();
            st.computed = dev.create_event();
            st.stored = dev.create_event();
        }
        device_buffer shared_a, shared_b;
        // Streams last: destroyed (and drained) before the buffers their queued copies use.
        const auto h2d = dev.create_stream(), compute = dev.create_stream(stream_priority::high), d2h = dev.create_stream();
        // A or B shared by every product: loaded once for this device.
        if (reads_ab && a_shared) {
            shared_a = dev.allocate(a_one, &reservation);
            dev.copy_2d_to_device(*h2d, matrix_copy(a, 0, shared_a.get(), true));
            bytes_h2d += a_one;
        }
        if (reads_ab && b_shared) {
            shared_b = dev.allocate(b_one, &reservation);
            dev.copy_2d_to_device(*h2d, matrix_copy(b, 0, shared_b.get(), true));
            bytes_h2d += b_one;
        }
        const auto load = [&](const auto& v, index_t first, index_t count, void* slot, std::size_t one) {
            if (contiguous_run(v)) {
                dev.copy_to_device(*h2d, slot, v.data(first), std::size_t(count) * one);
            } else {
                for (index_t i = 0; i < count; ++i)
                    dev.copy_2d_to_device(*h2d, matrix_copy(v, first + i, static_cast<char*>(slot) + std::size_t(i) * one, true));
            }
            bytes_h2d += std::size_t(count) * one;
        };
        for (std::size_t j = 0;; ++j) {
            stage& st = stages[j % 2];
            // The stage's previous group must be back in host memory before the stage is refilled;
            // waiting here also keeps this thread at most two groups ahead (a cancel takes effect soon).
            if (st.used) st.stored->synchronize();
            if (stopping()) break;
            const index_t u = next++;
            if (u >= units) break;
            const index_t first = u * group, count = std::min(group, batch - first);
            st.used = true;
            if (reads_ab && !a_shared) load(a, first, count, st.a.get(), a_one);
            if (reads_ab && !b_shared) load(b, first, count, st.b.get(), b_one);
            if (beta != T(0)) load(host_batch_view<const T>(c), first, count, st.c.get(), c_one);
            st.loaded->record(*h2d);
            dev.wait(*compute, *st.loaded);
            gemm_batched_call g;
            g.call = item0;
            g.call.kernel = kernels[d];
            g.count = count;
            const bool a_rows = a[0].layout() == layout::row_major, b_rows = b[0].layout() == layout::row_major;
            g.call.a = reads_ab ? (a_shared ? shared_a.get() : st.a.get()) : st.c.get();
            g.call.lda = std::max<index_t>(1, a_rows ? a.cols() : a.rows());
            g.call.b = reads_ab ? (b_shared ? shared_b.get() : st.b.get()) : st.c.get();
            g.call.ldb = std::max<index_t>(1, b_rows ? b.cols() : b.rows());
            g.call.c = st.c.get();
            g.call.ldc = std::max<index_t>(1, c.layout() == layout::row_major ? n : m);
            g.stride_a = a_shared ? 0 : a.rows() * a.cols();
            g.stride_b = b_shared ? 0 : b.rows() * b.cols();
            g.stride_c = m * n;
            if (kb > 0) {
                for (index_t i = 0; i < count; ++i)
                    detail::for_each_k_block(g.item(i), kb, [&](const gemm_call& part) { dev.gemm(*compute, part); });
            } else {
                dev.gemm_batched(*compute, g);
            }
            st.computed->record(*compute);
            dev.wait(*d2h, *st.computed);
            const host_batch_view<const T> cc(c);
            if (contiguous_run(cc)) {
                dev.copy_to_host(*d2h, c.data(first), st.c.get(), std::size_t(count) * c_one);
            } else {
                for (index_t i = 0; i < count; ++i)
                    dev.copy_2d_to_host(*d2h, matrix_copy(cc, first + i, static_cast<char*>(st.c.get()) + std::size_t(i) * c_one, false));
            }
            bytes_d2h += std::size_t(count) * c_one;
            st.stored->record(*d2h);
            dev.enqueue_host(*d2h, [&, d] {
                ++shares[d];
                report_unit();
            }, "group done");
        }
        for (stream* s : {h2d.get(), compute.get(), d2h.get()}) s->synchronize();
        std::size_t p = peak.load();
        while (p < reservation.peak() && !peak.compare_exchange_weak(p, reservation.peak())) {
        }
    };

    const auto work = [&](std::size_t d) {
        try {
            if (in_place_)
                in_place_worker(d);
            else
                staged_worker(d);
        } catch (...) {
            errors[d] = std::current_exception();
            stop = true;
        }
    };
    if (call.run.trace)
        for (device* d : device_ptrs_) d->set_trace_sink(call.run.trace);
    if (devices == 1) {
        work(0);
    } else {
        std::vector<std::thread> threads;
        for (std::size_t d = 0; d < devices; ++d) threads.emplace_back(work, d);
        for (auto& t : threads) t.join();
    }
    if (call.run.trace)
        for (device* d : device_ptrs_) d->set_trace_sink(nullptr);
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    if (done.load() < units)
        throw cancelled("gemm_batched: cancelled after " + std::to_string(done.load()) + " of " + std::to_string(units) +
                        " groups");
    rep.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    rep.bytes_h2d = bytes_h2d.load();
    rep.bytes_d2h = bytes_d2h.load();
    rep.peak_device_bytes = peak.load();
    for (std::size_t d = 0; d < devices; ++d) {
        device_share sh;
        sh.id = device_ptrs_[d]->id();
        sh.units = shares[d];
        sh.flops = double(shares[d]) * double(group) * item_flops;
        rep.devices.push_back(sh);
    }
    return rep;
}

#define TILESTREAM_INSTANTIATE(T)                                                                                \
    template gemm_report context::gemm_batched<T>(op, op, T, host_batch_view<const T>, host_batch_view<const T>, T, \
                                                  host_batch_view<T>, const gemm_call_options&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
