// Tests of the CUDA backend itself: discovery, logical devices and budgets, 1-D/2-D/peer copies,
// streams, events, host functions, traces, and every GEMM kernel and the Jacobi sweep against the
// host reference. Tests that need a GPU skip with the discovery status when there is none.
#include "backends/backends.hpp"
#include "backends/reference/reference_kernels.hpp"

#include <tilestream/device.hpp>
#include <tilestream/error.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/npy.hpp>

#include <gtest/gtest.h>

#ifdef TILESTREAM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace {

using namespace tilestream;

const backends::cuda_discovery& discovery() {
    static const backends::cuda_discovery d = backends::discover_cuda();
    return d;
}

#define SKIP_WITHOUT_CUDA_GPU()                                            \
    do {                                                                   \
        if (discovery().gpus.empty())                                      \
            GTEST_SKIP() << "no CUDA GPU: " << discovery().status;         \
    } while (0)

std::unique_ptr<device> open_gpu(int ordinal = 0, int slice = 0, int slices = 1,
                                 std::optional<std::size_t> budget = std::nullopt) {
    return backends::make_cuda_device(ordinal, slice, slices, budget);
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<T> v(n);
    for (auto& x : v) {
        double r = u(rng);
        if (std::abs(r) < 1e-3) r = 0.5;  // non-zero inputs: a kernel that reads nothing fails
        x = static_cast<T>(r);
    }
    return v;
}

// ------------------------------------------------------------------ discovery and devices

TEST(CudaDiscovery, NeverThrowsAndGivesOneStatusLine) {
    backends::cuda_discovery d;
    EXPECT_NO_THROW(d = backends::discover_cuda());
    EXPECT_FALSE(d.status.empty());
    EXPECT_EQ(d.status.find('\n'), std::string::npos) << d.status;
    for (std::size_t i = 0; i < d.gpus.size(); ++i) {
        const device_info& g = d.gpus[i];
        EXPECT_EQ(g.id, "cuda:" + std::to_string(i));
        EXPECT_EQ(g.kind, device_kind::cuda);
        EXPECT_FALSE(g.name.empty());
        EXPECT_GT(g.memory_bytes, 0u);
        EXPECT_LE(g.memory_free, g.memory_bytes);
        EXPECT_GT(g.threads, 0) << "SM count";
        EXPECT_GE(g.cc_major, 1);
        EXPECT_EQ(g.physical_index, int(i));
        for (int p : g.peer_access) {
            EXPECT_NE(p, int(i));
            EXPECT_LT(p, int(d.gpus.size()));
        }
    }
}

#ifndef TILESTREAM_HAVE_CUDA
TEST(CudaDevice, StubSaysTheBackendWasNotCompiled) {
    try {
        open_gpu(0);
        FAIL() << "the stub opened a GPU";
    } catch (const not_compiled& e) {
        EXPECT_TRUE(contains(e.what(), "cuda backend was not compiled")) << e.what();
    }
    EXPECT_EQ(discovery().status, "CUDA backend not compiled into this build");
}
#define SKIP_WITHOUT_CUDA_BACKEND() GTEST_SKIP() << "CUDA backend not compiled into this build"
#else
#define SKIP_WITHOUT_CUDA_BACKEND() (void)0
#endif

TEST(CudaDevice, MissingGpuIsAClearError) {
    SKIP_WITHOUT_CUDA_BACKEND();
    const int present = int(discovery().gpus.size());
    try {
        open_gpu(present);
        FAIL() << "opening cuda:" << present << " succeeded";
    } catch (const invalid_argument& e) {
        const std::string w = e.what();
        EXPECT_TRUE(contains(w, "cuda:" + std::to_string(present) + " does not exist")) << w;
        if (present == 0) {
            EXPECT_TRUE(contains(w, discovery().status)) << w;
        }
    }
}

TEST(CudaDevice, BadSlicesAreRejected) {
    SKIP_WITHOUT_CUDA_BACKEND();
    EXPECT_THROW(open_gpu(0, 2, 2), invalid_argument);
    EXPECT_THROW(open_gpu(0, 0, 0), invalid_argument);
    EXPECT_THROW(open_gpu(0, -1, 2), invalid_argument);
    EXPECT_THROW(open_gpu(-1, 0, 1), invalid_argument);
}

TEST(CudaDevice, LogicalDevicesShareTheGpu) {
    SKIP_WITHOUT_CUDA_GPU();
    const device_info& gpu = discovery().gpus[0];
    auto whole = open_gpu();
    EXPECT_EQ(whole->id(), "cuda:0");
    EXPECT_FALSE(whole->host_addressable());
    EXPECT_TRUE(whole->supports(gemm_kernel::vendor));
    EXPECT_TRUE(whole->supports(gemm_kernel::tiled));
    EXPECT_TRUE(whole->supports(gemm_kernel::naive));
    EXPECT_FALSE(whole->supports(gemm_kernel::reference));
    EXPECT_LE(whole->budget(), whole->info().memory_free);
    EXPECT_GT(whole->budget(), whole->info().memory_free / 2) << "the reserve is small";

    auto a = open_gpu(0, 0, 2), b = open_gpu(0, 1, 2);
    EXPECT_EQ(a->id(), "cuda:0.0");
    EXPECT_EQ(b->id(), "cuda:0.1");
    for (const auto* d : {a.get(), b.get()}) {
        EXPECT_EQ(d->info().kind, device_kind::cuda);
        EXPECT_EQ(d->info().physical_index, 0);
        EXPECT_EQ(d->info().slices, 2);
        EXPECT_EQ(d->info().memory_bytes, gpu.memory_bytes / 2);
        EXPECT_EQ(d->info().threads, gpu.threads);
        EXPECT_LE(d->budget(), d->info().memory_free);
    }
    EXPECT_EQ(b->info().slice, 1);

    // Each logical device has its own streams, numbered per device.
    auto s1 = a->create_stream(), s2 = a->create_stream(stream_priority::high);
    auto s3 = b->create_stream();
    EXPECT_NE(s1->id(), s2->id());
    EXPECT_EQ(&s3->owner(), b.get());
}

