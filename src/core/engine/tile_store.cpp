// One device's tile store: slots, versions, LRU, loads and write-back (see tile_store.hpp).
#include "core/engine/tile_store.hpp"

#include "core/fault_injection.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace tilestream::detail::engine {

void copy_region(const copy_2d_desc& d, const host_rect& r, tile_region region, bool to_packed) {
    (void)to_packed;
    for (std::size_t line = 0; line < d.height; ++line) {
        // Line `line` is a row (row-major) or a column (column-major) of the square tile; its
        // elements in the triangle: row r of lower is [0, r], column c of lower is [c, n).
        std::size_t first = 0, last = std::size_t(r.inner());
        const bool rows = r.lay == layout::row_major;
        const bool lower = region == tile_region::lower;
        if (region != tile_region::full) {
            if (rows == lower) last = std::min(last, line + 1);
            else first = std::min(last, line);
        }
        if (last <= first) continue;
        std::memcpy(static_cast<char*>(d.dst) + line * d.dst_pitch + first * r.es,
                    static_cast<const char*>(d.src) + line * d.src_pitch + first * r.es, (last - first) * r.es);
    }
}

double measure_triangle_merge_rate() {
    static const double rate = [] {
        constexpr index_t n = 1024, ld = 1536;
        std::vector<double> staging(std::size_t(n * n), 1.0), matrix(std::size_t(ld * n), 0.0);
        host_rect r;
        r.base = reinterpret_cast<char*>(matrix.data());
        r.rows = r.cols = n;
        r.ld = ld;
        r.lay = layout::col_major;
        r.es = sizeof(double);
        const copy_2d_desc d = packed_copy(staging.data(), r, false);
        double best = 0;
        for (int i = 0; i < 4; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            copy_region(d, r, tile_region::lower, false);
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (i > 0 && s > 0) best = std::max(best, double(r.bytes()) / s);
        }
        return best > 0 ? best : 1e9;
    }();
    return rate;
}

tiles_kit::~tiles_kit() {
    for (stream* st : {h2d.get(), compute.get(), d2h.get(), peer.get()}) {
        if (st == nullptr) continue;
        try {
            st->synchronize();
        } catch (...) {
        }
    }
    slots.clear();  // the buffers, then (last member) the reservation they came from
}

tile_store::tile_store(device& dev, stream& h2d, stream& compute, stream& d2h, std::vector<slot_class> classes,
                       int least, budget_reservation* from, std::vector<tile_slot>* kept, bool pack)
    : dev_(dev), h2d_(h2d), compute_(compute), d2h_(d2h), pack_(pack) {
    classes = sorted_classes(std::move(classes));
    int wanted = 0;
    for (const slot_class& c : classes) wanted += c.count;
    slots_.reserve(std::size_t(wanted));
    std::vector<int> have(classes.size(), 0);
    // Slots an earlier call left (same size), with the tiles of kept operands they hold; their
    // staging buffers stay only for a packing run.
    if (kept != nullptr)
        for (std::size_t c = 0; c < classes.size(); ++c)
            for (tile_slot& s : *kept) {
                if (have[c] >= classes[c].count || s.buf.get() == nullptr || s.buf.size() != classes[c].bytes) continue;
                s.tile = -1;
                s.version = 0;
                s.last_use = 0;
                s.locked = false;
                s.peer_reads.clear();  // an earlier run's, all done (its streams drained)
                if (!pack_) s.stage = host_staging_buffer{};
                slots_.push_back(std::move(s));
                ++have[c];
            }
    // One slot of every class first (largest first), then the rest: a device that refuses some
    // refuses the last ones, and the run goes on with those there are when it has `least` slots
    // and one of every class.
    bool refused = false;
    for (int round = 0; round < 2 && !refused; ++round)
        for (std::size_t c = classes.size(); c-- > 0 && !refused;)
            for (; have[c] < (round == 0 ? std::min(classes[c].count, 1) : classes[c].count); ++have[c]) {
                tile_slot s;
                try {
                    s.buf = dev.allocate(classes[c].bytes, from);
                } catch (const error&) {
                    if (round == 0 || int(slots_.size()) < least) throw;
                    refused = true;
                    break;
                }
                s.ready = dev.create_event();
                s.released = dev.create_event();
                s.written = dev.create_event();
                slots_.push_back(std::move(s));
            }
    for (const slot_class& c : classes) slot_bytes_ = std::max(slot_bytes_, c.bytes);
}

void peer_directory::forget(const device& dev) {
    std::lock_guard lock(mutex);
    if (!is_banned(&dev)) banned.push_back(&dev);
    for (auto& [tile, holders] : tiles) std::erase_if(holders, [&](const holder& h) { return h.dev == &dev; });
}

