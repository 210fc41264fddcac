// The tile store of one device in a run: slots in its memory holding tile versions (an LRU cache
// indexed by tile), loaded from and written back to the host operands on the device's copy
// streams, ordered by events so that a slot is never overwritten before its readers and its
// write-back are done. Grown from the GEMM engine's slots (core/gemm_memory.hpp): tiles of any
// operand, read-only or read-write, with versions.
#pragma once

#include "core/engine/task_graph.hpp"
#include "core/gemm_memory.hpp"

#include <tilestream/device.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tilestream::detail::engine {

struct tile_slot {
    device_buffer buf;
    std::unique_ptr<event> ready;     ///< after its load, or after the kernels that wrote it
    std::unique_ptr<event> released;  ///< after the last kernel that read it
    std::unique_ptr<event> written;   ///< after the last copy out of it
    int tile = -1;                    ///< the tile it holds (-1: none)
    std::uint32_t version = 0;        ///< which version of it
    std::uint64_t last_use = 0;
    bool locked = false;              ///< in use by the task being issued: not a victim
    /// The host bytes it holds a copy of and the kept operand (with its generation) they were read
    /// from: a later call on that operand, unchanged, uses the copy (keep.id 0: never).
    host_rect origin;
    operand_keep keep;
    /// Pack transfers: the host buffer a non-contiguous tile is gathered into before its copy in,
    /// and scattered from after its copy out (one per slot: a slot's next load waits for its
    /// write-back).
    host_staging_buffer stage;
    /// Peer tiles: copies other devices are making out of this slot (events on this device's
    /// peer stream); its next load waits for them.
    std::vector<std::shared_ptr<event>> peer_reads;
    /// Peer tiles: set on the copy-in stream once the slot's load ran (a failed stream skips it),
    /// so a copy out of the slot to another device is known to carry the tile.
    std::shared_ptr<std::atomic<bool>> loaded;
};

/// Peer tiles: which device's store holds which version of which tile (slots filled by input()
/// only: tiles read from the host, never a task's outputs), shared by the stores of one run, so a
/// device copies a tile out of another's memory instead of from the host (device::copy_peer).
struct peer_directory {
    struct holder {
        device* dev = nullptr;
        stream* peer_stream = nullptr;  ///< that device's stream for copies out to others
        tile_slot* slot = nullptr;
        std::uint32_t version = 0;
        std::shared_ptr<std::atomic<bool>> loaded;  ///< the slot's (tile_slot::loaded) when listed
    };
    std::mutex mutex;
    std::unordered_map<int, std::vector<holder>> tiles;
    /// Devices lost, or whose peer tile check failed: never listed or copied from again.
    std::vector<const device*> banned;
    /// Bans the device: its slots leave the directory and are not listed again.
    void forget(const device& dev);
    /// Under the mutex.
    bool is_banned(const device* dev) const { return std::find(banned.begin(), banned.end(), dev) != banned.end(); }
};

/// What a device's store leaves to the next call (context's gemm_memory::tile_kits): its
/// reservation, slots (with the tiles of kept operands they hold) and streams.
struct tiles_kit {
    std::unique_ptr<budget_reservation> reservation;  // first: destroyed after its buffers
    std::vector<tile_slot> slots;
    std::unique_ptr<stream> h2d, compute, d2h, peer;
    /// What `compute` was created with: a run wanting the other kind makes its own (in place on
    /// one device a calling_thread stream, else a queue's thread: executor.cpp).
    stream_priority compute_priority = stream_priority::high;
    ~tiles_kit();
};

/// Bytes and hits of one device's store.
struct store_counters {
    std::size_t bytes_h2d = 0, bytes_d2h = 0;
    std::size_t bytes_packed = 0;  ///< of those, gathered or scattered through host staging (pack)
    std::size_t hits = 0, misses = 0, bytes_saved = 0;
    std::size_t kept_hits = 0, kept_bytes_saved = 0;  ///< tiles of kept operands an earlier call left
    std::size_t peer_hits = 0, bytes_from_peers = 0;  ///< tiles copied from another device's store
};

/// A packed_copy (core/gemm_memory.hpp) run on the host, limited to a triangle (diagonal included) of a square tile.
void copy_region(const copy_2d_desc& d, const host_rect& r, tile_region region, bool to_packed);

/// The host's rate, in bytes of tile per second, of the merge above (a packed 1024 x 1024 f64
/// tile's lower triangle into a matrix with a longer leading dimension): the best of three after
/// a warm-up, measured once per process (about 10 ms).
double measure_triangle_merge_rate();

