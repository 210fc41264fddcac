// The Jacobi solver: every decomposition, overlap mode, dtype and CPU device count gives the
// single-device field bit for bit; one device equals a plain loop; residuals, tolerance stops,
// the planner's choice, halos through host memory, parts of a field joined through the engine's
// outer boundary (as ranks are), and clear errors (library and CLI).
#include "core/jacobi_outer.hpp"
#include "test_support.hpp"

#include <tilestream/jacobi.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/verify.hpp>

#include <barrier>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

namespace tilestream {
namespace {

using testing::run_cli;
using testing::temp_dir;

template <class T>
host_matrix<T> clone(const host_matrix<T>& m) {
    host_matrix<T> c(m.rows(), m.cols());
    std::memcpy(c.data(), m.data(), sizeof(T) * std::size_t(m.size()));
    return c;
}

template <class T>
bool bitwise_equal(const host_matrix<T>& a, const host_matrix<T>& b) {
    return a.rows() == b.rows() && a.cols() == b.cols() &&
           std::memcmp(a.data(), b.data(), sizeof(T) * std::size_t(a.size())) == 0;
}

/// The plain loop the solver must reproduce; residuals[t-1] is the norm of iteration t.
template <class T>
struct plain_run {
    host_matrix<T> field;
    std::vector<double> residuals;
};

template <class T>
plain_run<T> plain_jacobi(const host_matrix<T>& start, index_t iters) {
    plain_run<T> r{clone(start), {}};
    host_matrix<T> next = clone(start);
    const index_t ny = start.rows(), nx = start.cols();
    for (index_t t = 0; t < iters; ++t) {
        double sum = 0;
        for (index_t i = 1; i < ny - 1; ++i)
            for (index_t j = 1; j < nx - 1; ++j) {
                const T v = T(0.25) * ((r.field(i - 1, j) + r.field(i + 1, j)) + (r.field(i, j - 1) + r.field(i, j + 1)));
                next(i, j) = v;
                const double d = double(v) - double(r.field(i, j));
                sum += d * d;
            }
        std::swap(r.field, next);
        r.residuals.push_back(std::sqrt(sum));
    }
    return r;
}

/// A random starting field (boundary included), so a halo from the wrong iteration shows.
template <class T>
host_matrix<T> random_start(index_t nx, index_t ny, std::uint64_t seed) {
    host_matrix<T> f(ny, nx);
    fill_random(f.view(), seed);
    return f;
}

std::vector<std::unique_ptr<device>> cpus(int count) {
    open_options o;
    o.cpu_threads = 1;
    return open_devices("cpu:" + std::to_string(count), o);
}

jacobi_options options_of(const std::string& decomp, bool overlap, index_t iters, index_t check_every, double tol) {
    jacobi_options o;
    o.decomposition = parse_jacobi_decomposition(decomp);
    o.overlap = overlap;
    o.iters = iters;
    o.check_every = check_every;
    o.tol = tol;
    return o;
}

template <class T>
jacobi_report solve(const std::vector<std::unique_ptr<device>>& devs, const std::string& decomp, bool overlap,
                    host_matrix<T>& field, index_t iters, index_t check_every = 10, double tol = 0) {
    jacobi_problem pb{field.cols(), field.rows(), dtype_of<T>()};
    return run_jacobi<T>(plan_jacobi(pb, devs, options_of(decomp, overlap, iters, check_every, tol)), field.view());
}

/// rows, cols, auto, tiles and tiles:PxQ for every factorization of d.
std::vector<std::string> decompositions(int d) {
    std::vector<std::string> r = {"rows", "cols", "auto", "tiles"};
    for (int p = 1; p <= d; ++p)
        if (d % p == 0) r.push_back("tiles:" + std::to_string(p) + "x" + std::to_string(d / p));
    return r;
}

// ---- one device against the plain loop

template <class T>
void expect_single_device_matches_plain_loop() {
    auto dev = cpus(1);
    for (auto [nx, ny] : {std::pair<index_t, index_t>{37, 29}, {50, 71}, {3, 3}, {5, 100}, {100, 5}}) {
        for (bool random : {false, true}) {
            for (bool overlap : {true, false}) {
                SCOPED_TRACE(std::to_string(nx) + "x" + std::to_string(ny) + (random ? " random" : " default") +
                             (overlap ? " overlap" : " no overlap"));
                host_matrix<T> start(ny, nx);
                if (random) start = random_start<T>(nx, ny, 7);
                else fill_jacobi_start<T>(start.view());
                const auto plain = plain_jacobi(start, 23);
                host_matrix<T> field = clone(start);
                const auto rep = solve<T>(dev, "rows", overlap, field, 23);
                EXPECT_TRUE(bitwise_equal(field, plain.field));
                EXPECT_EQ(rep.iterations, 23);
                EXPECT_FALSE(rep.converged);
                EXPECT_NEAR(rep.residual, plain.residuals.back(), 1e-12 * plain.residuals.back() + 1e-300);
                if (random && nx > 3 && ny > 3) EXPECT_GT(plain.residuals.back(), 0.0);
                EXPECT_GT(rep.glups, 0.0);
                EXPECT_DOUBLE_EQ(rep.gbps, rep.glups * 2 * sizeof(T));
            }
        }
    }
}

TEST(jacobi, SingleDeviceMatchesPlainLoopF32) { expect_single_device_matches_plain_loop<float>(); }
TEST(jacobi, SingleDeviceMatchesPlainLoopF64) { expect_single_device_matches_plain_loop<double>(); }

TEST(jacobi, DefaultStartIsSineOnTheSideColumns) {
    host_matrix<float> f(9, 6);
    fill_nan(f.view());
    fill_jacobi_start<float>(f.view());
    for (index_t i = 0; i < 9; ++i) {
        const float s = static_cast<float>(std::sin(2.0 * 3.14159265358979323846 * double(i) / 8.0));
        EXPECT_EQ(f(i, 0), s);
        EXPECT_EQ(f(i, 5), s);
        for (index_t j = 1; j < 5; ++j) EXPECT_EQ(f(i, j), 0.0f);
    }
}

// ---- every decomposition x overlap x grid equals one device, for 1..5 devices

class jacobi_devices : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

template <class T>
void expect_decompositions_match(const std::vector<std::unique_ptr<device>>& devs) {
    const int count = static_cast<int>(devs.size());
    auto one = cpus(1);
    for (auto [nx, ny] : {std::pair<index_t, index_t>{37, 29}, {50, 71}}) {
        const host_matrix<T> start = random_start<T>(nx, ny, 11);
        host_matrix<T> expect = clone(start);
        const auto ref = solve<T>(one, "rows", false, expect, 21, 4);
        for (const auto& decomp : decompositions(count)) {
            for (bool overlap : {true, false}) {
                SCOPED_TRACE(std::to_string(nx) + "x" + std::to_string(ny) + " " + decomp + " on " +
                             std::to_string(count) + " devices, overlap " + (overlap ? "on" : "off"));
                host_matrix<T> field = clone(start);
                const auto rep = solve<T>(devs, decomp, overlap, field, 21, 4);
                EXPECT_TRUE(bitwise_equal(field, expect));
                EXPECT_EQ(rep.iterations, 21);
                EXPECT_NEAR(rep.residual, ref.residual, 1e-12 * ref.residual);
            }
        }
    }
}

TEST_P(jacobi_devices, EveryDecompositionMatchesOneDeviceBitwise) {
    const auto& [count, type] = GetParam();
    if (type == "f32") expect_decompositions_match<float>(cpus(count));
    else expect_decompositions_match<double>(cpus(count));
}

/// OpenCL parts (logical slices of one device, and one beside a CPU device) give the CPU's bits.
class jacobi_opencl_devices : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};
TEST_P(jacobi_opencl_devices, EveryDecompositionMatchesOneCpuDeviceBitwise) {
    const auto& [spec, type] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU(spec);
    if (type == "f32") expect_decompositions_match<float>(open_devices(spec));
    else expect_decompositions_match<double>(open_devices(spec));
}
INSTANTIATE_TEST_SUITE_P(opencl, jacobi_opencl_devices,
                         ::testing::Combine(::testing::Values("opencl:0", "opencl:0x3", "cpu,opencl:0"),
                                            ::testing::Values("f32", "f64")),
                         [](const auto& info) {
                             std::string spec = std::get<0>(info.param);
                             for (auto& ch : spec)
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return spec + "_" + std::get<1>(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(cpu, jacobi_devices,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5), ::testing::Values("f32", "f64")),
                         [](const auto& info) {
                             return std::to_string(std::get<0>(info.param)) + "_devices_" + std::get<1>(info.param);
                         });

TEST(jacobi, PartsOfOneRowOrColumnMatch) {
    // 5x100: three interior rows for three devices (one row each); 100x5 likewise in columns.
    auto devs = cpus(3);
    auto one = cpus(1);
    for (auto [nx, ny, decomp] : {std::tuple<index_t, index_t, const char*>{100, 5, "rows"}, {5, 100, "cols"}}) {
        for (bool overlap : {true, false}) {
            SCOPED_TRACE(std::string(decomp) + (overlap ? " overlap" : ""));
            const auto start = random_start<double>(nx, ny, 3);
            host_matrix<double> a = clone(start), b = clone(start);
            solve<double>(devs, decomp, overlap, a, 30);
            solve<double>(one, "rows", overlap, b, 30);
            EXPECT_TRUE(bitwise_equal(a, b));
        }
    }
}

TEST(jacobi, ManyThreadsPerDeviceMatch) {
    open_options o;
    o.cpu_threads = 3;
    auto devs = open_devices("cpu:2", o);
    auto one = cpus(1);
    const auto start = random_start<float>(61, 47, 5);
    host_matrix<float> a = clone(start), b = clone(start);
    solve<float>(devs, "tiles:2x1", true, a, 40);
    solve<float>(one, "rows", false, b, 40);
    EXPECT_TRUE(bitwise_equal(a, b));
}

// ---- halos through host memory: a CPU device that claims no peer path

/// Forwards everything to a CPU device but reports no peer access, so every halo travels
/// device -> host staging -> device as it does between a CPU and a GPU.
class no_peer_device final : public device {
public:
    explicit no_peer_device(std::unique_ptr<device> inner) : device(rename(inner->info())), inner_(std::move(inner)) {}
    bool host_addressable() const override { return true; }
    host_staging_buffer allocate_host_staging(std::size_t b) override { return inner_->allocate_host_staging(b); }
    void register_host(void* p, std::size_t b) override { inner_->register_host(p, b); }
    void unregister_host(void* p) override { inner_->unregister_host(p); }
    std::unique_ptr<stream> create_stream(stream_priority p) override { return inner_->create_stream(p); }
    std::unique_ptr<event> create_event() override { return inner_->create_event(); }
    void wait(stream& s, event& e) override { inner_->wait(s, e); }
    void synchronize() override { inner_->synchronize(); }
    void enqueue_host(stream& s, std::function<void()> fn, const std::string& n) override {
        inner_->enqueue_host(s, std::move(fn), n);
    }
    void copy_to_device(stream& s, void* d, const void* h, std::size_t b) override { inner_->copy_to_device(s, d, h, b); }
    void copy_to_host(stream& s, void* h, const void* d, std::size_t b) override { inner_->copy_to_host(s, h, d, b); }
    void copy_within(stream& s, void* d, const void* r, std::size_t b) override { inner_->copy_within(s, d, r, b); }
    void copy_2d_to_device(stream& s, const copy_2d_desc& c) override { inner_->copy_2d_to_device(s, c); }
    void copy_2d_to_host(stream& s, const copy_2d_desc& c) override { inner_->copy_2d_to_host(s, c); }
    void copy_2d_within(stream& s, const copy_2d_desc& c) override { inner_->copy_2d_within(s, c); }
    bool can_copy_peer(const device&) const override { return false; }
    void copy_peer(stream&, device& o, void*, const void*, std::size_t) override {
        throw invalid_argument("no_peer_device: copy_peer to " + o.id());
    }
    void copy_2d_peer(stream&, device& o, const copy_2d_desc&) override {
        throw invalid_argument("no_peer_device: copy_2d_peer to " + o.id());
    }
    bool supports(gemm_kernel k) const override { return inner_->supports(k); }
    void gemm(stream& s, const gemm_call& c) override { inner_->gemm(s, c); }
    void jacobi_sweep(stream& s, const jacobi_call& c) override { inner_->jacobi_sweep(s, c); }

protected:
    void* raw_allocate(std::size_t b) override { return detail::aligned_host_alloc(b); }
    void raw_free(void* p) noexcept override { std::free(p); }

private:
    static device_info rename(device_info i) {
        i.id = "nopeer-" + i.id;
        return i;
    }
    std::unique_ptr<device> inner_;
};

TEST(jacobi, HalosThroughHostMemoryMatch) {
    std::vector<std::unique_ptr<device>> devs;
    for (auto& d : cpus(4)) devs.push_back(std::make_unique<no_peer_device>(std::move(d)));
    auto one = cpus(1);
    const auto start = random_start<double>(37, 29, 9);
    host_matrix<double> expect = clone(start);
    solve<double>(one, "rows", true, expect, 25);
    for (const char* decomp : {"rows", "cols", "tiles:2x2"}) {
        for (bool overlap : {true, false}) {
            SCOPED_TRACE(std::string(decomp) + (overlap ? " overlap" : ""));
            jacobi_problem pb{37, 29, dtype::f64};
            jacobi_options o;
            o.decomposition = parse_jacobi_decomposition(decomp);
            o.overlap = overlap;
            o.iters = 25;
            const auto plan = plan_jacobi(pb, devs, o);
            EXPECT_EQ(plan.peer_links(), 0);
            EXPECT_GT(plan.host_links(), 0);
            host_matrix<double> field = clone(start);
            run_jacobi<double>(plan, field.view());
            EXPECT_TRUE(bitwise_equal(field, expect));
        }
    }
}

// ---- residual, delayed checks, tolerance

TEST(jacobi, ResidualIsOfTheLastIterationForAnyCheckInterval) {
    auto devs = cpus(3);
    const auto start = random_start<double>(50, 71, 4);
    const auto plain = plain_jacobi(start, 20);
    for (index_t k : {1, 3, 7, 20, 50}) {
        SCOPED_TRACE("check every " + std::to_string(k));
        host_matrix<double> field = clone(start);
        std::vector<index_t> seen;
        jacobi_options o;
        o.iters = 20;
        o.check_every = k;
        o.progress = [&](const jacobi_progress& p) {
            seen.push_back(p.iteration);
            EXPECT_NEAR(p.residual, plain.residuals[p.iteration - 1], 1e-12 * p.residual);
        };
        const auto rep = run_jacobi<double>(plan_jacobi({50, 71, dtype::f64}, devs, o), field.view());
        EXPECT_TRUE(bitwise_equal(field, plain.field));
        EXPECT_NEAR(rep.residual, plain.residuals.back(), 1e-12 * rep.residual);
        std::vector<index_t> expect;
        for (index_t t = 1; t <= 20; ++t)
            if (t % k == 0 || t == 20) expect.push_back(t);
        EXPECT_EQ(seen, expect);
    }
}

TEST(jacobi, ToleranceStopsOneCheckAfterTheResidualFallsBelowIt) {
    auto devs = cpus(2);
    host_matrix<float> start(29, 37);
    fill_jacobi_start<float>(start.view());
    const index_t k = 5, n = 200;
    const auto plain = plain_jacobi(start, n);
    // A tolerance halfway (geometrically) between the residuals of checks 6 and 7 (iterations 30
    // and 35), so rounding differences between summation orders cannot move the stop.
    ASSERT_GT(plain.residuals[29], plain.residuals[34]);
    const double tol = std::sqrt(plain.residuals[29] * plain.residuals[34]);
    index_t first_below = 0;
    for (index_t t = k; t <= n && !first_below; t += k)
        if (plain.residuals[t - 1] < tol) first_below = t;
    ASSERT_EQ(first_below, 35);
    for (bool overlap : {true, false}) {
        host_matrix<float> field = clone(start);
        const auto rep = solve<float>(devs, "cols", overlap, field, n, k, tol);
        EXPECT_TRUE(rep.converged);
        EXPECT_EQ(rep.converged_at, 35);
        EXPECT_EQ(rep.iterations, 40);  // examined one check later: iterations up to 40 were queued
        EXPECT_TRUE(bitwise_equal(field, plain_jacobi(start, 40).field));
        EXPECT_NEAR(rep.residual, plain.residuals[39], 1e-9 * rep.residual);
    }
    // A tolerance never reached runs every iteration.
    host_matrix<float> field = clone(start);
    const auto rep = solve<float>(devs, "rows", true, field, 30, k, 1e-30);
    EXPECT_FALSE(rep.converged);
    EXPECT_EQ(rep.iterations, 30);
}

// ---- a field cut into parts joined through the engine's outer boundary (what the MPI layer does
// with MPI_Isend/Irecv, here between threads through shared memory)

struct loopback_grid {
    int p, q;
    std::vector<std::array<std::vector<char>, 4>> mailbox;  ///< part k's strip sent on side s
    std::vector<double> sums;
    std::barrier<> sync;
    loopback_grid(int rows, int cols)
        : p(rows), q(cols), mailbox(std::size_t(rows * cols)), sums(std::size_t(rows * cols)), sync(rows * cols) {}
};

class loopback_boundary final : public detail::jacobi_outer_boundary {
public:
    loopback_boundary(loopback_grid& g, int k, index_t rows, index_t cols, std::size_t elem)
        : g_(g), k_(k), bytes_{cols * elem, cols * elem, rows * elem, rows * elem} {}
    int neighbour(int s) const {
        const int i = k_ / g_.q, j = k_ % g_.q;
        switch (s) {
            case detail::side_up: return i > 0 ? k_ - g_.q : -1;
            case detail::side_down: return i + 1 < g_.p ? k_ + g_.q : -1;
            case detail::side_left: return j > 0 ? k_ - 1 : -1;
            default: return j + 1 < g_.q ? k_ + 1 : -1;
        }
    }
    bool has_neighbour(int s) const override { return neighbour(s) >= 0; }
    void start_exchange(index_t, const std::array<const void*, 4>& send, const std::array<void*, 4>& recv) override {
        for (int s = 0; s < 4; ++s)
            if (has_neighbour(s)) {
                const auto* c = static_cast<const char*>(send[std::size_t(s)]);
                g_.mailbox[std::size_t(k_)][std::size_t(s)].assign(c, c + bytes_[std::size_t(s)]);
            }
        recv_ = recv;
        g_.sync.arrive_and_wait();
    }
    void finish_exchange() override {
        static constexpr int opposite[4] = {detail::side_down, detail::side_up, detail::side_right, detail::side_left};
        for (int s = 0; s < 4; ++s)
            if (has_neighbour(s))
                std::memcpy(recv_[std::size_t(s)], g_.mailbox[std::size_t(neighbour(s))][std::size_t(opposite[s])].data(),
                            bytes_[std::size_t(s)]);
        g_.sync.arrive_and_wait();  // every part has its strips before the next iteration's replace them
    }
    void start_residual(double local) override { g_.sums[std::size_t(k_)] = local; }
    double finish_residual() override {
        g_.sync.arrive_and_wait();
        double sum = 0;
        for (double v : g_.sums) sum += v;
        g_.sync.arrive_and_wait();
        return sum;
    }

private:
    loopback_grid& g_;
    int k_;
    std::array<std::size_t, 4> bytes_;
    std::array<void*, 4> recv_{};
};

/// A random field cut into p x q parts, each with its ring and 2 CPU devices on its own thread:
/// the joined parts equal one device's field bit for bit and stop after the same iteration.
template <class T>
void expect_joined_parts_match(int p, int q, const std::string& decomp, bool overlap, bool with_tol) {
    SCOPED_TRACE(std::to_string(p) + "x" + std::to_string(q) + " parts, each over 2 devices as " + decomp +
                 (overlap ? ", overlap" : "") + (with_tol ? ", tol" : ""));
    const index_t nx = 41, ny = 34, iters = 25, check = 3;
    const host_matrix<T> start = random_start<T>(nx, ny, 5);
    auto one = cpus(1);
    double tol = 0;
    if (with_tol) {  // just above the residual of iteration 12: the run stops at the check of 15
        host_matrix<T> probe = clone(start);
        tol = solve<T>(one, "rows", true, probe, 12, check).residual * (1 + 1e-9);
    }
    host_matrix<T> expect = clone(start);
    const auto ref = solve<T>(one, "rows", true, expect, iters, check, tol);
    if (with_tol) EXPECT_EQ(ref.iterations, 15);
    loopback_grid grid(p, q);
    host_matrix<T> joined = clone(start);
    for (index_t j = 1; j < nx - 1; ++j)
        for (index_t i = 1; i < ny - 1; ++i) joined(i, j) = std::numeric_limits<T>::quiet_NaN();
    std::vector<jacobi_report> reps(std::size_t(p * q));
    std::vector<std::thread> threads;
    for (int k = 0; k < p * q; ++k)
        threads.emplace_back([&, k] {
            const int gi = k / q, gj = k % q;
            const index_t r0 = 1 + (ny - 2) * gi / p, r1 = 1 + (ny - 2) * (gi + 1) / p;
            const index_t c0 = 1 + (nx - 2) * gj / q, c1 = 1 + (nx - 2) * (gj + 1) / q;
            host_matrix<T> part(r1 - r0 + 2, c1 - c0 + 2);
            for (index_t a = 0; a < part.rows(); ++a)
                for (index_t b = 0; b < part.cols(); ++b) part(a, b) = start(r0 - 1 + a, c0 - 1 + b);
            auto devs = cpus(2);
            loopback_boundary outer(grid, k, r1 - r0, c1 - c0, sizeof(T));
            const jacobi_problem pb{part.cols(), part.rows(), dtype_of<T>()};
            const jacobi_plan plan = plan_jacobi(pb, devs, options_of(decomp, overlap, iters, check, tol));
            reps[std::size_t(k)] = detail::run_jacobi_part<T>(plan, part.view(), &outer);
            for (index_t a = 1; a <= r1 - r0; ++a)
                for (index_t b = 1; b <= c1 - c0; ++b) joined(r0 - 1 + a, c0 - 1 + b) = part(a, b);
        });
    for (auto& t : threads) t.join();
    EXPECT_TRUE(bitwise_equal(joined, expect));
    for (const auto& r : reps) {
        EXPECT_EQ(r.iterations, ref.iterations);
        EXPECT_EQ(r.converged, ref.converged);
        EXPECT_NEAR(r.residual, ref.residual, 1e-12 * ref.residual);
    }
}

TEST(jacobi, PartsJoinedThroughTheOuterBoundaryMatchOneDeviceBitwise) {
    expect_joined_parts_match<float>(2, 2, "tiles", true, false);
    expect_joined_parts_match<double>(1, 3, "rows", false, false);
    expect_joined_parts_match<float>(3, 1, "cols", true, false);
    expect_joined_parts_match<double>(2, 1, "auto", true, true);
    expect_joined_parts_match<float>(1, 2, "tiles", false, true);
}

TEST(jacobi, ZeroIterationsLeaveTheField) {
    auto devs = cpus(2);
    const auto start = random_start<float>(11, 13, 2);
    host_matrix<float> field = clone(start);
    const auto rep = solve<float>(devs, "rows", true, field, 0);
    EXPECT_EQ(rep.iterations, 0);
    EXPECT_TRUE(std::isnan(rep.residual));
    EXPECT_TRUE(bitwise_equal(field, start));
}

TEST(jacobi, PlanReusedGivesTheSameField) {
    auto devs = cpus(3);
    jacobi_options o;
    o.iters = 17;
    const auto plan = plan_jacobi({41, 33, dtype::f32}, devs, o);
    auto a = solve_jacobi<float>(plan), b = solve_jacobi<float>(plan);
    EXPECT_TRUE(bitwise_equal(a.field, b.field));
    EXPECT_EQ(a.report.iterations, 17);
}

// ---- the planner

TEST(jacobi, PlannerChoosesLeastHaloBytes) {
    auto two = cpus(2), four = cpus(4), five = cpus(5);
    // Wide and flat: cutting columns sends 2 x 8 elements, cutting rows 2 x 998.
    auto wide = plan_jacobi({1000, 10, dtype::f32}, two);
    EXPECT_EQ(wide.decomposition().split, jacobi_split::cols);
    EXPECT_TRUE(wide.planner_chose());
    EXPECT_EQ(wide.halo_bytes_per_iteration(), 2u * 8 * 4);
    // Square, four devices: 2x2 sends 4 x 100 elements, stripes 6 x 100.
    auto square = plan_jacobi({102, 102, dtype::f64}, four);
    EXPECT_EQ(square.decomposition().split, jacobi_split::tiles);
    EXPECT_EQ(square.decomposition().p, 2);
    EXPECT_EQ(square.decomposition().q, 2);
    EXPECT_EQ(square.row_halo_bytes(), 2u * 100 * 8);
    EXPECT_EQ(square.column_halo_bytes(), 2u * 100 * 8);
    // Tall: rows. Tiles with a prime count: 5x1 or 1x5, whichever sends less.
    auto tall = plan_jacobi({20, 500, dtype::f32}, two);
    EXPECT_EQ(tall.decomposition().split, jacobi_split::rows);
    jacobi_options tiles;
    tiles.decomposition = parse_jacobi_decomposition("tiles");
    auto prime = plan_jacobi({20, 500, dtype::f32}, five, tiles);
    EXPECT_EQ(prime.decomposition().p, 5);
    EXPECT_EQ(prime.decomposition().q, 1);
    // Uneven parts differ by at most one row, and cover the interior exactly once.
    jacobi_options rows;
    rows.decomposition = parse_jacobi_decomposition("rows");
    auto uneven = plan_jacobi({7, 12, dtype::f32}, four, rows);
    index_t next = 1;
    for (const auto& part : uneven.parts()) {
        EXPECT_EQ(part.row_begin, next);
        EXPECT_GE(part.rows(), 2);
        EXPECT_LE(part.rows(), 3);
        EXPECT_EQ(part.ld % 16, 0);
        next = part.row_end;
    }
    EXPECT_EQ(next, 11);
    const std::string text = uneven.explain();
    for (const char* want : {"cpu:0", "cpu:3", "4x1 parts: rows", "halo per iteration", "part 3"})
        EXPECT_NE(text.find(want), std::string::npos) << want << " missing in\n" << text;
}

TEST(jacobi, WeakScalingGrowsTheGridWithTheDevices) {
    const auto p = weak_scaling_problem({12, 10, dtype::f64}, 6);  // 3 x 2 parts of 8 x 10
    EXPECT_EQ(p.ny, 8 * 3 + 2);
    EXPECT_EQ(p.nx, 10 * 2 + 2);
    EXPECT_EQ(weak_scaling_problem({12, 10, dtype::f64}, 1).nx, 12);
    auto devs = cpus(2);
    std::vector<device*> raw{devs[0].get(), devs[1].get()};
    jacobi_options o;
    o.iters = 10;
    const auto m = measure_jacobi(weak_scaling_problem({40, 30, dtype::f32}, 2), raw, o);
    EXPECT_EQ(m.iterations, 10);
    EXPECT_EQ(m.devices, 2);
    EXPECT_GT(m.glups, 0.0);
    EXPECT_DOUBLE_EQ(m.gbps, 8 * m.glups);
}

// ---- errors

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const invalid_argument& e) {
        return e.what();
    }
    return "(no invalid_argument thrown)";
}