TEST(CudaDevice, ExplicitBudgetAboveTheShareIsRejected) {
    SKIP_WITHOUT_CUDA_GPU();
    const std::size_t total = discovery().gpus[0].memory_bytes;
    try {
        open_gpu(0, 0, 2, total);
        FAIL() << "a budget of the whole GPU for half of it was accepted";
    } catch (const invalid_argument& e) {
        EXPECT_TRUE(contains(e.what(), "cuda:0.0")) << e.what();
        EXPECT_TRUE(contains(e.what(), "exceeds")) << e.what();
    }
    auto d = open_gpu(0, 0, 1, std::size_t(64) << 20);
    EXPECT_EQ(d->budget(), std::size_t(64) << 20);
}

TEST(CudaDevice, AllocationBeyondTheBudgetNamesDeviceRequestAndBudget) {
    SKIP_WITHOUT_CUDA_GPU();
    const std::size_t mib = std::size_t(1) << 20;
    auto d = open_gpu(0, 0, 1, 3 * mib);
    device_buffer first = d->allocate(2 * mib);
    ASSERT_TRUE(first);
    EXPECT_EQ(d->bytes_in_use(), 2 * mib);
    try {
        d->allocate(2 * mib);
        FAIL() << "allocation beyond the budget succeeded";
    } catch (const out_of_budget& e) {
        const std::string w = e.what();
        EXPECT_TRUE(contains(w, "cuda:0")) << w;
        EXPECT_TRUE(contains(w, std::to_string(2 * mib)) || contains(w, format_bytes(2 * mib))) << w;
        EXPECT_TRUE(contains(w, std::to_string(3 * mib)) || contains(w, format_bytes(3 * mib))) << w;
    }
    EXPECT_EQ(d->bytes_in_use(), 2 * mib);
    first.reset();
    EXPECT_EQ(d->bytes_in_use(), 0u);
    EXPECT_EQ(d->peak_bytes(), 2 * mib);
}

// ------------------------------------------------------------------ copies

TEST(CudaCopy, RoundTrip1DThroughPageablePinnedAndRegisteredMemory) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    const std::size_t n = (std::size_t(1) << 20) + 13;  // not a multiple of anything useful
    const std::size_t bytes = n * sizeof(double);
    const auto src = random_values<double>(n, 1);

    device_buffer x = d->allocate(bytes), y = d->allocate(bytes);
    d->copy_to_device(*s, x.get(), src.data(), bytes);  // pageable
    d->copy_within(*s, y.get(), x.get(), bytes);
    host_staging_buffer pinned = d->allocate_host_staging(bytes);
    ASSERT_NE(pinned.get(), nullptr);
    std::memset(pinned.get(), 0, bytes);
    d->copy_to_host(*s, pinned.get(), y.get(), bytes);
    s->synchronize();
    EXPECT_EQ(std::memcmp(pinned.get(), src.data(), bytes), 0);

    // Registered user memory, registered twice (two users) and unregistered twice.
    std::vector<double> back(n, 0.0);
    d->register_host(back.data(), bytes);
    d->register_host(back.data(), bytes);
    d->copy_to_device(*s, x.get(), pinned.get(), bytes);
    d->copy_to_host(*s, back.data(), x.get(), bytes);
    s->synchronize();
    EXPECT_EQ(back, src);
    d->unregister_host(back.data());
    d->unregister_host(back.data());
    EXPECT_THROW(d->unregister_host(back.data()), invalid_argument);
}

#ifdef TILESTREAM_HAVE_CUDA
// A .npy input is mapped PROT_READ: register_host refuses to pin it with a device_error that says
// why (never silent), and copies from it work pageable.
TEST(CudaCopy, ReadOnlyMappedInputIsRefusedPinningAndCopiedPageable) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    const std::size_t n = (std::size_t(4) << 20) + 5;
    const std::size_t bytes = n * sizeof(float);
    const auto src = random_values<float>(n, 11);
    const auto path = std::filesystem::temp_directory_path() /
                      ("tilestream-readonly-" + std::to_string(::getpid()) + ".bin");
    {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        ASSERT_EQ(std::fwrite(src.data(), 1, bytes, f), bytes);
        std::fclose(f);
    }
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    void* mapped = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    std::filesystem::remove(path);
    ASSERT_NE(mapped, MAP_FAILED);

    // Not pinned (cudaHostRegister with cudaHostRegisterReadOnly hung on an H200 VM for such a
    // mapping): register_host refuses with the reason, and copies from it still arrive whole.
    bool pinned = false;
    try {
        d->register_host(mapped, bytes);
        pinned = true;
    } catch (const device_error& e) {
        EXPECT_TRUE(contains(e.what(), "read-only")) << e.what();
    }
    EXPECT_FALSE(pinned) << "a read-only mapping was pinned";
    device_buffer x = d->allocate(bytes);
    d->copy_to_device(*s, x.get(), mapped, bytes);
    std::vector<float> back(n, 0.0f);
    d->copy_to_host(*s, back.data(), x.get(), bytes);
    s->synchronize();
    EXPECT_TRUE(back == src);
    if (pinned) d->unregister_host(mapped);
    ::munmap(mapped, bytes);
}
#endif

