// The device layer: budgets, streams, events, copies (1-D, 2-D, peer), specs and discovery.
#include "test_support.hpp"

#include <tilestream/devices.hpp>

#include "core/device_identity.hpp"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

namespace tilestream {
namespace {

class device_layer : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        TILESTREAM_SKIP_WITHOUT_GPU(GetParam());
        open_options o;
        o.memory_budget = 1 << 20;
        // Two devices of the backend: two CPU devices, or two logical devices on one accelerator
        // (a spec names each accelerator once).
        const std::string& spec = GetParam();
        devs_ = open_devices(spec == "cpu" ? std::string("cpu:2") : spec + "x2", o);
    }
    device& dev() { return *devs_[0]; }
    device& other() { return *devs_[1]; }
    std::vector<std::unique_ptr<device>> devs_;
};

TEST_P(device_layer, BudgetIsAccountedAndEnforced) {
    EXPECT_EQ(dev().budget(), 1u << 20);
    {
        auto a = dev().allocate(600 * 1024);
        EXPECT_EQ(dev().bytes_in_use(), 600u * 1024);
        try {
            auto b = dev().allocate(500 * 1024);
            FAIL() << "allocation beyond the budget succeeded";
        } catch (const out_of_budget& e) {
            const std::string w = e.what();
            EXPECT_NE(w.find(dev().id()), std::string::npos) << w;
            EXPECT_NE(w.find("512000 bytes"), std::string::npos) << w;
            EXPECT_NE(w.find("1048576 bytes"), std::string::npos) << w;
        }
        auto c = dev().allocate(400 * 1024);
        EXPECT_EQ(dev().peak_bytes(), 1000u * 1024);
    }
    EXPECT_EQ(dev().bytes_in_use(), 0u);
}

TEST_P(device_layer, CopiesRoundTrip1DAnd2D) {
    std::vector<double> host(1000), back(1000, -1.0);
    std::iota(host.begin(), host.end(), 1.0);
    auto buf = dev().allocate(1000 * sizeof(double));
    auto buf2 = dev().allocate(1000 * sizeof(double));
    auto s = dev().create_stream();
    dev().copy_to_device(*s, buf.get(), host.data(), 1000 * sizeof(double));
    dev().copy_within(*s, buf2.get(), buf.get(), 1000 * sizeof(double));
    dev().copy_to_host(*s, back.data(), buf2.get(), 1000 * sizeof(double));
    s->synchronize();
    EXPECT_EQ(back, host);

    // 2-D: a 7x5 block out of a 20-wide host matrix, packed on the device, back at pitch 9.
    copy_2d_desc up{buf.get(), 5 * sizeof(double), host.data() + 3 * 20 + 2, 20 * sizeof(double), 5 * sizeof(double), 7};
    dev().copy_2d_to_device(*s, up);
    std::vector<double> out(7 * 9, 0.0);
    copy_2d_desc down{out.data(), 9 * sizeof(double), buf.get(), 5 * sizeof(double), 5 * sizeof(double), 7};
    dev().copy_2d_to_host(*s, down);
    s->synchronize();
    for (int r = 0; r < 7; ++r)
        for (int c = 0; c < 9; ++c)
            EXPECT_EQ(out[r * 9 + c], c < 5 ? host[(3 + r) * 20 + 2 + c] : 0.0) << r << "," << c;
}

TEST_P(device_layer, PeerCopyReachesTheOtherDevice) {
    std::vector<float> host(257), back(257, 0.f);
    std::iota(host.begin(), host.end(), 3.f);
    auto src = dev().allocate(257 * sizeof(float));
    auto dst = other().allocate(257 * sizeof(float));
    auto s = dev().create_stream();
    auto t = other().create_stream();
    dev().copy_to_device(*s, src.get(), host.data(), 257 * sizeof(float));
    ASSERT_TRUE(dev().can_copy_peer(other()));
    dev().copy_peer(*s, other(), dst.get(), src.get(), 257 * sizeof(float));
    auto e = dev().create_event();
    e->record(*s);
    other().wait(*t, *e);
    other().copy_to_host(*t, back.data(), dst.get(), 257 * sizeof(float));
    t->synchronize();
    EXPECT_EQ(back, host);
}

TEST_P(device_layer, EventsOrderStreams) {
    // Stream t must not copy out before stream s has finished writing, even though s is slow.
    // The host buffers are registered: on CUDA a copy from pageable memory blocks the calling
    // thread until s is idle, so this thread could never open the gate (seen on an H200, where
    // this test hung until registration was added).
    std::vector<int> host(4096, 7), back(4096, 0);
    dev().register_host(host.data(), host.size() * sizeof(int));
    dev().register_host(back.data(), back.size() * sizeof(int));
    auto buf = dev().allocate(4096 * sizeof(int));
    auto s = dev().create_stream();
    auto t = dev().create_stream(stream_priority::high);
    std::atomic<bool> released{false};
    dev().enqueue_host(*s, [&] {
        while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }, "gate");
    dev().copy_to_device(*s, buf.get(), host.data(), 4096 * sizeof(int));
    auto e = dev().create_event();
    e->record(*s);
    dev().wait(*t, *e);
    dev().copy_to_host(*t, back.data(), buf.get(), 4096 * sizeof(int));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(e->ready());
    released = true;
    t->synchronize();
    EXPECT_TRUE(e->ready());
    EXPECT_EQ(back, host);
    dev().unregister_host(back.data());
    dev().unregister_host(host.data());
}