TEST(jacobi, BadInputGetsClearErrors) {
    auto three = cpus(3), five = cpus(5);
    EXPECT_NE(error_of([&] { plan_jacobi({2, 5, dtype::f32}, three); }).find("at least 3x3"), std::string::npos);
    jacobi_options rows;
    rows.decomposition = parse_jacobi_decomposition("rows");
    const auto many = error_of([&] { plan_jacobi({40, 6, dtype::f32}, five, rows); });
    EXPECT_NE(many.find("4 interior rows"), std::string::npos) << many;
    EXPECT_NE(many.find("5 parts down the rows"), std::string::npos) << many;
    jacobi_options tiles;
    tiles.decomposition = parse_jacobi_decomposition("tiles:2x2");
    EXPECT_NE(error_of([&] { plan_jacobi({40, 40, dtype::f32}, three, tiles); }).find("makes 4 parts but 3 devices"),
              std::string::npos);
    const auto unknown = error_of([] { parse_jacobi_decomposition("diagonal"); });
    EXPECT_NE(unknown.find("unknown decomposition 'diagonal'"), std::string::npos) << unknown;
    EXPECT_NE(error_of([] { parse_jacobi_decomposition("tiles:0x3"); }).find("positive"), std::string::npos);
    jacobi_options k0;
    k0.check_every = 0;
    EXPECT_NE(error_of([&] { plan_jacobi({9, 9, dtype::f32}, three, k0); }).find("check_every"), std::string::npos);
    auto plan = plan_jacobi({9, 9, dtype::f32}, three);
    host_matrix<float> wrong(9, 8);
    EXPECT_THROW(run_jacobi<float>(plan, wrong.view()), dimension_mismatch);
    host_matrix<double> other(9, 9);
    EXPECT_NE(error_of([&] { run_jacobi<double>(plan, other.view()); }).find("f32"), std::string::npos);
}