void tile_store::unlist(tile_slot& s, bool kernels) {
    if (peers_ == nullptr) return;
    std::vector<std::shared_ptr<event>> reads;
    {
        std::lock_guard lock(peers_->mutex);
        if (s.tile >= 0)
            if (auto it = peers_->tiles.find(s.tile); it != peers_->tiles.end())
                std::erase_if(it->second, [&](const peer_directory::holder& h) { return h.slot == &s; });
        reads.swap(s.peer_reads);
    }
    // Copies other devices are making out of it end before it is loaded or written again.
    for (const auto& e : reads) {
        dev_.wait(h2d_, *e);
        if (kernels) dev_.wait(compute_, *e);
    }
}

void tile_store::list(tile_slot& s) {
    if (peers_ == nullptr || peer_out_ == nullptr || !s.loaded) return;
    std::lock_guard lock(peers_->mutex);
    if (peers_->is_banned(&dev_)) return;
    peers_->tiles[s.tile].push_back({&dev_, peer_out_, &s, s.version, s.loaded});
}

void tile_store::mark_loaded(tile_slot& s) {
    auto flag = std::make_shared<std::atomic<bool>>(false);
    s.loaded = flag;
    dev_.enqueue_host(h2d_, [flag] { flag->store(true); }, "tile loaded");
}

bool tile_store::from_peer(tile_slot& s, int tile, std::uint32_t version, const host_rect& r) {
    if (peers_ == nullptr || r.bytes() == 0) return false;
    {
        std::lock_guard lock(peers_->mutex);
        auto it = peers_->tiles.find(tile);
        if (it == peers_->tiles.end() ||
            std::none_of(it->second.begin(), it->second.end(), [&](const peer_directory::holder& h) {
                return h.version == version && h.dev != &dev_;
            }))
            return false;  // no holder: from the host
    }
    // The slot is free once its readers (this device's kernels and, waited for by victim(), other
    // devices' copies out of it) and its write-back are done: marked on the copy-in stream, for
    // the holder's stream to wait for.
    dev_.wait(h2d_, *s.released);
    dev_.wait(h2d_, *s.written);
    const std::shared_ptr<event> free(dev_.create_event());
    free->record(h2d_);
    std::shared_ptr<event> done;
    std::shared_ptr<std::atomic<bool>> source_loaded;
    const auto copied = std::make_shared<std::atomic<bool>>(false);
    std::string source;
    const device* source_dev = nullptr;
    {
        std::lock_guard lock(peers_->mutex);
        auto it = peers_->tiles.find(tile);
        if (it == peers_->tiles.end()) return false;
        // A holder whose load has run first; else one whose load is in flight (devices reading
        // the same panels at once, as row panels do), whose flag the check below reads.
        const peer_directory::holder* from = nullptr;
        for (const peer_directory::holder& h : it->second) {
            if (h.version != version || h.dev == &dev_ || peers_->is_banned(h.dev) || !h.dev->can_copy_peer(dev_)) continue;
            if (from == nullptr || (h.loaded->load() && !from->loaded->load())) from = &h;
        }
        if (from != nullptr) {
            const peer_directory::holder& h = *from;
            // Made first: once the copy is queued, nothing may fail before it is waited for.
            done = std::shared_ptr<event>(h.dev->create_event());
            // On the holder's peer stream, once its tile is there and this slot is free.
            h.dev->wait(*h.peer_stream, *h.slot->ready);
            h.dev->wait(*h.peer_stream, *free);
            std::erase_if(h.slot->peer_reads, [](const std::shared_ptr<event>& e) { return e->ready(); });
            source_loaded = h.loaded;
            source = h.dev->id();
            source_dev = h.dev;
            h.dev->copy_peer(*h.peer_stream, dev_, s.buf.get(), h.slot->buf.get(), r.bytes());
            // From here the copy is queued: nothing may leave it untracked.
            try {
                h.dev->enqueue_host(*h.peer_stream, [copied] { copied->store(true); }, "peer tile copied");
            } catch (...) {
                // `copied` stays unset: the check below fails this device's copy-in stream.
            }
            try {
                done->record(*h.peer_stream);
            } catch (...) {
                // No event marks the copy's end (the device is failing): wait for it here, so
                // neither slot changes under it, then fail.
                try {
                    h.peer_stream->synchronize();
                } catch (...) {
                }
                throw;
            }
            h.slot->peer_reads.push_back(done);
        }
    }
    if (!done) return false;
    ++counters_.peer_hits;
    counters_.bytes_from_peers += r.bytes();
    dev_.wait(h2d_, *done);
    // A holder whose own load failed (its copy-in stream skipped the load and the flag) copied
    // whatever its slot held, and a failed peer stream skips the copy: this stream fails
    // instead, so no task commits from it and the run's recovery reruns them (this device is
    // lost with the holder: an error, never a wrong result).
    // (The holder then leaves the directory: no more copies from it.)
    dev_.enqueue_host(h2d_, [source_loaded, copied, source, source_dev, dir = peers_, self = &dev_, who = dev_.id()] {
        if (source_loaded->load() && copied->load()) return;
        // Neither is copied from again: the holder's tiles may be stale, and this device's loads
        // after its failed stream never set their flags.
        dir->forget(*source_dev);
        dir->forget(*self);
        if (!source_loaded->load())
            throw device_error(who + ": a tile copied from " + source + " never arrived there (its copy to the device failed)");
        throw device_error(who + ": the copy of a tile from " + source + " failed");
    }, "peer tile check");
    mark_loaded(s);
    s.ready->record(h2d_);
    return true;
}