TEST_P(device_layer, StreamErrorsSurfaceAtSynchronize) {
    auto s = dev().create_stream();
    dev().enqueue_host(*s, [] { throw device_error("boom in a stream task"); }, "failing");
    try {
        s->synchronize();
        FAIL() << "no error";
    } catch (const device_error& e) {
        EXPECT_STREQ(e.what(), "boom in a stream task");
    }
    s->synchronize();  // reported once, then the stream is usable again
}

INSTANTIATE_TEST_SUITE_P(backends, device_layer, ::testing::Values("cpu", "cuda:0", "opencl:0"),
                         [](const auto& info) { return info.param.substr(0, info.param.find(':')); });

// ---- device specs ----

/// Threads of this process (Linux: one entry per thread under /proc/self/task).
std::size_t process_threads() {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
}

// A pipeline creates four streams and in place uses only the compute stream; threads started for
// the others crowded the cores while the kernel's threads were placed (4-7% of a 2048^3 call).
TEST(cpu_stream, StartsItsThreadWithItsFirstTaskOnly) {
    auto devs = open_devices("cpu");
    const std::size_t before = process_threads();
    {
        auto idle = devs[0]->create_stream(), used = devs[0]->create_stream();
        EXPECT_EQ(process_threads(), before) << "streams without tasks started threads";
        std::atomic<int> ran{0};
        for (int i = 0; i < 3; ++i) devs[0]->enqueue_host(*used, [&] { ++ran; }, "task");
        used->synchronize();
        idle->synchronize();  // nothing queued: returns at once
        EXPECT_EQ(ran.load(), 3);
        EXPECT_EQ(process_threads(), before + 1);
    }
    EXPECT_EQ(process_threads(), before) << "a destroyed stream left its thread running";
}

// stream_priority::calling_thread on a CPU device: each operation runs on the enqueuing thread
// before the enqueue returns, no thread is started, and the queue's rules hold (an operation after
// a failed one is skipped, an event record still runs, synchronize() reports the error once).
TEST(cpu_stream, OnTheCallingThreadRunsEachOperationBeforeEnqueueReturns) {
    auto devs = open_devices("cpu");
    device& dev = *devs[0];
    const std::size_t before = process_threads();
    auto s = dev.create_stream(stream_priority::calling_thread);
    std::thread::id ran_on;
    int ran = 0;
    dev.enqueue_host(*s, [&] { ran_on = std::this_thread::get_id(), ++ran; }, "first");
    EXPECT_EQ(ran, 1) << "the operation had not run when enqueue_host returned";
    EXPECT_EQ(ran_on, std::this_thread::get_id());
    std::vector<double> host(64, 3.0), back(64, 0.0);
    auto buf = dev.allocate(64 * sizeof(double));
    dev.copy_to_device(*s, buf.get(), host.data(), 64 * sizeof(double));
    dev.copy_to_host(*s, back.data(), buf.get(), 64 * sizeof(double));
    EXPECT_EQ(back, host) << "a copy had not completed when it returned";
    EXPECT_EQ(process_threads(), before) << "a calling-thread stream started a thread";

    dev.enqueue_host(*s, [] { throw device_error("boom on the calling thread"); }, "failing");
    dev.enqueue_host(*s, [&] { ++ran; }, "after the failure");
    EXPECT_EQ(ran, 1) << "an operation after a failed one ran";
    auto e = dev.create_event();
    e->record(*s);
    EXPECT_TRUE(e->ready()) << "an event record after a failure did not run";
    try {
        s->synchronize();
        FAIL() << "no error";
    } catch (const device_error& x) {
        EXPECT_STREQ(x.what(), "boom on the calling thread");
    }
    s->synchronize();  // reported once, then the stream is usable again
    dev.enqueue_host(*s, [&] { ++ran; }, "after synchronize");
    EXPECT_EQ(ran, 2);
    // A normal stream of the same device still runs on its own thread.
    auto queued = dev.create_stream(stream_priority::high);
    dev.enqueue_host(*queued, [&] { ran_on = std::this_thread::get_id(); }, "queued");
    queued->synchronize();
    EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(device_spec, ParsesEveryForm) {
    auto r = parse_device_spec("all, cpu,cpu:3@256MiB, cuda:1, cuda:0x4@1GiB");
    ASSERT_EQ(r.size(), 5u);
    EXPECT_EQ(r[0].kind, device_request::what::all);
    EXPECT_EQ(r[1].kind, device_request::what::cpu);
    EXPECT_EQ(r[1].count, 1);
    EXPECT_EQ(r[2].count, 3);
    EXPECT_EQ(*r[2].budget, 256u << 20);
    EXPECT_EQ(r[3].kind, device_request::what::cuda);
    EXPECT_EQ(r[3].index, 1);
    EXPECT_EQ(r[4].slices, 4);
    EXPECT_EQ(*r[4].budget, 1u << 30);
}

TEST(device_spec, RejectsMalformedItems) {
    for (const char* bad : {"", "gpu", "cpu:", "cpu:x", "cpu:0", "cuda:", "cuda:0x0", "cuda:-1", "cpu,,cpu",
                            "cpu@", "cpu@12XB", "cpu@0"})
        EXPECT_THROW(parse_device_spec(bad), invalid_argument) << bad;
}

TEST(device_spec, UnknownDeviceListsThePresentOnes) {
    try {
        open_devices("tpu:0");
        FAIL() << "no error";
    } catch (const invalid_argument& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("unknown device 'tpu:0'"), std::string::npos) << w;
        EXPECT_NE(w.find("devices present: cpu ("), std::string::npos) << w;
    }
    if (inventory().gpus.size() < 8) {
        try {
            open_devices("cuda:7");
            FAIL() << "no error";
        } catch (const invalid_argument& e) {
            const std::string w = e.what();
            EXPECT_NE(w.find("unknown device 'cuda:7'"), std::string::npos) << w;
            EXPECT_NE(w.find("devices present: cpu"), std::string::npos) << w;
        }
    }
}

