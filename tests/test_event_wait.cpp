// A stream waiting on an event waits for the record current when wait() was called: a later
// record (here behind a blocked stream) must not hold it up. One test body per device spec,
// for events of the same backend and of another backend (through event::host_waiter).
#include "test_support.hpp"

#include <tilestream/device.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace tilestream {
namespace {

using namespace std::chrono_literals;

/// Presents another device's event as an event of an unknown backend, so that wait() must go
/// through host_waiter() (the path CPU streams take for CUDA and OpenCL events).
class foreign_event final : public event {
public:
    explicit foreign_event(std::unique_ptr<event> inner) : inner_(std::move(inner)) {}
    void record(stream& s) override { inner_->record(s); }
    void synchronize() override { inner_->synchronize(); }
    bool ready() override { return inner_->ready(); }
    std::function<void()> host_waiter() override { return inner_->host_waiter(); }

private:
    std::unique_ptr<event> inner_;
};

class event_wait : public ::testing::TestWithParam<std::string> {};

// waiter's stream waits on `e` (recorded on producer's stream); then e is re-recorded behind a
// blocked producer stream. The waiting stream must pass the wait while the producer is blocked.
void expect_wait_ignores_later_records(device& producer, device& waiter, bool foreign) {
    auto ps = producer.create_stream();
    auto ws = waiter.create_stream();
    std::unique_ptr<event> e = producer.create_event();
    if (foreign) e = std::make_unique<foreign_event>(std::move(e));

    e->record(*ps);  // the record the wait is for
    waiter.wait(*ws, *e);

    std::promise<void> release;
    auto released = release.get_future().share();
    // Bounded: a test that fails must not hang the suite.
    producer.enqueue_host(*ps, [released] { released.wait_for(30s); }, "blocker");
    e->record(*ps);  // a later record, reached only once the blocker is released

    // Observed through an event, not a host function: CUDA may run the host functions of all
    // streams on one thread, which the blocker holds.
    auto passed = waiter.create_event();
    passed->record(*ws);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    bool in_time = passed->ready();
    while (!in_time && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
        in_time = passed->ready();
    }
    EXPECT_TRUE(in_time) << waiter.id() << " waited for a record made after its wait() on "
                         << producer.id() << (foreign ? " (foreign event)" : "");
    EXPECT_FALSE(e->ready()) << "the later record is still behind the blocker";
    release.set_value();
    ps->synchronize();
    ws->synchronize();
    EXPECT_TRUE(e->ready());
}

TEST_P(event_wait, WaitHonoursTheRecordCurrentAtWait) {
    TILESTREAM_SKIP_WITHOUT_GPU(GetParam());
    auto devs = open_devices(GetParam());
    ASSERT_GE(devs.size(), 2u);
    for (bool foreign : {false, true}) {
        expect_wait_ignores_later_records(*devs[0], *devs[1], foreign);
        expect_wait_ignores_later_records(*devs[1], *devs[0], foreign);
        expect_wait_ignores_later_records(*devs[0], *devs[0], foreign);
    }
}

TEST_P(event_wait, HostWaiterOutlivesItsEvent) {
    TILESTREAM_SKIP_WITHOUT_GPU(GetParam());
    auto devs = open_devices(GetParam());
    auto s = devs[0]->create_stream();
    std::promise<void> release;
    auto released = release.get_future().share();
    devs[0]->enqueue_host(*s, [released] { released.wait_for(30s); }, "blocker");
    std::function<void()> wait_for_record;
    {
        auto e = devs[0]->create_event();
        e->record(*s);
        wait_for_record = e->host_waiter();
    }  // the event is gone; its waiter still knows the point
    auto done = std::async(std::launch::async, wait_for_record);
    EXPECT_EQ(done.wait_for(200ms), std::future_status::timeout) << "the waiter did not wait";
    release.set_value();
    EXPECT_EQ(done.wait_for(10s), std::future_status::ready);
    s->synchronize();
}

// Two devices of one backend; the GPU and OpenCL specs skip where none is present.
INSTANTIATE_TEST_SUITE_P(cpu, event_wait, ::testing::Values(std::string("cpu:2")));
INSTANTIATE_TEST_SUITE_P(cuda, event_wait, ::testing::Values(std::string("cuda:0x2")));

}  // namespace
}  // namespace tilestream
