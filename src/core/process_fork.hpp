// Objects that own threads, and the fork() of the process they live in. A child made with fork()
// has one thread: the other threads of its parent did not come along, yet the child's copy of their
// owners says they run, and the locks and condition variables they wait on may look held or waited
// on. Joining them, waiting for them or signalling them there blocks forever. Such state is kept in
// a process_local: in a child its first use abandons the parent's copy (left alone, never destroyed)
// and makes a fresh one, as OpenBLAS re-creates its threads after fork.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace tilestream::detail {

/// How many fork()s lie between this process and the one that first called this: 0 there, 1 in
/// its children, 2 in their children (a pthread_atfork child handler counts). The first call
/// registers the handler, so call it before starting threads.
std::uint64_t fork_generation() noexcept;

/// A heap object of type T that belongs to the process that made it. T has a member
/// `std::uint64_t generation`, set to fork_generation() when it is made (by `make`).
template <class T>
class process_local {
public:
    process_local() = default;
    process_local(const process_local&) = delete;
    process_local& operator=(const process_local&) = delete;
    /// Destroys this process's object; a parent's (in a forked child) is left alone.
    ~process_local() {
        if (T* p = p_.load(std::memory_order_acquire); p && p->generation == fork_generation()) delete p;
    }

    /// This process's object, made by `make()` (a std::unique_ptr<T>) when there is none yet or
    /// the one there was made before a fork. Safe to call from several threads.
    template <class Make>
    T& get(Make&& make) {
        T* p = p_.load(std::memory_order_acquire);
        if (p && p->generation == fork_generation()) return *p;
        std::unique_ptr<T> fresh = make();
        if (p_.compare_exchange_strong(p, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
        return *p;  // another thread of this process made one first (fresh is destroyed)
    }

    /// This process's object, or nullptr (none made yet, or the one there is a parent's).
    T* current() const {
        T* p = p_.load(std::memory_order_acquire);
        return p && p->generation == fork_generation() ? p : nullptr;
    }

private:
    std::atomic<T*> p_{nullptr};
};

}  // namespace tilestream::detail
