// What is specific to the OpenCL backend: discovery and specs, allocation limits, device
// addresses, 2-D copies inside the device, events across backends (the record current at wait()),
// trace spans, the on-disk program cache and the compiler log of a failed build.
#include "test_support.hpp"

#ifdef TILESTREAM_HAVE_OPENCL
#include "backends/opencl/opencl_runtime.hpp"
#endif

#include <tilestream/devices.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include <unistd.h>

namespace tilestream {
namespace {

#define SKIP_WITHOUT_OPENCL()                                   \
    do {                                                        \
        std::string why_;                                       \
        if (::tilestream::testing::gpu_missing("opencl", why_)) \
            GTEST_SKIP() << why_;                               \
    } while (0)

TEST(opencl_discovery, ListsEveryDeviceWithItsFactsAndOneStatusLine) {
    SKIP_WITHOUT_OPENCL();
    const auto& inv = inventory();
    EXPECT_EQ(inv.opencl_status.find('\n'), std::string::npos) << inv.opencl_status;
    ASSERT_FALSE(inv.opencl_devices.empty()) << "no OpenCL device (CI has PoCL): " << inv.opencl_status;
    for (std::size_t i = 0; i < inv.opencl_devices.size(); ++i) {
        const auto& d = inv.opencl_devices[i];
        EXPECT_EQ(d.id, "opencl:" + std::to_string(i));
        EXPECT_EQ(d.kind, device_kind::opencl);
        EXPECT_FALSE(d.name.empty());
        EXPECT_FALSE(d.platform.empty());
        EXPECT_FALSE(d.driver.empty());
        EXPECT_GT(d.memory_bytes, 0u);
        EXPECT_GT(d.local_memory, 0u);
        EXPECT_GT(d.threads, 0);
        EXPECT_EQ(d.emulated, d.device_type == "CPU");
    }
    // `all` never takes an emulated (CPU) OpenCL device: the host's cores are taken once, as cpu.
    for (const auto& d : open_devices("all")) {
        if (d->info().kind == device_kind::opencl) EXPECT_FALSE(d->info().emulated) << d->id();
    }
    EXPECT_NE(describe_present_devices().find("opencl:0"), std::string::npos);
}

TEST(opencl_spec, ParsesIndexSlicesAndBudget) {
    const auto r = parse_device_spec("opencl:0, opencl:1x3@64MiB");
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].kind, device_request::what::opencl);
    EXPECT_EQ(r[0].index, 0);
    EXPECT_EQ(r[0].slices, 1);
    EXPECT_EQ(r[1].index, 1);
    EXPECT_EQ(r[1].slices, 3);
    EXPECT_EQ(r[1].budget.value(), std::size_t(64) << 20);
    for (const char* bad : {"opencl:", "opencl:x", "opencl:0x0", "opencl:-1", "opencl:0x"})
        EXPECT_THROW(parse_device_spec(bad), invalid_argument) << bad;
}

TEST(opencl_spec, LogicalSlicesSplitTheDeviceAndUnknownIndicesListWhatIsPresent) {
    SKIP_WITHOUT_OPENCL();
    auto devs = open_devices("opencl:0x3");
    ASSERT_EQ(devs.size(), 3u);
    const auto& whole = inventory().opencl_devices.at(0);
    for (int s = 0; s < 3; ++s) {
        EXPECT_EQ(devs[s]->id(), "opencl:0." + std::to_string(s));
        EXPECT_EQ(devs[s]->info().memory_bytes, whole.memory_bytes / 3);
        EXPECT_LE(devs[s]->budget(), devs[s]->info().memory_bytes);
        EXPECT_FALSE(devs[s]->host_addressable());
    }
    EXPECT_TRUE(devs[0]->can_copy_peer(*devs[1]));  // one context: direct copies
    try {
        open_devices("opencl:" + std::to_string(inventory().opencl_devices.size()));
        FAIL() << "opened a device that does not exist";
    } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("opencl:0 ("), std::string::npos) << e.what();
    }
}

TEST(opencl_device, AllocationsBeyondTheLargestBufferNameTheLimit) {
    SKIP_WITHOUT_OPENCL();
    open_options o;
    o.memory_budget = std::size_t(1) << 50;  // the budget allows it, the device does not
    auto devs = open_devices("opencl:0", o);
    try {
        auto b = devs[0]->allocate(std::size_t(1) << 49);
        FAIL() << "a 512 TiB buffer was created";
    } catch (const out_of_budget& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("opencl:0"), std::string::npos) << w;
        EXPECT_NE(w.find("CL_DEVICE_MAX_MEM_ALLOC_SIZE"), std::string::npos) << w;
    }
    EXPECT_EQ(devs[0]->bytes_in_use(), 0u);
}