TEST(device_spec, CpuDevicesSplitTheCores) {
    const int cores = inventory().cpu_cores;
    auto devs = open_devices("cpu:2");
    ASSERT_EQ(devs.size(), 2u);
    EXPECT_EQ(devs[0]->id(), "cpu:0");
    EXPECT_EQ(devs[1]->id(), "cpu:1");
    EXPECT_EQ(devs[0]->info().threads + devs[1]->info().threads, std::max(cores, 2));
    open_options o;
    o.cpu_threads = 1;
    o.memory_budget = 4096;
    auto one = open_devices("cpu:3,cpu@8KiB", o);
    ASSERT_EQ(one.size(), 4u);
    for (const auto& d : one) EXPECT_EQ(d->info().threads, 1);
    EXPECT_EQ(one[0]->budget(), 4096u);
    EXPECT_EQ(one[3]->budget(), 8192u);
    EXPECT_EQ(one[3]->id(), "cpu:3");
}

TEST(device_spec, ByteSizes) {
    EXPECT_EQ(parse_bytes("512MiB"), 512u << 20);
    EXPECT_EQ(parse_bytes("1.5GiB"), 3u << 29);
    EXPECT_EQ(parse_bytes("64KB"), 64000u);
    EXPECT_EQ(parse_bytes("4096"), 4096u);
    EXPECT_THROW(parse_bytes("lots"), invalid_argument);
    EXPECT_THROW(parse_bytes("5 parsecs"), invalid_argument);
}

TEST(discovery, NoGpuIsNotAnError) {
    const auto& inv = inventory();
    EXPECT_GE(inv.cpu_cores, 1);
    EXPECT_GT(inv.host_memory, 0u);
    if (inv.gpus.empty()) {
        EXPECT_FALSE(inv.cuda_status.empty());
        EXPECT_EQ(inv.cuda_status.find('\n'), std::string::npos);
    }
    auto all = open_devices("all");
    EXPECT_EQ(all.size(), inv.gpus.size() + 1);
}

// "auto", every front's default: the accelerators "all" opens, without the CPU beside them; the CPU
// alone where there is none (so a newcomer's command line uses the GPU of a GPU machine).
TEST(discovery, AutoTakesTheAcceleratorsElseTheCpu) {
    const auto r = parse_device_spec("AUTO@1GiB");
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].kind, device_request::what::automatic);
    EXPECT_EQ(r[0].budget.value(), std::size_t(1) << 30);
    EXPECT_EQ(count_cpu_devices(r), 1);
    for (const char* mixed : {"auto,cpu", "cuda:0,auto", "auto,auto"}) {
        try {
            parse_device_spec(mixed);
            ADD_FAILURE() << mixed << " was accepted";
        } catch (const invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("'auto' stands alone"), std::string::npos) << e.what();
        }
    }
    std::vector<std::string> accelerators;
    for (const auto& d : open_devices("all"))
        if (d->info().kind != device_kind::cpu) accelerators.push_back(d->id());
    std::vector<std::string> picked;
    for (const auto& d : open_devices("auto")) picked.push_back(d->id());
    if (accelerators.empty()) EXPECT_EQ(picked, std::vector<std::string>{"cpu:0"});
    else EXPECT_EQ(picked, accelerators);
}

}  // namespace
}  // namespace tilestream
