// The parts of the device interface shared by every backend: budget accounting and names.
#include "core/fault_injection.hpp"

#include <tilestream/device.hpp>
#include <tilestream/error.hpp>

#include <algorithm>
#include <chrono>

namespace tilestream {

std::string_view to_string(device_kind k) noexcept {
    switch (k) {
        case device_kind::cpu: return "cpu";
        case device_kind::cuda: return "cuda";
        case device_kind::opencl: return "opencl";
    }
    return "?";
}

std::string_view to_string(span_kind k) noexcept {
    switch (k) {
        case span_kind::copy_h2d: return "copy_h2d";
        case span_kind::copy_d2h: return "copy_d2h";
        case span_kind::copy_d2d: return "copy_d2d";
        case span_kind::copy_peer: return "copy_peer";
        case span_kind::kernel: return "kernel";
        case span_kind::host: return "host";
    }
    return "?";
}

double trace_clock_seconds() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

device::~device() = default;

void device::gemm_batched(stream& s, const gemm_batched_call& call) {
    if (call.listed() && !host_addressable())
        throw invalid_argument("gemm_batched on " + id() + ": pointer lists need host-addressable memory");
    for (index_t i = 0; i < call.count; ++i) gemm(s, call.item(i));
}

namespace {

void raise_peak(std::atomic<std::size_t>& peak, std::size_t now) {
    std::size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
}

}  // namespace

device_buffer device::allocate(std::size_t bytes, budget_reservation* from) {
    if (from != nullptr && &from->dev_ != this)
        throw invalid_argument(info_.id + ": allocation with a reservation of device " + from->dev_.id());
    // From the run's reservation while it has room.
    std::size_t reserved = 0;
    if (from != nullptr) {
        std::size_t cur = from->in_use_.load();
        while (cur <= from->bytes_ && bytes <= from->bytes_ - cur && !from->in_use_.compare_exchange_weak(cur, cur + bytes)) {
        }
        if (cur <= from->bytes_ && bytes <= from->bytes_ - cur) {
            reserved = bytes;
            raise_peak(from->peak_, cur + bytes);
        }
    }
    std::size_t cur = in_use_.load();
    if (reserved == 0) {
        const std::size_t budget = info_.budget_bytes;
        bool reclaimed = false;
        for (;;) {
            if (bytes > budget || cur > budget - bytes) {
                // Memory kept idle between runs (a context's buffers) is given back before the
                // allocation fails.
                if (!reclaimed && bytes <= budget) {
                    reclaimed = true;
                    if (reclaim_idle()) {
                        cur = in_use_.load();
                        continue;
                    }
                }
                throw out_of_budget(info_.id + ": cannot allocate " + format_bytes(bytes) + " (" +
                                    std::to_string(bytes) + " bytes): " + format_bytes(cur) +
                                    " already in use of a budget of " + format_bytes(budget) + " (" +
                                    std::to_string(budget) + " bytes)");
            }
            if (in_use_.compare_exchange_weak(cur, cur + bytes)) break;
        }
        raise_peak(peak_, cur + bytes);
        if (from != nullptr) raise_peak(from->peak_, from->in_use_.fetch_add(bytes) + bytes);
    }
    void* p = nullptr;
    try {
        fault_injection::on_allocate(*this);
        p = raw_allocate(bytes == 0 ? 1 : bytes);
    } catch (...) {
        if (from != nullptr) from->in_use_.fetch_sub(bytes);
        if (reserved == 0) {
            in_use_.fetch_sub(bytes);
            notify_budget_waiters();
        }
        throw;
    }
    return device_buffer(this, p, bytes, from, reserved);
}

void device::release(void* p, std::size_t bytes, budget_reservation* from, std::size_t reserved) noexcept {
    raw_free(p);
    if (from != nullptr) from->in_use_.fetch_sub(bytes);
    if (bytes > reserved) {
        in_use_.fetch_sub(bytes - reserved);
        notify_budget_waiters();
    }
}

void device::notify_budget_waiters() {
    if (budget_waiters_.load() == 0) return;
    // Under the mutex, so a waiter between its check and its wait cannot miss it.
    std::lock_guard lock(budget_mutex_);
    budget_freed_.notify_all();
}

std::size_t device::budget_for_runs() const {
    // Under the mutex reservations change in_use_ and reserved_ under: read apart, a reservation
    // being made or ended could look like memory allocated outside runs (down to a 0 B budget).
    // (The mutex is not `mutable` in the header; locking it changes no observable state.)
    std::lock_guard lock(const_cast<std::mutex&>(budget_mutex_));
    const std::size_t used = in_use_.load();
    const std::size_t outside = used - std::min(used, reserved_.load());
    return info_.budget_bytes - std::min(info_.budget_bytes, outside);
}

std::uint64_t device::add_idle_holder(std::function<bool()> give_back) {
    std::lock_guard lock(holders_mutex_);
    holders_.emplace_back(next_holder_, std::move(give_back));
    return next_holder_++;
}

void device::remove_idle_holder(std::uint64_t id) {
    std::lock_guard lock(holders_mutex_);
    std::erase_if(holders_, [&](const auto& h) { return h.first == id; });
}

bool device::reclaim_idle() {
    std::lock_guard lock(holders_mutex_);
    bool freed = false;
    for (auto& h : holders_) freed = h.second() || freed;
    return freed;
}

budget_reservation::budget_reservation(device& dev, std::size_t bytes) : dev_(dev), bytes_(bytes) {
    std::unique_lock lock(dev.budget_mutex_);
    const std::uint64_t turn = dev.next_turn_++;
    ++dev.budget_waiters_;
    const auto leave = [&] {
        --dev.budget_waiters_;
        ++dev.serving_turn_;
        dev.budget_freed_.notify_all();
    };
    for (;;) {
        const std::size_t budget = dev.info_.budget_bytes, used = dev.in_use_.load();
        const std::size_t outside = used - std::min(used, dev.reserved_.load());
        if (bytes > budget - std::min(budget, outside)) {
            leave();
            throw out_of_budget(dev.id() + ": a run needs " + format_bytes(bytes) + " (" + std::to_string(bytes) +
                                " bytes) but only " + format_bytes(budget - std::min(budget, outside)) +
                                " of the budget of " + format_bytes(budget) + " can be given to runs (" +
                                format_bytes(outside) + " allocated outside them)");
        }
        std::size_t cur = used;
        if (dev.serving_turn_ == turn && cur <= budget && bytes <= budget - cur &&
            dev.in_use_.compare_exchange_strong(cur, cur + bytes)) {
            dev.reserved_ += bytes;
            raise_peak(dev.peak_, cur + bytes);
            leave();
            return;
        }
        // Memory kept idle between runs (a context's buffers) is given back first, outside the
        // lock (giving back frees buffers, which takes it).
        if (dev.serving_turn_ == turn) {
            lock.unlock();
            const bool freed = dev.reclaim_idle();
            lock.lock();
            if (freed) continue;
        }
        // Other runs hold the memory (or are ahead in line): wait for a release. The timeout
        // only re-checks in case memory was freed by a path that does not notify.
        dev.budget_freed_.wait_for(lock, std::chrono::milliseconds(50));
    }
}

budget_reservation::~budget_reservation() {
    // Its buffers are freed first (a run frees them before its reservation ends).
    std::lock_guard lock(dev_.budget_mutex_);
    dev_.reserved_ -= bytes_;
    dev_.in_use_.fetch_sub(bytes_);
    dev_.budget_freed_.notify_all();
}

}  // namespace tilestream