TEST(CudaCopy, RoundTrip2DStridedBlocks) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    const std::size_t rows = 37, cols = 53;  // host matrix, row-major
    const auto host = random_values<float>(rows * cols, 2);
    // Block rows [3, 30) x cols [5, 45) to a device pitch of 64 floats, then to a pitch of 41
    // floats on the device, then back into a zeroed host array of pitch 50 floats.
    const std::size_t r0 = 3, c0 = 5, h = 27, w = 40;
    device_buffer a = d->allocate(h * 64 * sizeof(float)), b = d->allocate(h * 41 * sizeof(float));
    d->copy_2d_to_device(*s, {a.get(), 64 * sizeof(float), host.data() + r0 * cols + c0,
                              cols * sizeof(float), w * sizeof(float), h});
    d->copy_2d_within(*s, {b.get(), 41 * sizeof(float), a.get(), 64 * sizeof(float),
                           w * sizeof(float), h});
    std::vector<float> back(h * 50, 0.0f);
    d->copy_2d_to_host(*s, {back.data(), 50 * sizeof(float), b.get(), 41 * sizeof(float),
                            w * sizeof(float), h});
    s->synchronize();
    for (std::size_t i = 0; i < h; ++i)
        for (std::size_t j = 0; j < 50; ++j)
            ASSERT_EQ(back[i * 50 + j], j < w ? host[(r0 + i) * cols + c0 + j] : 0.0f)
                << "row " << i << " col " << j;

    // One row, and rows back to back, take the 1-D path.
    std::vector<float> row(w, 0.0f);
    d->copy_2d_to_host(*s, {row.data(), 0, b.get(), 41 * sizeof(float), w * sizeof(float), 1});
    s->synchronize();
    for (std::size_t j = 0; j < w; ++j) EXPECT_EQ(row[j], host[r0 * cols + c0 + j]);
    const copy_2d_desc overlapping{b.get(), 4, a.get(), 64 * sizeof(float), 8, 2};  // pitch < width
    EXPECT_THROW(d->copy_2d_within(*s, overlapping), invalid_argument);
}

void expect_peer_round_trip(device& from, device& to) {
    ASSERT_TRUE(from.can_copy_peer(to)) << from.id() << " -> " << to.id();
    auto s = from.create_stream();
    auto t = to.create_stream();
    const std::size_t n = 100003;
    const auto src = random_values<double>(n, 3);
    device_buffer x = from.allocate(n * sizeof(double)), y = to.allocate(n * sizeof(double));
    from.copy_to_device(*s, x.get(), src.data(), n * sizeof(double));
    from.copy_peer(*s, to, y.get(), x.get(), n * sizeof(double));
    s->synchronize();
    std::vector<double> back(n, 0.0);
    to.copy_to_host(*t, back.data(), y.get(), n * sizeof(double));
    t->synchronize();
    EXPECT_EQ(back, src) << from.id() << " -> " << to.id();

    // 2-D: the first 100 columns of 300 rows of pitch 333 doubles into a pitch of 128.
    device_buffer z = to.allocate(300 * 128 * sizeof(double));
    from.copy_2d_peer(*s, to, {z.get(), 128 * sizeof(double), x.get(), 333 * sizeof(double),
                               100 * sizeof(double), 300});
    s->synchronize();
    std::vector<double> block(300 * 128, 0.0);
    to.copy_to_host(*t, block.data(), z.get(), block.size() * sizeof(double));
    t->synchronize();
    for (std::size_t i = 0; i < 300; ++i)
        for (std::size_t j = 0; j < 100; ++j)
            ASSERT_EQ(block[i * 128 + j], src[i * 333 + j]) << from.id() << " -> " << to.id();
}

TEST(CudaCopy, PeerCopiesBetweenSlicesAndGpus) {
    SKIP_WITHOUT_CUDA_GPU();
    auto a = open_gpu(0, 0, 2), b = open_gpu(0, 1, 2);
    expect_peer_round_trip(*a, *b);
    expect_peer_round_trip(*b, *a);
    if (discovery().gpus.size() >= 2) {
        auto g1 = open_gpu(1);
        if (a->can_copy_peer(*g1)) {
            expect_peer_round_trip(*a, *g1);
            expect_peer_round_trip(*g1, *a);
        } else {
            EXPECT_THROW(a->copy_peer(*a->create_stream(), *g1, nullptr, nullptr, 8), invalid_argument);
        }
    }
}

// ------------------------------------------------------------------ streams and events

TEST(CudaStream, EventsOrderStreams) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto producer = d->create_stream(stream_priority::high);
    auto consumer = d->create_stream();
    auto done = d->create_event();
    EXPECT_TRUE(done->ready()) << "an event never recorded is reached";
    done->synchronize();

    const std::size_t n = std::size_t(16) << 20;  // 128 MiB of doubles: long enough to race
    const auto src = random_values<double>(n, 4);
    device_buffer x = d->allocate(n * sizeof(double));
    d->copy_to_device(*producer, x.get(), src.data(), n * sizeof(double));
    done->record(*producer);
    d->wait(*consumer, *done);
    std::vector<double> back(n, 0.0);
    d->copy_to_host(*consumer, back.data(), x.get(), n * sizeof(double));
    consumer->synchronize();
    EXPECT_TRUE(done->ready());
    EXPECT_TRUE(back == src);
    d->synchronize();
}

TEST(CudaStream, HostFunctionsRunInOrderAndTheirErrorsSurfaceAtSynchronize) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    const std::size_t n = 1 << 20;
    const auto src = random_values<float>(n, 5);
    device_buffer x = d->allocate(n * sizeof(float));
    host_staging_buffer pinned = d->allocate_host_staging(n * sizeof(float));
    std::memset(pinned.get(), 0, n * sizeof(float));
    d->copy_to_device(*s, x.get(), src.data(), n * sizeof(float));
    d->copy_to_host(*s, pinned.get(), x.get(), n * sizeof(float));
    bool saw_data = false;
    d->enqueue_host(*s, [&] {
        saw_data = std::memcmp(pinned.get(), src.data(), n * sizeof(float)) == 0;
    }, "check copy");
    d->enqueue_host(*s, [] { throw std::runtime_error("boom"); }, "explode");
    d->enqueue_host(*s, [] { throw std::runtime_error("second"); }, "explode again");
    try {
        s->synchronize();
        FAIL() << "the host function's error was lost";
    } catch (const device_error& e) {
        EXPECT_TRUE(contains(e.what(), "explode")) << e.what();
        EXPECT_TRUE(contains(e.what(), "boom")) << e.what();
        EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
    }
    EXPECT_TRUE(saw_data);
    EXPECT_NO_THROW(s->synchronize()) << "an error is reported once";

    // A tilestream error keeps its type.
    d->enqueue_host(*s, [] { throw out_of_budget("planted"); }, "typed");
    EXPECT_THROW(d->synchronize(), out_of_budget);
}