TEST(jacobi, PartOverItsBudgetNamesTheDevice) {
    open_options o;
    o.cpu_threads = 1;
    o.memory_budget = 64 * 1024;
    auto devs = open_devices("cpu:2", o);
    try {
        solve_jacobi<double>(plan_jacobi({200, 200, dtype::f64}, devs));
        FAIL() << "a part over the budget ran";
    } catch (const out_of_budget& e) {
        EXPECT_NE(std::string(e.what()).find("cpu:"), std::string::npos) << e.what();
    }
}

// ---- GPUs (skipped without one): parts on GPU slices and a GPU beside a CPU device

TEST(jacobi, GpuPartsMatchOneCpuDevice) {
    TILESTREAM_SKIP_WITHOUT_GPU("cuda:0");
    auto one = cpus(1);
    const auto start = random_start<float>(301, 257, 8);
    host_matrix<float> expect = clone(start);
    solve<float>(one, "rows", false, expect, 30);
    for (const char* spec : {"cuda:0", "cuda:0x2", "cuda:0,cpu"}) {
        auto devs = open_devices(spec);
        for (const char* decomp : {"rows", "cols"}) {
            for (bool overlap : {true, false}) {
                SCOPED_TRACE(std::string(spec) + " " + decomp + (overlap ? " overlap" : ""));
                host_matrix<float> field = clone(start);
                solve<float>(devs, decomp, overlap, field, 30);
                EXPECT_TRUE(bitwise_equal(field, expect));
            }
        }
    }
}