TEST(opencl_device, OffsetPointersAnd2DCopiesInsideTheDevice) {
    SKIP_WITHOUT_OPENCL();
    auto devs = open_devices("opencl:0");
    device& d = *devs[0];
    std::vector<float> host(12 * 10);
    std::iota(host.begin(), host.end(), 1.f);
    auto a = d.allocate(host.size() * sizeof(float));
    auto b = d.allocate(host.size() * sizeof(float));
    auto s = d.create_stream();
    d.copy_to_device(*s, a.get(), host.data(), host.size() * sizeof(float));
    std::vector<float> zeros(host.size(), 0.f), back(host.size(), -1.f);
    d.copy_to_device(*s, b.get(), zeros.data(), zeros.size() * sizeof(float));
    // A 4x3 block at (2, 5) of the 12x10 matrix in a, to (1, 1) of b with b's pitch 10 too.
    copy_2d_desc c{b.as<float>() + 1 * 10 + 1, 10 * sizeof(float), a.as<float>() + 2 * 10 + 5, 10 * sizeof(float),
                   3 * sizeof(float), 4};
    d.copy_2d_within(*s, c);
    d.copy_to_host(*s, back.data(), b.get(), back.size() * sizeof(float));
    s->synchronize();
    for (int r = 0; r < 12; ++r)
        for (int col = 0; col < 10; ++col) {
            const bool inside = r >= 1 && r < 5 && col >= 1 && col < 4;
            EXPECT_EQ(back[r * 10 + col], inside ? host[(r + 1) * 10 + col + 4] : 0.f) << r << "," << col;
        }
    // Past the end of a buffer, or not a device address at all: named, not a crash.
    EXPECT_THROW(d.copy_to_host(*s, back.data(), a.as<float>() + 100, 40 * sizeof(float)), invalid_argument);
    EXPECT_THROW(d.copy_to_host(*s, back.data(), host.data(), 4), invalid_argument);
}