class foreign_event final : public event {
public:
    void record(stream&) override {}
    void synchronize() override { synchronized = true; }
    bool ready() override { return synchronized; }
    std::function<void()> host_waiter() override {
        return [this] { synchronized = true; };
    }
    bool synchronized = false;
};

TEST(CudaStream, WaitOnAnotherBackendsEventBlocksOnTheHost) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    foreign_event e;
    d->wait(*s, e);
    EXPECT_TRUE(e.synchronized);
}

TEST(CudaStream, EventsOfOneSliceOrderAnother) {
    SKIP_WITHOUT_CUDA_GPU();
    auto a = open_gpu(0, 0, 2), b = open_gpu(0, 1, 2);
    auto sa = a->create_stream(), sb = b->create_stream();
    auto e = a->create_event();
    const std::size_t n = std::size_t(8) << 20;
    const auto src = random_values<float>(n, 6);
    device_buffer x = a->allocate(n * sizeof(float));
    a->copy_to_device(*sa, x.get(), src.data(), n * sizeof(float));
    e->record(*sa);
    b->wait(*sb, *e);
    std::vector<float> back(n, 0.0f);
    b->copy_to_host(*sb, back.data(), x.get(), n * sizeof(float));  // same GPU: same memory
    sb->synchronize();
    EXPECT_TRUE(back == src);
}

// ------------------------------------------------------------------ traces

class span_collector final : public trace_sink {
public:
    struct span {
        std::string device;
        int stream;
        span_kind kind;
        std::string name;
        std::size_t bytes;
        double flops, t0, t1;
    };
    void record(const std::string& device_id, int stream_id, span_kind kind, const std::string& name,
                std::size_t bytes, double flops, double t0, double t1) override {
        std::lock_guard lock(mutex);
        spans.push_back({device_id, stream_id, kind, name, bytes, flops, t0, t1});
    }
    std::mutex mutex;
    std::vector<span> spans;
};

TEST(CudaTrace, SpansCoverCopiesKernelsAndHostFunctions) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    span_collector sink;
    d->set_trace_sink(&sink);
    const index_t m = 300, n = 200, k = 100;
    const auto a = random_values<float>(m * k, 7), b = random_values<float>(k * n, 8);
    device_buffer da = d->allocate(a.size() * 4), db = d->allocate(b.size() * 4),
                  dc = d->allocate(m * n * 4);
    const double before = trace_clock_seconds();
    d->copy_to_device(*s, da.get(), a.data(), a.size() * 4);
    d->copy_to_device(*s, db.get(), b.data(), b.size() * 4);
    gemm_call g;
    g.m = m, g.n = n, g.k = k, g.a = da.get(), g.lda = k, g.b = db.get(), g.ldb = n;
    g.c = dc.get(), g.ldc = n, g.kernel = gemm_kernel::tiled;
    d->gemm(*s, g);
    d->enqueue_host(*s, [] {}, "marker");
    std::vector<float> c(m * n);
    d->copy_to_host(*s, c.data(), dc.get(), c.size() * 4);
    s->synchronize();
    const double after = trace_clock_seconds();
    d->set_trace_sink(nullptr);

    std::lock_guard lock(sink.mutex);
    ASSERT_EQ(sink.spans.size(), 5u);
    std::vector<span_kind> kinds;
    for (const auto& sp : sink.spans) kinds.push_back(sp.kind);
    for (span_kind k2 : {span_kind::copy_h2d, span_kind::kernel, span_kind::host, span_kind::copy_d2h})
        EXPECT_NE(std::find(kinds.begin(), kinds.end(), k2), kinds.end()) << to_string(k2);
    auto spans = sink.spans;
    std::sort(spans.begin(), spans.end(), [](const auto& x, const auto& y) { return x.t0 < y.t0; });
    for (std::size_t i = 0; i < spans.size(); ++i) {
        const auto& sp = spans[i];
        EXPECT_EQ(sp.device, "cuda:0");
        EXPECT_EQ(sp.stream, s->id());
        EXPECT_LE(sp.t0, sp.t1) << sp.name;
        EXPECT_GE(sp.t0, before - 1e-3) << sp.name;  // the anchor is good to a few microseconds
        EXPECT_LE(sp.t1, after + 1e-3) << sp.name;
        if (i > 0) {
            EXPECT_GE(sp.t0, spans[i - 1].t1 - 1e-4) << "one stream runs in order";
        }
        if (sp.kind == span_kind::kernel) {
            EXPECT_EQ(sp.flops, g.flops());
        }
        if (sp.kind == span_kind::copy_d2h) {
            EXPECT_EQ(sp.bytes, c.size() * 4);
        }
    }
}

// ------------------------------------------------------------------ GEMM

struct gemm_case {
    dtype type = dtype::f32;
    gemm_kernel kernel = gemm_kernel::tiled;
    math_mode math = math_mode::strict;
    index_t m = 1, n = 1, k = 1;
    op op_a = op::n, op_b = op::n;
    layout la = layout::row_major, lb = layout::row_major, lc = layout::row_major;
    bool aligned = true;  // leading dimensions a multiple of 8 (else odd)
    bool minimal_ld = false;  // leading dimensions exactly the stored row/column length (no padding)
    double alpha = 1.0, beta = 0.0;