class tile_store {
public:
    /// Allocates each class's buffers from the reservation (slots `kept` from an earlier call of
    /// the same size first); fewer when the device refuses some (at least `least` in all and one
    /// of each class, else the allocation's error is thrown). `pack`: tiles that are not
    /// contiguous in host memory go through a host staging buffer per slot and 1-D copies
    /// (transfer_mode::pack) instead of 2-D strided copies.
    tile_store(device& dev, stream& h2d, stream& compute, stream& d2h, std::vector<slot_class> classes, int least,
               budget_reservation* from, std::vector<tile_slot>* kept = nullptr, bool pack = false);
    tile_store(const tile_store&) = delete;
    tile_store& operator=(const tile_store&) = delete;

    int slots() const { return int(slots_.size()); }

    /// Peer tiles: tiles this store reads from the host are listed in `dir`, and a tile another
    /// device lists (at the version asked for, where that device can copy into this one) is
    /// copied from there on that device's peer stream. `out`: this device's stream for copies
    /// out of its slots to other devices.
    void share_peers(peer_directory* dir, stream* out) {
        peers_ = dir;
        peer_out_ = out;
    }

    /// The slot holding version `version` of `tile`, for kernels on the compute stream: found, or
    /// loaded into the least recently used unlocked slot (after its readers and write-back).
    /// `keep`: the kept operand the tile is read from (id 0: none): a slot an earlier call filled
    /// with the same rectangle of it, at the same generation, is used without a copy.
    /// `fit`: the size of slot it takes (task_graph::slot_bytes; 0: its own bytes).
    tile_slot& input(int tile, std::uint32_t version, const host_rect& r, const operand_keep& keep = {},
                     std::size_t fit = 0);
    /// A slot the task's kernels write `tile` into, holding `version` first when `load` (found or
    /// loaded); it then holds version + 1 (valid once its ready event, recorded by the caller after
    /// the kernels, is reached).
    tile_slot& output(int tile, std::uint32_t version, bool load, const host_rect& r, std::size_t fit = 0);
    /// Writes the slot back to the host rectangle (its region) on the copy-out stream after its
    /// ready event; records `written`.
    void store(tile_slot& s, const host_rect& r, tile_region region);
    void unlock_all();
    /// Whether a slot holds this version of the tile (a task's affinity to this device).
    bool holds(int tile, std::uint32_t version) const {
        auto it = index_.find(tile);
        return it != index_.end() && slots_[it->second].version == version;
    }
    const store_counters& counters() const { return counters_; }
    /// The slots, for the next call (after every stream has drained).
    std::vector<tile_slot> take_slots() { return std::move(slots_); }

private:
    /// The slot to overwrite with `tile` (taking a slot of `bytes`): one holding an older version
    /// of it, else the least recently used unlocked one of the smallest class it fits.
    tile_slot& victim(int tile, std::size_t bytes, bool kernels_write);
    void load(tile_slot& s, const host_rect& r);
    /// Pack transfers: whether the slot has its staging buffer (made on first use).
    bool staged(tile_slot& s);
    /// Peer tiles: copies `tile` at `version` into `s` from another device's store listing it
    /// (ready event recorded); false when none does.
    bool from_peer(tile_slot& s, int tile, std::uint32_t version, const host_rect& r);
    /// Peer tiles: lists the slot (holding an input tile, its ready event recorded).
    void list(tile_slot& s);
    /// Peer tiles: a new tile_slot::loaded flag, set on the copy-in stream (before the slot's ready
    /// event is recorded).
    void mark_loaded(tile_slot& s);
    /// Peer tiles: takes the slot out of the directory before it changes; its next loads (and its
    /// kernels, `kernels`: when they write it without a load) wait for the copies other devices
    /// are making out of it.
    void unlist(tile_slot& s, bool kernels);

    device& dev_;
    stream &h2d_, &compute_, &d2h_;
    std::vector<tile_slot> slots_;
    std::unordered_map<int, std::size_t> index_;  ///< tile -> slot holding its newest version here
    std::uint64_t clock_ = 0;
    std::size_t slot_bytes_ = 0;  ///< the largest slot
    bool pack_ = false;
    host_staging_buffer region_stage_;  ///< triangle write-back of devices the host cannot address
    peer_directory* peers_ = nullptr;
    stream* peer_out_ = nullptr;
    store_counters counters_;
};

}  // namespace tilestream::detail::engine