TEST(opencl_device, WaitOnACpuEventHonoursTheRecordCurrentAtWait) {
    SKIP_WITHOUT_OPENCL();
    auto devs = open_devices("cpu,opencl:0");
    device& cpu = *devs[0];
    device& ocl = *devs[1];
    auto cs = cpu.create_stream();
    auto os = ocl.create_stream();
    std::atomic<bool> first{false}, second{false};
    const auto gate = [](std::atomic<bool>& flag) {
        return [&flag] {
            while (!flag.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        };
    };
    cpu.enqueue_host(*cs, gate(first), "first gate");
    auto e = cpu.create_event();
    e->record(*cs);
    ocl.wait(*os, *e);
    // Recorded again after the wait was queued: the OpenCL stream must not wait for this point.
    cpu.enqueue_host(*cs, gate(second), "second gate");
    e->record(*cs);

    std::vector<int> host(1024, 5), back(1024, 0);
    auto buf = ocl.allocate(host.size() * sizeof(int));
    ocl.copy_to_device(*os, buf.get(), host.data(), host.size() * sizeof(int));
    ocl.copy_to_host(*os, back.data(), buf.get(), host.size() * sizeof(int));
    auto done = ocl.create_event();
    done->record(*os);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(done->ready()) << "the OpenCL stream ran before the CPU event was reached";
    first = true;
    const auto t0 = std::chrono::steady_clock::now();
    while (!done->ready() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(done->ready()) << "the OpenCL stream waited for a record made after its wait()";
    EXPECT_FALSE(e->ready());
    second = true;
    os->synchronize();
    cs->synchronize();
    EXPECT_EQ(back, host);
}

TEST(opencl_device, CpuStreamWaitsForAnOpenCLEvent) {
    SKIP_WITHOUT_OPENCL();
    auto devs = open_devices("opencl:0,cpu");
    device& ocl = *devs[0];
    device& cpu = *devs[1];
    auto os = ocl.create_stream();
    auto cs = cpu.create_stream();
    std::atomic<bool> open{false};
    ocl.enqueue_host(*os, [&] {
        while (!open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }, "gate");
    auto e = ocl.create_event();
    e->record(*os);
    std::atomic<bool> ran{false};
    cpu.wait(*cs, *e);
    cpu.enqueue_host(*cs, [&] { ran = true; }, "after");
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_FALSE(ran.load());
    open = true;
    cs->synchronize();
    EXPECT_TRUE(ran.load());
    EXPECT_TRUE(e->ready());
}

struct span_log final : trace_sink {
    std::mutex m;
    std::vector<std::pair<span_kind, double>> spans;  // kind, duration
    void record(const std::string&, int, span_kind kind, const std::string&, std::size_t, double, double t0,
                double t1) override {
        std::lock_guard lock(m);
        spans.emplace_back(kind, t1 - t0);
    }
};

TEST(opencl_device, ProfiledQueuesGiveTraceSpans) {
    SKIP_WITHOUT_OPENCL();
    auto devs = open_devices("opencl:0");
    device& d = *devs[0];
    span_log log;
    d.set_trace_sink(&log);
    std::vector<float> host(4096, 1.f);
    auto buf = d.allocate(host.size() * sizeof(float));
    auto s = d.create_stream();
    d.copy_to_device(*s, buf.get(), host.data(), host.size() * sizeof(float));
    d.copy_to_host(*s, host.data(), buf.get(), host.size() * sizeof(float));
    s->synchronize();
    d.set_trace_sink(nullptr);
    ASSERT_EQ(log.spans.size(), 2u);
    EXPECT_EQ(log.spans[0].first, span_kind::copy_h2d);
    EXPECT_EQ(log.spans[1].first, span_kind::copy_d2h);
    for (const auto& [kind, seconds] : log.spans) {
        EXPECT_GE(seconds, 0.0);
        EXPECT_LT(seconds, 60.0);
    }
}

#ifdef TILESTREAM_HAVE_OPENCL
/// Points TILESTREAM_OPENCL_CACHE at a fresh folder for one test.
class scoped_cache_folder {
public:
    scoped_cache_folder() {
        path_ = std::filesystem::temp_directory_path() /
                ("tilestream-opencl-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
        std::filesystem::remove_all(path_);
        if (const char* old = std::getenv("TILESTREAM_OPENCL_CACHE")) old_ = old;
        setenv("TILESTREAM_OPENCL_CACHE", path_.c_str(), 1);
    }
    ~scoped_cache_folder() {
        if (old_) setenv("TILESTREAM_OPENCL_CACHE", old_->c_str(), 1);
        else unsetenv("TILESTREAM_OPENCL_CACHE");
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::filesystem::path& path() const { return path_; }

private:
    static inline int counter_ = 0;
    std::filesystem::path path_;
    std::optional<std::string> old_;
};

TEST(opencl_programs, SecondBuildComesFromTheDiskCache) {
    SKIP_WITHOUT_OPENCL();
    scoped_cache_folder folder;
    EXPECT_EQ(opencl::program_cache_folder(), folder.path().string());
    const std::string source = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }\n";
    const std::string options = "-DTEST_PID=" + std::to_string(::getpid());
    const auto before = opencl::current_program_stats();
    opencl::program(0, "test_twice", source, options);
    auto after = opencl::current_program_stats();
    EXPECT_EQ(after.compiled, before.compiled + 1);
    std::size_t files = 0;
    for (const auto& f : std::filesystem::directory_iterator(folder.path())) files += f.path().extension() == ".bin";
    EXPECT_EQ(files, 1u);
    opencl::program(0, "test_twice", source, options);  // this process already has it
    EXPECT_EQ(opencl::current_program_stats().from_memory, after.from_memory + 1);
    opencl::forget_programs_in_memory();
    opencl::program(0, "test_twice", source, options);  // as a new process would: from the disk
    const auto last = opencl::current_program_stats();
    EXPECT_EQ(last.from_disk, after.from_disk + 1);
    EXPECT_EQ(last.compiled, after.compiled);
}

TEST(opencl_programs, BuildFailureShowsTheCompilerLog) {
    SKIP_WITHOUT_OPENCL();
    scoped_cache_folder folder;
    try {
        opencl::program(0, "test_broken", "__kernel void broken(__global float* x) { x[0] = undeclared_name; }\n", "");
        FAIL() << "a broken program built";
    } catch (const device_error& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("clBuildProgram"), std::string::npos) << w;
        EXPECT_NE(w.find("test_broken"), std::string::npos) << w;
        EXPECT_NE(w.find("compiler log"), std::string::npos) << w;
        EXPECT_NE(w.find("undeclared_name"), std::string::npos) << w;  // the log quotes the bad line
    }
}
#endif

}  // namespace
}  // namespace tilestream