    std::string name() const {
        return std::string(to_string(kernel)) + "-" + std::string(to_string(type)) +
               (math == math_mode::tf32 ? "-tf32" : "") + "-" + std::to_string(m) + "x" +
               std::to_string(n) + "x" + std::to_string(k) + "-" + std::string(to_string(op_a)) +
               std::string(to_string(op_b)) + "-" + (la == layout::row_major ? "r" : "c") +
               (lb == layout::row_major ? "r" : "c") + (lc == layout::row_major ? "r" : "c") +
               (minimal_ld ? "-minld" : aligned ? "-aligned" : "-odd") + "-a" + std::to_string(alpha) + "-b" +
               std::to_string(beta);
    }
};

// A stored matrix: rows x cols with a layout and a leading dimension (padded past the minimum).
struct stored_shape {
    index_t rows, cols, ld;
    layout l;
    index_t elements() const { return (l == layout::row_major ? rows : cols) * ld; }
};

stored_shape make_shape(index_t rows, index_t cols, layout l, bool aligned, bool minimal) {
    const index_t min_ld = std::max<index_t>(1, l == layout::row_major ? cols : rows);
    const index_t ld = minimal ? min_ld
                       : aligned ? (min_ld + 7) / 8 * 8 + 8
                                 : min_ld + (min_ld % 2 == 0 ? 1 : 2);
    return {rows, cols, ld, l};
}

template <class T>
void dump_failure(const gemm_case& c, const stored_shape& sa, const std::vector<T>& a,
                  const stored_shape& sb, const std::vector<T>& b, const stored_shape& sc,
                  const std::vector<T>& c_in, const std::vector<T>& c_out, const std::vector<T>& c_ref,
                  std::string& where) {
    try {
        const auto dir = std::filesystem::temp_directory_path() / ("tilestream-cuda-" + c.name());
        std::filesystem::create_directories(dir);
        auto put = [&](const char* file, const stored_shape& s, const std::vector<T>& v) {
            write_npy<T>((dir / file).string(),
                         host_matrix_view<const T>(v.data(), s.rows, s.cols, s.l, s.ld));
        };
        put("a.npy", sa, a);
        put("b.npy", sb, b);
        put("c_in.npy", sc, c_in);
        put("c_gpu.npy", sc, c_out);
        put("c_reference.npy", sc, c_ref);
        where = "operands dumped to " + dir.string();
    } catch (const std::exception& e) {
        where = std::string("could not dump the operands: ") + e.what();
    }
}

// Runs one case on the GPU and against the reference; returns "" or what went wrong.
// Error bound per element: tol * (|alpha| sum_p |a_ip b_pj| + |beta c_ij|), with tol from the
// accumulation length (fp32/fp64) or TF32's 10-bit inputs.
template <class T>
std::string run_gemm_case(device& dev, stream& s, const gemm_case& c) {
    const index_t rows_a = c.op_a == op::n ? c.m : c.k, cols_a = c.op_a == op::n ? c.k : c.m;
    const index_t rows_b = c.op_b == op::n ? c.k : c.n, cols_b = c.op_b == op::n ? c.n : c.k;
    const stored_shape sa = make_shape(rows_a, cols_a, c.la, c.aligned, c.minimal_ld);
    const stored_shape sb = make_shape(rows_b, cols_b, c.lb, c.aligned, c.minimal_ld);
    const stored_shape sc = make_shape(c.m, c.n, c.lc, c.aligned, c.minimal_ld);
    const std::uint64_t seed = std::hash<std::string>{}(c.name());
    std::vector<T> a = random_values<T>(std::size_t(sa.elements()), seed);
    std::vector<T> b = random_values<T>(std::size_t(sb.elements()), seed + 1);
    std::vector<T> c_in = random_values<T>(std::size_t(sc.elements()), seed + 2);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    // Operands that must not be read are NaN: reading them shows in C.
    if (c.alpha == 0.0) std::fill(a.begin(), a.end(), nan), std::fill(b.begin(), b.end(), nan);
    if (c.beta == 0.0) std::fill(c_in.begin(), c_in.end(), nan);

    gemm_call g;
    g.type = dtype_of<T>();
    g.op_a = c.op_a, g.op_b = c.op_b;
    g.m = c.m, g.n = c.n, g.k = c.k;
    g.alpha = c.alpha, g.beta = c.beta;
    g.lda = sa.ld, g.layout_a = sa.l;
    g.ldb = sb.ld, g.layout_b = sb.l;
    g.ldc = sc.ld, g.layout_c = sc.l;
    g.kernel = c.kernel;
    g.math = c.math;

    device_buffer da = dev.allocate(a.size() * sizeof(T)), db = dev.allocate(b.size() * sizeof(T)),
                  dc = dev.allocate(c_in.size() * sizeof(T));
    dev.copy_to_device(s, da.get(), a.data(), a.size() * sizeof(T));
    dev.copy_to_device(s, db.get(), b.data(), b.size() * sizeof(T));
    dev.copy_to_device(s, dc.get(), c_in.data(), c_in.size() * sizeof(T));
    g.a = da.get(), g.b = db.get(), g.c = dc.get();
    dev.gemm(s, g);
    std::vector<T> c_out(c_in.size());
    dev.copy_to_host(s, c_out.data(), dc.get(), c_out.size() * sizeof(T));
    s.synchronize();

    std::vector<T> c_ref = c_in;
    g.a = a.data(), g.b = b.data(), g.c = c_ref.data();
    reference::gemm(g);
    // The bound: the same product on absolute values.
    std::vector<T> abs_a(a.size()), abs_b(b.size()), bound(c_in.size());
    for (std::size_t i = 0; i < a.size(); ++i) abs_a[i] = std::abs(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) abs_b[i] = std::abs(b[i]);
    for (std::size_t i = 0; i < c_in.size(); ++i) bound[i] = std::abs(c_in[i]);
    g.a = abs_a.data(), g.b = abs_b.data(), g.c = bound.data();
    g.alpha = std::abs(c.alpha), g.beta = std::abs(c.beta);
    reference::gemm(g);

    const double eps = std::numeric_limits<T>::epsilon();
    double tol = 2.0 * double(c.k + 2) * eps;
    if (c.math == math_mode::tf32 && c.type == dtype::f32 && c.kernel == gemm_kernel::vendor)
        tol += std::ldexp(1.0, -9);  // inputs rounded to 10-bit mantissas (or truncated)
    std::size_t bad = 0;
    std::string first;
    for (index_t i = 0; i < c.m; ++i) {
        for (index_t j = 0; j < c.n; ++j) {
            const std::size_t at = std::size_t(sc.l == layout::row_major ? i * sc.ld + j : j * sc.ld + i);
            const double got = c_out[at], want = c_ref[at];
            const double limit = tol * double(bound[at]) + 1e-30;
            if (!(std::abs(got - want) <= limit)) {
                if (bad++ == 0)
                    first = "C(" + std::to_string(i) + ", " + std::to_string(j) + ") = " +
                            std::to_string(got) + ", reference " + std::to_string(want) +
                            ", allowed error " + std::to_string(limit);
            }
        }
    }
    // Padding between columns/rows of C is never written.
    for (std::size_t at = 0; at < c_in.size(); ++at) {
        const index_t inner = index_t(at) % sc.ld;
        const bool inside = inner < (sc.l == layout::row_major ? c.n : c.m);
        if (!inside && std::memcmp(&c_out[at], &c_in[at], sizeof(T)) != 0) {
            if (bad++ == 0) first = "padding of C at " + std::to_string(at) + " was written";
        }
    }
    if (bad == 0) return {};
    std::string where;
    dump_failure(c, sa, a, sb, b, sc, c_in, c_out, c_ref, where);
    return c.name() + ": " + std::to_string(bad) + " bad elements; first " + first + "; " + where;
}