// ---- the command line

TEST(jacobi_cli, CheckPassesAndJsonHasTheFields) {
    auto r = run_cli("jacobi --nx 37 --ny 29 --iters 25 --devices cpu:3 --cpu-threads 1 --decomp tiles:3x1 "
                     "--dtype f64 --check --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    for (const char* key : {"\"nx\": 37", "\"ny\": 29", "\"iterations\": 25", "\"seconds\": ", "\"glups\": ",
                            "\"gbps\": ", "\"residual\": ", "\"check_passed\": true", "\"decomp\": \"tiles:3x1\""})
        EXPECT_NE(r.out.find(key), std::string::npos) << key << " missing in " << r.out;
}

TEST(jacobi_cli, InitOutAndImage) {
    temp_dir dir;
    const auto start = random_start<float>(23, 19, 12);
    write_npy<float>(dir.file("init.npy"), host_matrix_view<const float>(start.view()));
    auto r = run_cli("jacobi --init " + dir.file("init.npy") + " --iters 15 --devices cpu:2 --cpu-threads 1 "
                     "--decomp cols --overlap off --check --out " + dir.file("u.npy") + " --image " +
                     dir.file("u.png"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("check: final field bitwise identical"), std::string::npos) << r.out;
    const auto out = read_npy(dir.file("u.npy"));
    ASSERT_EQ(out.rows(), 19);
    ASSERT_EQ(out.cols(), 23);
    const auto plain = plain_jacobi(start, 15);
    EXPECT_EQ(std::memcmp(out.view<float>().data(), plain.field.data(), sizeof(float) * 19 * 23), 0);
    std::ifstream png(dir.file("u.png"), std::ios::binary);
    char sig[8] = {};
    png.read(sig, 8);
    EXPECT_EQ(std::string(sig, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    EXPECT_EQ(dir.entries(), 3u);  // init, field, image: no temporary file left
}

TEST(jacobi_cli, ToleranceAndText) {
    auto r = run_cli("jacobi --nx 30 --ny 30 --iters 100000 --tol 1e-3 --check-every 5 --devices cpu:2 --quiet");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("converged: the residual of iteration"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("GLUP/s"), std::string::npos) << r.out;
}

TEST(jacobi_cli, BadInputExitsWithCodeTwo) {
    temp_dir dir;
    {
        std::ofstream bad(dir.file("bad.npy"), std::ios::binary);
        bad << "this is not a numpy file";
    }
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"--nx 2 --ny 40", "at least 3x3"},
        {"--nx 40 --ny 6 --devices cpu:5 --decomp rows", "5 parts down the rows"},
        {"--nx 40 --ny 40 --decomp diagonal", "unknown decomposition 'diagonal'"},
        {"--nx 40 --ny 40 --overlap maybe", "--overlap expects on or off"},
        {"--nx 40 --ny 40 --devices cpu:3 --decomp tiles:2x2", "makes 4 parts but 3 devices"},
        {"--init " + dir.file("bad.npy"), dir.file("bad.npy")},
        {"--init " + dir.file("missing.npy"), dir.file("missing.npy")},
        {"--nx 40 --ny 40 --check-every 0", "--check-every must be at least 1, got 0"},
        {"--nx 40 --ny 40 --tol -1", "--tol must be"},
    };
    for (const auto& [args, message] : cases) {
        auto r = run_cli("jacobi " + args);
        EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
        EXPECT_NE(r.out.find(message), std::string::npos) << args << ": '" << message << "' missing in " << r.out;
    }
}

}  // namespace
}  // namespace tilestream