tile_slot& tile_store::victim(int tile, std::size_t bytes, bool kernels_write) {
    tile_slot* v = nullptr;
    // A slot holding an older version of the tile is reused first: that version is of no more use.
    if (auto it = index_.find(tile); it != index_.end() && !slots_[it->second].locked) v = &slots_[it->second];
    // The smallest slots the tile (its operand's largest) fits; among them the least recently
    // used, and among the slots this call has not used, those holding a kept operand's tile from
    // an earlier call (which a later step may take) last.
    const auto rank = [](const tile_slot& s) {
        return std::tuple{s.buf.size(), s.last_use, s.tile < 0 && s.keep.id != 0};
    };
    if (v == nullptr)
        for (auto& s : slots_)
            if (!s.locked && s.buf.size() >= bytes && (v == nullptr || rank(s) < rank(*v))) v = &s;
    if (v == nullptr) {
        bool fits = false;
        for (const auto& x : slots_) fits = fits || x.buf.size() >= bytes;
        throw invalid_argument(dev_.id() + (fits ? ": every tile slot is in use by one task (too few slots)"
                                                 : ": a tile of " + format_bytes(bytes) + " is larger than every slot"));
    }
    unlist(*v, kernels_write);
    if (v->tile >= 0) {
        auto it = index_.find(v->tile);
        if (it != index_.end() && &slots_[it->second] == v) index_.erase(it);
    }
    v->tile = -1;
    return *v;
}

void tile_store::load(tile_slot& s, const host_rect& r) {
    const std::size_t bytes = r.bytes();
    counters_.bytes_h2d += bytes;
    ++counters_.misses;
    dev_.wait(h2d_, *s.released);
    dev_.wait(h2d_, *s.written);
    if (bytes > 0) {
        if (fault_injection::h2d_fails(dev_)) {
            const std::string what = dev_.id() + ": copy to the device failed (injected fault)";
            dev_.enqueue_host(h2d_, [what] { throw device_error(what); }, "injected fault");
        } else if (!pack_ || (!r.contiguous() && !staged(s))) {
            dev_.copy_2d_to_device(h2d_, packed_copy(s.buf.get(), r, true));
        } else if (r.contiguous()) {
            dev_.copy_to_device(h2d_, s.buf.get(), r.base, bytes);
        } else {
            // Gathered on the copy-in stream, so after the slot's last write-back scattered from the same staging.
            counters_.bytes_packed += bytes;
            const copy_2d_desc gather = packed_copy(s.stage.get(), r, true);
            dev_.enqueue_host(h2d_, [gather, r] { copy_region(gather, r, tile_region::full, true); }, "pack");
            dev_.copy_to_device(h2d_, s.buf.get(), s.stage.get(), bytes);
        }
    }
    if (peers_ != nullptr) mark_loaded(s);
    s.ready->record(h2d_);
}

tile_slot& tile_store::input(int tile, std::uint32_t version, const host_rect& r, const operand_keep& keep,
                             std::size_t fit) {
    ++clock_;
    if (auto it = index_.find(tile); it != index_.end()) {
        tile_slot& s = slots_[it->second];
        if (s.version == version) {
            s.last_use = clock_;
            s.locked = true;
            ++counters_.hits;
            counters_.bytes_saved += r.bytes();
            dev_.wait(compute_, *s.ready);
            return s;
        }
    }
    if (keep.id != 0)
        for (tile_slot& s : slots_)
            if (s.tile < 0 && s.keep.id == keep.id && s.keep.generation == keep.generation && s.origin == r) {
                // Left by an earlier call from the same kept operand, unchanged since.
                ++counters_.kept_hits;
                counters_.kept_bytes_saved += r.bytes();
                dev_.wait(compute_, *s.ready);
                s.tile = tile;
                s.version = version;
                s.last_use = clock_;
                s.locked = true;
                index_[tile] = std::size_t(&s - slots_.data());
                list(s);
                return s;
            }
    tile_slot& s = victim(tile, std::max(fit, r.bytes()), false);
    if (!from_peer(s, tile, version, r)) load(s, r);
    dev_.wait(compute_, *s.ready);
    s.origin = r;
    s.keep = keep;
    s.tile = tile;
    s.version = version;
    s.last_use = clock_;
    s.locked = true;
    index_[tile] = std::size_t(&s - slots_.data());
    list(s);
    return s;
}