std::string run_case(device& dev, stream& s, const gemm_case& c) {
    return c.type == dtype::f32 ? run_gemm_case<float>(dev, s, c) : run_gemm_case<double>(dev, s, c);
}

// Every op and layout combination, both dtypes, aligned and odd leading dimensions.
void check_all_layouts(gemm_kernel kernel, index_t m, index_t n, index_t k,
                       std::vector<bool> alignments) {
    auto d = open_gpu();
    auto s = d->create_stream();
    struct layouts {
        layout a, b, c;
    };
    const layouts sets[] = {{layout::row_major, layout::row_major, layout::row_major},
                            {layout::col_major, layout::col_major, layout::col_major},
                            {layout::row_major, layout::col_major, layout::col_major},
                            {layout::col_major, layout::row_major, layout::row_major}};
    for (dtype t : {dtype::f32, dtype::f64})
        for (op oa : {op::n, op::t})
            for (op ob : {op::n, op::t})
                for (const layouts& l : sets)
                    for (bool aligned : alignments) {
                        gemm_case c;
                        c.type = t, c.kernel = kernel, c.m = m, c.n = n, c.k = k;
                        c.op_a = oa, c.op_b = ob, c.la = l.a, c.lb = l.b, c.lc = l.c;
                        c.aligned = aligned;
                        c.alpha = 1.25, c.beta = -0.5;
                        const std::string err = run_case(*d, *s, c);
                        EXPECT_TRUE(err.empty()) << err;
                    }
}

// Larger than a tile in m and n (128 for f32, 64 for f64), a ragged k.
TEST(CudaGemm, TiledMatchesReferenceForEveryLayout) {
    SKIP_WITHOUT_CUDA_GPU();
    check_all_layouts(gemm_kernel::tiled, 257, 131, 75, {true, false});
}

TEST(CudaGemm, NaiveMatchesReferenceForEveryLayout) {
    SKIP_WITHOUT_CUDA_GPU();
    check_all_layouts(gemm_kernel::naive, 131, 67, 59, {false});
}

TEST(CudaGemm, VendorMatchesReferenceForEveryLayout) {
    SKIP_WITHOUT_CUDA_GPU();
    check_all_layouts(gemm_kernel::vendor, 257, 131, 75, {true, false});
}

// alpha == 0 never reads A or B, beta == 0 never reads C (both poisoned with NaN), k == 0 scales C.
TEST(CudaGemm, AlphaAndBetaFollowBlasSemantics) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    for (gemm_kernel kernel : {gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor})
        for (dtype t : {dtype::f32, dtype::f64})
            for (auto [alpha, beta] : {std::pair{0.0, 0.5}, {1.5, 0.0}, {-0.75, 1.25}, {0.0, 0.0}})
                for (index_t k : {index_t(0), index_t(33)}) {
                    gemm_case c;
                    c.type = t, c.kernel = kernel, c.m = 67, c.n = 45, c.k = k;
                    c.op_a = op::t, c.lb = layout::col_major;
                    c.alpha = alpha, c.beta = beta;
                    const std::string err = run_case(*d, *s, c);
                    EXPECT_TRUE(err.empty()) << err;
                }
}

