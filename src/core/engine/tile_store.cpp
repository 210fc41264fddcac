// One device's tile store: slots, versions, LRU, loads and write-back (see tile_store.hpp).
#include "core/engine/tile_store.hpp"

#include "core/fault_injection.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <chrono>
#include <tuple>
#include <cstring>
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
    for (stream* st : {h2d.get(), compute.get(), d2h.get()}) {
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

tile_slot& tile_store::victim(int tile, std::size_t bytes) {
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
                return s;
            }
    tile_slot& s = victim(tile, std::max(fit, r.bytes()));
    load(s, r);
    dev_.wait(compute_, *s.ready);
    s.origin = r;
    s.keep = keep;
    s.tile = tile;
    s.version = version;
    s.last_use = clock_;
    s.locked = true;
    index_[tile] = std::size_t(&s - slots_.data());
    return s;
}

tile_slot& tile_store::output(int tile, std::uint32_t version, bool load_it, const host_rect& r, std::size_t fit) {
    ++clock_;
    tile_slot* found = nullptr;
    if (auto it = index_.find(tile); it != index_.end() && slots_[it->second].version == version)
        found = &slots_[it->second];
    tile_slot* s = found;
    if (found != nullptr) {
        if (load_it) {
            ++counters_.hits;
            counters_.bytes_saved += r.bytes();
        }
        // Kernels write it after its load or last writer, and after the copy out of its last version.
        dev_.wait(compute_, *s->ready);
        dev_.wait(compute_, *s->written);
    } else {
        s = &victim(tile, std::max(fit, r.bytes()));
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