tile_slot& tile_store::output(int tile, std::uint32_t version, bool load_it, const host_rect& r, std::size_t fit) {
    ++clock_;
    tile_slot* found = nullptr;
    if (auto it = index_.find(tile); it != index_.end() && slots_[it->second].version == version)
        found = &slots_[it->second];
    tile_slot* s = found;
    if (found != nullptr) {
        unlist(*found, true);  // its kernels write a new version into it
        if (load_it) {
            ++counters_.hits;
            counters_.bytes_saved += r.bytes();
        }
        // Kernels write it after its load or last writer, and after the copy out of its last version.
        dev_.wait(compute_, *s->ready);
        dev_.wait(compute_, *s->written);
    } else {
        s = &victim(tile, std::max(fit, r.bytes()), !load_it);
        if (load_it) {
            load(*s, r);
            dev_.wait(compute_, *s->ready);
        } else {
            dev_.wait(compute_, *s->released);
            dev_.wait(compute_, *s->written);
        }
    }
    s->origin = host_rect{};
    s->keep = operand_keep{};
    s->tile = tile;
    s->version = version + 1;
    s->last_use = clock_;
    s->locked = true;
    index_[tile] = std::size_t(s - slots_.data());
    return *s;
}

void tile_store::store(tile_slot& s, const host_rect& r, tile_region region) {
    const std::size_t bytes = r.bytes();
    counters_.bytes_d2h += bytes;
    dev_.wait(d2h_, *s.ready);
    if (bytes == 0) {
        s.written->record(d2h_);
        return;
    }
    if (fault_injection::d2h_fails(dev_)) {
        // Half of the tile's lines get garbage, as from a copy that broke off.
        const std::string what = dev_.id() + ": copy to the host failed half way (injected fault)";
        // (Within the region the copy would write: a triangle's copy never reaches the other one.)
        std::vector<char> garbage(bytes, char(0x7f));
        copy_2d_desc d = packed_copy(nullptr, r, false);
        d.height = (d.height + 1) / 2;
        dev_.enqueue_host(d2h_, [what, d, r, region, garbage = std::move(garbage)] {
            copy_2d_desc g = d;
            g.src = garbage.data();
            copy_region(g, r, region, false);
            throw device_error(what);
        }, "injected fault");
    } else if (region == tile_region::full && (!pack_ || (!r.contiguous() && !staged(s)))) {
        dev_.copy_2d_to_host(d2h_, packed_copy(s.buf.get(), r, false));
    } else if (region == tile_region::full && r.contiguous()) {
        dev_.copy_to_host(d2h_, r.base, s.buf.get(), bytes);
    } else if (region == tile_region::full) {
        counters_.bytes_packed += bytes;
        dev_.copy_to_host(d2h_, s.stage.get(), s.buf.get(), bytes);
        const copy_2d_desc scatter = packed_copy(s.stage.get(), r, false);
        dev_.enqueue_host(d2h_, [scatter, r] { copy_region(scatter, r, tile_region::full, false); }, "unpack");
    } else if (dev_.host_addressable()) {
        const copy_2d_desc d = packed_copy(s.buf.get(), r, false);
        dev_.enqueue_host(d2h_, [d, r, region] { copy_region(d, r, region, false); }, "d2h triangle");
    } else {
        // The whole tile to host staging, then its triangle into the operand (stream order keeps
        // the staging buffer's next use after this one).
        // Pinned on first use, once per call at a slot's size (a triangle is rare on such devices:
        // write_regions_whole sends most diagonal tiles back whole).
        if (region_stage_.size() == 0) region_stage_ = dev_.allocate_host_staging(std::max(slot_bytes_, bytes));
        dev_.copy_to_host(d2h_, region_stage_.get(), s.buf.get(), bytes);
        const copy_2d_desc d = packed_copy(region_stage_.get(), r, false);
        dev_.enqueue_host(d2h_, [d, r, region] { copy_region(d, r, region, false); }, "d2h triangle");
    }
    s.written->record(d2h_);
}

bool tile_store::staged(tile_slot& s) {
    // Made on the slot's first non-contiguous copy and never replaced (copies queued before may
    // still read it); where the host refuses pinned memory, that slot copies in 2-D instead.
    if (s.stage.size() == 0) {
        try {
            s.stage = dev_.allocate_host_staging(s.buf.size());
        } catch (const error&) {
            return false;
        }
    }
    return true;
}

void tile_store::unlock_all() {
    for (auto& s : slots_) s.locked = false;
}

}  // namespace tilestream::detail::engine