TEST(CudaGemm, EmptyProductsAreNoOps) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    for (gemm_kernel kernel : {gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor}) {
        gemm_call g;
        g.kernel = kernel;
        g.m = 0, g.n = 5, g.k = 3;  // nothing to compute, null pointers are fine
        EXPECT_NO_THROW(d->gemm(*s, g));
        g.m = 5, g.n = 0;
        EXPECT_NO_THROW(d->gemm(*s, g));
    }
    s->synchronize();
    gemm_call g;
    g.kernel = gemm_kernel::reference;
    g.m = g.n = g.k = 1;
    EXPECT_THROW(d->gemm(*s, g), invalid_argument);
    g.kernel = gemm_kernel::tiled;
    g.m = g.n = g.k = 4, g.lda = 2;  // too small for a 4x4 row-major A
    device_buffer x = d->allocate(256);
    g.a = g.b = g.c = x.get(), g.ldb = g.ldc = 4;
    EXPECT_THROW(d->gemm(*s, g), invalid_argument);
}

// Small shapes, also for the sanitizer runs (memcheck on all kernels, racecheck on ours).
void check_small_shapes(gemm_kernel kernel) {
    auto d = open_gpu();
    auto s = d->create_stream();
    struct shape {
        index_t m, n, k;
    };
    for (dtype t : {dtype::f32, dtype::f64})
        for (shape sh : {shape{1, 1, 1}, shape{5, 3, 2}, shape{33, 17, 19}, shape{130, 129, 9}})
            for (bool aligned : {true, false}) {
                gemm_case c;
                c.type = t, c.kernel = kernel, c.m = sh.m, c.n = sh.n, c.k = sh.k;
                c.op_b = op::t, c.lc = aligned ? layout::row_major : layout::col_major;
                c.aligned = aligned, c.alpha = 0.5, c.beta = 2.0;
                const std::string err = run_case(*d, *s, c);
                EXPECT_TRUE(err.empty()) << err;
            }
}

// Minimal leading dimensions with single rows and columns (n = 1, m = 1, k = 1) and tiles of C whose
// last row or column of tiles is one wide (129 = 128 + 1 for f32, 65 = 64 + 1 for f64): the calls
// for which cuBLAS's leading-dimension rules once refused the mapped operands (issue 17).
void check_minimal_ld_shapes(gemm_kernel kernel) {
    auto d = open_gpu();
    auto s = d->create_stream();
    struct shape {
        index_t m, n, k;
    };
    std::vector<shape> shapes;
    for (index_t m : {1, 2, 3})
        for (index_t n : {1, 2, 3})
            for (index_t k : {1, 2, 3}) shapes.push_back({m, n, k});
    for (shape sh : {shape{31, 1, 17}, shape{1, 29, 3}, shape{129, 1, 7}, shape{1, 65, 9},
                     shape{129, 65, 9}, shape{65, 129, 17}})
        shapes.push_back(sh);
    for (dtype t : {dtype::f32, dtype::f64})
        for (int ops = 0; ops < 4; ++ops)
            for (int layouts = 0; layouts < 8; ++layouts)
                for (shape sh : shapes) {
                    gemm_case c;
                    c.type = t, c.kernel = kernel, c.m = sh.m, c.n = sh.n, c.k = sh.k;
                    c.op_a = ops & 1 ? op::t : op::n, c.op_b = ops & 2 ? op::t : op::n;
                    c.la = layouts & 1 ? layout::col_major : layout::row_major;
                    c.lb = layouts & 2 ? layout::col_major : layout::row_major;
                    c.lc = layouts & 4 ? layout::col_major : layout::row_major;
                    c.minimal_ld = true, c.aligned = false, c.alpha = -1.5, c.beta = 0.5;
                    const std::string err = run_case(*d, *s, c);
                    EXPECT_TRUE(err.empty()) << err;
                }
}

TEST(CudaGemm, VendorMinimalLeadingDimensionsMatchReference) {
    SKIP_WITHOUT_CUDA_GPU();
    check_minimal_ld_shapes(gemm_kernel::vendor);
}

TEST(CudaGemm, TiledMinimalLeadingDimensionsMatchReference) {
    SKIP_WITHOUT_CUDA_GPU();
    check_minimal_ld_shapes(gemm_kernel::tiled);
}

TEST(CudaGemm, NaiveMinimalLeadingDimensionsMatchReference) {
    SKIP_WITHOUT_CUDA_GPU();
    check_minimal_ld_shapes(gemm_kernel::naive);
}

TEST(CudaGemm, NaiveSmallShapesMatchReference) {
    SKIP_WITHOUT_CUDA_GPU();
    check_small_shapes(gemm_kernel::naive);
}

TEST(CudaGemm, TiledSmallShapesMatchReference) {
    SKIP_WITHOUT_CUDA_GPU();
    check_small_shapes(gemm_kernel::tiled);
}

TEST(CudaGemm, VendorSmallShapesMatchReference) {
    SKIP_WITHOUT_CUDA_GPU();
    check_small_shapes(gemm_kernel::vendor);
}

// Whole tiles with 16-byte loads and many k-tiles (the fast path of the tiled kernel).
TEST(CudaGemm, LargeAlignedProductsMatchReference) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    for (gemm_kernel kernel : {gemm_kernel::tiled, gemm_kernel::vendor})
        for (dtype t : {dtype::f32, dtype::f64}) {
            gemm_case c;
            c.type = t, c.kernel = kernel, c.m = 512, c.n = 384, c.k = 640;
            c.alpha = 1.0, c.beta = 1.0;
            const std::string err = run_case(*d, *s, c);
            EXPECT_TRUE(err.empty()) << err;
        }
}

TEST(CudaGemm, Tf32VendorIsWithinTf32Tolerance) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    for (op oa : {op::n, op::t}) {
        gemm_case c;
        c.type = dtype::f32, c.kernel = gemm_kernel::vendor, c.math = math_mode::tf32;
        c.m = 300, c.n = 260, c.k = 520, c.op_a = oa;
        const std::string err = run_case(*d, *s, c);
        EXPECT_TRUE(err.empty()) << err;
    }
}

// 1 + 2^-12 is exact in fp32 and lost in TF32: strict f32 must keep it, for every kernel.
TEST(CudaGemm, StrictF32NeverRoundsToTf32) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    const index_t m = 256, n = 256, k = 64;
    const std::vector<float> a(m * k, 1.0f + std::ldexp(1.0f, -12)), b(k * n, 1.0f);
    device_buffer da = d->allocate(a.size() * 4), db = d->allocate(b.size() * 4),
                  dc = d->allocate(m * n * 4);
    d->copy_to_device(*s, da.get(), a.data(), a.size() * 4);
    d->copy_to_device(*s, db.get(), b.data(), b.size() * 4);
    for (gemm_kernel kernel : {gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor}) {
        gemm_call g;
        g.m = m, g.n = n, g.k = k, g.a = da.get(), g.lda = k, g.b = db.get(), g.ldb = n;
        g.c = dc.get(), g.ldc = n, g.kernel = kernel;
        d->gemm(*s, g);
        std::vector<float> c(m * n, 0.0f);
        d->copy_to_host(*s, c.data(), dc.get(), c.size() * 4);
        s->synchronize();
        const float want = 64.0f + 64.0f * std::ldexp(1.0f, -12);  // exact in fp32
        EXPECT_EQ(std::count(c.begin(), c.end(), want), std::ptrdiff_t(c.size()))
            << to_string(kernel) << ": C(0,0) = " << c[0];
    }
}

// ------------------------------------------------------------------ Jacobi

template <class T>
void check_jacobi(device& d, stream& s, index_t rows, index_t ld, index_t r0,
                  index_t r1, index_t c0, index_t c1, bool residual) {
    const std::string what = std::string(to_string(dtype_of<T>())) + " ld " + std::to_string(ld) +
                             " rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
                             ") cols [" + std::to_string(c0) + ", " + std::to_string(c1) + ")";
    std::vector<T> in = random_values<T>(std::size_t(rows * ld), std::uint64_t(ld * 131 + c0));
    std::vector<T> out_ref(in.size(), T(7777)), out_gpu(in.size(), T(0));
    device_buffer din = d.allocate(in.size() * sizeof(T)), dout = d.allocate(in.size() * sizeof(T)),
                  dres = d.allocate(sizeof(double));
    d.copy_to_device(s, din.get(), in.data(), in.size() * sizeof(T));
    d.copy_to_device(s, dout.get(), out_ref.data(), in.size() * sizeof(T));  // poison
    const double zero = 0.0;
    d.copy_to_device(s, dres.get(), &zero, sizeof zero);
    jacobi_call j;
    j.type = dtype_of<T>();
    j.in = din.get(), j.out = dout.get(), j.ld = ld;
    j.row_begin = r0, j.row_end = r1, j.col_begin = c0, j.col_end = c1;
    j.residual = residual ? static_cast<double*>(dres.get()) : nullptr;
    d.jacobi_sweep(s, j);
    d.copy_to_host(s, out_gpu.data(), dout.get(), in.size() * sizeof(T));
    double res_gpu = 0;
    d.copy_to_host(s, &res_gpu, dres.get(), sizeof res_gpu);
    s.synchronize();

    double res_ref = 0;
    j.in = in.data(), j.out = out_ref.data(), j.residual = residual ? &res_ref : nullptr;
    reference::jacobi_sweep(j);
    index_t mismatches = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
        if (std::memcmp(&out_gpu[i], &out_ref[i], sizeof(T)) != 0 && mismatches++ == 0)
            ADD_FAILURE() << what << ": first difference at row " << index_t(i) / ld << " col "
                          << index_t(i) % ld << ": " << out_gpu[i] << " vs " << out_ref[i];
    EXPECT_EQ(mismatches, 0) << what;
    if (residual) {
        EXPECT_GT(res_ref, 0.0);
        EXPECT_NEAR(res_gpu, res_ref, 1e-12 * res_ref) << what;
    } else {
        EXPECT_EQ(res_gpu, 0.0) << what;
    }
}

TEST(CudaJacobi, MatchesReferenceBitwise) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    // ld 136 (16-byte rows: vector path) and 133 (scalar path); whole interiors and odd ranges.
    for (index_t ld : {index_t(136), index_t(133)})
        for (bool residual : {true, false}) {
            check_jacobi<float>(*d, *s, 70, ld, 1, 69, 1, 129, residual);
            check_jacobi<double>(*d, *s, 70, ld, 1, 69, 1, 129, residual);
            check_jacobi<float>(*d, *s, 70, ld, 3, 50, 5, 97, residual);
            check_jacobi<double>(*d, *s, 70, ld, 3, 50, 6, 7, residual);
            check_jacobi<float>(*d, *s, 9, ld, 1, 8, 4, 8, residual);  // one whole group
        }
    // Tall enough for the row loop to wrap the grid (65535 blocks of 8 rows) is too big for a
    // test; a big square sweep covers many blocks instead.
    check_jacobi<float>(*d, *s, 1030, 1032, 1, 1029, 1, 1029, true);
}

TEST(CudaJacobi, RejectsRangesWithoutAHalo) {
    SKIP_WITHOUT_CUDA_GPU();
    auto d = open_gpu();
    auto s = d->create_stream();
    device_buffer a = d->allocate(64 * 64 * 4), b = d->allocate(64 * 64 * 4);
    jacobi_call j;
    j.in = a.get(), j.out = b.get(), j.ld = 64;
    j.row_begin = 0, j.row_end = 10, j.col_begin = 1, j.col_end = 10;
    EXPECT_THROW(d->jacobi_sweep(*s, j), invalid_argument);
    j.row_begin = 1, j.col_end = 64;
    EXPECT_THROW(d->jacobi_sweep(*s, j), invalid_argument);
    j.col_end = 63, j.out = a.get();
    EXPECT_THROW(d->jacobi_sweep(*s, j), invalid_argument);
}

}  // namespace
