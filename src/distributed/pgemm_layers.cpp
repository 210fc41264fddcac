// 2.5D GEMM over c layers of P x Q grids (k cut into c slices, layer 0 scattering each layer its
// slices of A and B and reducing the partial sums of C), the communication and memory model of
// SUMMA with c layers, and the planner that picks the grid and c from it.
#include "distributed/mpi_support.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace tilestream::distributed {
namespace {

/// One dimension of a window: the sub indices [g0, g0 + len) of a block-cyclic dimension described
/// again from the start of the block holding g0, so that a layer keeps only its slice.
struct window_dim {
    index_t global = 0;       ///< size of the window's matrix in this dimension
    int src = 0;              ///< process holding its first block
    index_t first = 1;        ///< size of the window's first block (the rest of g0's block)
    index_t sub = 1;          ///< 1-based start of [g0, g0 + len) in the window
    index_t local_begin = 0;  ///< where the window starts in the original local array (this process)
    index_t local_count = 0;  ///< local indices of the window on this process
    index_t need_begin = 0;   ///< first local index of [g0, g0 + len) within the window
    index_t need_count = 0;   ///< local indices of [g0, g0 + len) on this process
};

window_dim cut(index_t g0, index_t len, index_t first, index_t nb, int src, int nprocs, int me) {
    const dim_map map{nb, src, nprocs, 0, first};
    const index_t blk = map.block_of(g0);
    const index_t b = blk == 0 ? 0 : map.first_block() + (blk - 1) * nb;  // where g0's block starts
    window_dim w;
    w.global = g0 + len - b;
    w.src = map.owner(g0);
    w.first = map.block_end(g0) - b;
    w.sub = g0 - b + 1;
    w.local_begin = held_before(b, map.first_block(), nb, me, src, nprocs);
    const index_t start = held_before(g0, map.first_block(), nb, me, src, nprocs);
    const index_t end = held_before(g0 + len, map.first_block(), nb, me, src, nprocs);
    w.local_count = end - w.local_begin;
    w.need_begin = start - w.local_begin;
    w.need_count = end - start;
    return w;
}

/// Rows [r0, r0 + nr) x columns [c0, c0 + nc) of a block-cyclic matrix as a window of its own.
struct window {
    window_dim r, c;
    block_cyclic_desc desc;  ///< the original's

    window(const block_cyclic_desc& d, index_t r0, index_t nr, index_t c0, index_t nc, const process_grid& g)
        : r(cut(r0, nr, d.imb, d.mb, d.rsrc, g.rows(), g.my_row())),
          c(cut(c0, nc, d.inb, d.nb, d.csrc, g.cols(), g.my_col())), desc(d) {}
    /// The window's descriptor (DTYPE 2: its first block is the rest of the original's block).
    std::array<int, 11> descriptor(index_t ld) const {
        return {2, desc.ctxt, int(r.global), int(c.global), int(r.first), int(c.first), int(desc.mb), int(desc.nb),
                r.src, c.src, int(ld)};
    }
    index_t needed() const { return r.need_count * c.need_count; }
    index_t compact_ld() const { return std::max<index_t>(1, r.local_count); }
};

template <class T>
void pack(const T* x, index_t ld, index_t r0, index_t nr, index_t c0, index_t nc, T* out) {
    for (index_t j = 0; j < nc; ++j)
        std::copy_n(x + r0 + (c0 + j) * ld, nr, out + j * nr);
}

template <class T>
void unpack(const T* in, T* x, index_t ld, index_t r0, index_t nr, index_t c0, index_t nc) {
    for (index_t j = 0; j < nc; ++j)
        std::copy_n(in + j * nr, nr, x + r0 + (c0 + j) * ld);
}

/// An operand on this layer: where its window lies (layer 0: in the caller's array; other layers:
/// in `owned`, which received the part it multiplies) and its descriptor.
template <class T>
struct layer_operand {
    std::vector<T> owned;
    const T* data = nullptr;
    std::array<int, 11> desc{};
    index_t i = 1, j = 1;
};

/// Layer 0 packs, for every other layer l, the part of window_of(l) it multiplies and scatters it
/// along the fiber (MPI_Scatterv: each layer receives its slice only).
template <class T, class WindowOf>
layer_operand<T> scatter_slices(const layered_grid& lg, const T* x, index_t ldx, WindowOf window_of, pgemm_report& rep) {
    const int layers = lg.layers(), me = lg.my_layer();
    const MPI_Datatype type = mpi_type<T>();
    std::vector<int> counts(std::size_t(layers), 0), displs(std::size_t(layers), 0);
    std::vector<T> send;
    if (me == 0) {
        index_t total = 0;
        for (int l = 1; l < layers; ++l) {
            const window w = window_of(l);
            check_count(w.needed(), "pgemm: a layer's slice");
            check_count(total, "pgemm: the slices of a layer-0 rank");
            counts[std::size_t(l)] = int(w.needed());
            displs[std::size_t(l)] = int(total);
            total += w.needed();
        }
        send.resize(std::size_t(std::max<index_t>(1, total)));
        for (int l = 1; l < layers; ++l) {
            const window w = window_of(l);
            pack(x, ldx, w.r.local_begin + w.r.need_begin, w.r.need_count, w.c.local_begin + w.c.need_begin, w.c.need_count,
                 send.data() + displs[std::size_t(l)]);
        }
        rep.bytes_sent += std::size_t(total) * sizeof(T);
    }
    const window w = window_of(me);
    layer_operand<T> op;
    op.i = w.r.sub;
    op.j = w.c.sub;
    if (me == 0) {
        op.data = x && (w.r.local_begin > 0 || w.c.local_begin > 0) ? x + w.r.local_begin + w.c.local_begin * ldx : x;
        op.desc = w.descriptor(ldx);
        check_mpi(MPI_Scatterv(send.data(), counts.data(), displs.data(), type, MPI_IN_PLACE, 0, type, 0, lg.fiber_comm()),
                  "MPI_Scatterv (k slices)");
        return op;
    }
    std::vector<T> received(std::size_t(std::max<index_t>(1, w.needed())));
    check_mpi(MPI_Scatterv(nullptr, nullptr, nullptr, type, received.data(), int(w.needed()), type, 0, lg.fiber_comm()),
              "MPI_Scatterv (k slices)");
    rep.bytes_received += std::size_t(w.needed()) * sizeof(T);
    // NaN outside the received part: SUMMA must not read it (an element it did would show in C).
    op.owned.assign(std::size_t(w.compact_ld() * std::max<index_t>(1, w.c.local_count)), poison<T>());
    unpack(received.data(), op.owned.data(), w.compact_ld(), w.r.need_begin, w.r.need_count, w.c.need_begin, w.c.need_count);
    op.data = op.owned.data();
    op.desc = w.descriptor(w.compact_ld());
    return op;
}

}  // namespace

template <class T>
pgemm_report pgemm(const layered_grid& lg, op op_a, op op_b, index_t m, index_t n, index_t k, T alpha, const T* a,
                   index_t ia, index_t ja, const int* desca, const T* b, index_t ib, index_t jb, const int* descb,
                   T beta, T* c, index_t ic, index_t jc, const int* descc, const pgemm_options& options) {
    const process_grid& g = lg.layer();
    const int layers = lg.layers(), me = lg.my_layer();
    if (layers == 1) {
        pgemm_report rep = pgemm<T>(g, op_a, op_b, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic, jc,
                                    descc, options);
        rep.layer_k = k;
        return rep;
    }
    const auto start = std::chrono::steady_clock::now();
    if (m < 0 || n < 0 || k < 0)
        throw invalid_argument("pgemm: negative size m=" + std::to_string(m) + " n=" + std::to_string(n) +
                               " k=" + std::to_string(k));
    const bool na = op_a == op::n, nb_ = op_b == op::n;
    // Every layer checks the descriptors as layer 0 does, so a bad one fails on every rank alike.
    describe_operand("A", desca, ia, ja, na ? m : k, na ? k : m, g);
    describe_operand("B", descb, ib, jb, nb_ ? k : n, nb_ ? n : k, g);
    describe_operand("C", descc, ic, jc, m, n, g);
    if (m == 0 || n == 0 || k == 0 || alpha == T(0)) {  // nothing to multiply: layer 0 scales C
        pgemm_report rep;
        if (me == 0)
            rep = pgemm<T>(g, op_a, op_b, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic, jc, descc, options);
        rep.grid_rows = g.rows();
        rep.grid_cols = g.cols();
        rep.layers = layers;
        return rep;
    }
    pgemm_report moved;  // the scatter and the reduction
    // Layer l multiplies k in [layer_k_begin(l), layer_k_begin(l + 1)).
    auto slice = [&](int l) { return std::pair{layer_k_begin(k, l, layers), layer_k_begin(k, l + 1, layers) - layer_k_begin(k, l, layers)}; };
    const block_cyclic_desc d_a = block_cyclic_desc::read(desca, "A"), d_b = block_cyclic_desc::read(descb, "B"),
                            d_c = block_cyclic_desc::read(descc, "C");
    const layer_operand<T> la = scatter_slices<T>(lg, a, d_a.lld, [&](int l) {
        const auto [k0, w] = slice(l);
        return na ? window(d_a, ia - 1, m, ja - 1 + k0, w, g) : window(d_a, ia - 1 + k0, w, ja - 1, m, g);
    }, moved);
    const layer_operand<T> lb = scatter_slices<T>(lg, b, d_b.lld, [&](int l) {
        const auto [k0, w] = slice(l);
        return nb_ ? window(d_b, ib - 1 + k0, w, jb - 1, n, g) : window(d_b, ib - 1, n, jb - 1 + k0, w, g);
    }, moved);

    // C: layer 0 its own with beta, the others a window of the same shape with beta = 0, which
    // starts as NaN so that an element their SUMMA left unwritten would show in the sum.
    const window wc(d_c, ic - 1, m, jc - 1, n, g);
    std::vector<T> c_owned;
    T* c_data = c;
    index_t ldc = d_c.lld;
    if (me == 0) {
        if (c && (wc.r.local_begin > 0 || wc.c.local_begin > 0)) c_data = c + wc.r.local_begin + wc.c.local_begin * ldc;
    } else {
        ldc = wc.compact_ld();
        c_owned.assign(std::size_t(ldc * std::max<index_t>(1, wc.c.local_count)), poison<T>());
        c_data = c_owned.data();
    }
    const auto dc = wc.descriptor(ldc);
    const auto [k0, kw] = slice(me);
    pgemm_report rep = pgemm<T>(g, op_a, op_b, m, n, kw, alpha, la.data, la.i, la.j, la.desc.data(), lb.data, lb.i, lb.j,
                                lb.desc.data(), me == 0 ? beta : T(0), c_data, wc.r.sub, wc.c.sub, dc.data(), options);

    // The partial sums onto layer 0.
    const index_t count = wc.needed();
    check_count(count, "pgemm: a rank's part of C");
    std::vector<T> part(std::size_t(std::max<index_t>(1, count)));
    pack<T>(c_data, ldc, wc.r.need_begin, wc.r.need_count, wc.c.need_begin, wc.c.need_count, part.data());
    const MPI_Datatype type = mpi_type<T>();
    if (me == 0) {
        check_mpi(MPI_Reduce(MPI_IN_PLACE, part.data(), int(count), type, MPI_SUM, 0, lg.fiber_comm()),
                  "MPI_Reduce (partial sums of C)");
        unpack<T>(part.data(), c_data, ldc, wc.r.need_begin, wc.r.need_count, wc.c.need_begin, wc.c.need_count);
        moved.bytes_received += std::size_t(count) * sizeof(T) * std::size_t(layers - 1);
    } else {
        check_mpi(MPI_Reduce(part.data(), nullptr, int(count), type, MPI_SUM, 0, lg.fiber_comm()),
                  "MPI_Reduce (partial sums of C)");
        moved.bytes_sent += std::size_t(count) * sizeof(T);
    }
    rep.bytes_sent += moved.bytes_sent;
    rep.bytes_received += moved.bytes_received;
    rep.layers = layers;
    rep.layer_k = kw;
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return rep;
}

pgemm_traffic model_pgemm_traffic(op op_a, op op_b, index_t m, index_t n, index_t k, int p, int q, int layers,
                                  index_t panel) {
    pgemm_traffic t;
    const double dm = double(m), dn = double(n), dk = double(k), P = p, Q = q, c = std::max(1, layers);
    const double per_layer = P * Q, ranks = per_layer * c;
    // Each layer's SUMMA: a rank receives the A panels of its process row it does not own, the B
    // panels likewise; over the layers k adds up to the whole.
    t.summa_words = (dm * dk * (Q - 1) + dk * dn * (P - 1)) / ranks;
    // Layer 0 keeps the first slice and sends the others' once; every other layer sends its C part once.
    const double kept = double(layer_k_begin(k, 1, int(c)));
    t.replicate_words = (dm + dn) * (dk - kept) / ranks;
    t.reduce_words = (c - 1) * dm * dn / ranks;
    // A transposed operand is moved onto C's rows or columns inside each layer (what stays on its
    // rank is not sent: about one part in P*Q).
    if (is_transposed(op_a)) t.redistribute_words += dm * dk * (1 - 1 / per_layer) / ranks;
    if (is_transposed(op_b)) t.redistribute_words += dk * dn * (1 - 1 / per_layer) / ranks;
    t.words = t.summa_words + t.replicate_words + t.reduce_words + t.redistribute_words;
    // The busiest rank, SUMMA's panels taken as even over the ranks of a layer: a layer-0 rank
    // sends the other layers' slices of its A and B and receives the partial sums of its C; a rank
    // of another layer receives its slices and sends its C once.
    const double local_ab = (dm + dn) * dk / per_layer, local_c = dm * dn / per_layer;
    const double kept_share = c > 1 ? kept / dk : 1, own = t.summa_words + t.redistribute_words;
    t.busiest_words = std::max({own + (1 - kept_share) * local_ab, own + (c - 1) * local_c,
                                c > 1 ? own + local_ab * (dk - kept) / dk / (c - 1) : own});
    const double held = (dm * dk + dk * dn + dm * dn) / per_layer;
    t.lower_bound_words = 2 * dm * dn * dk / (ranks * std::sqrt(std::max(1.0, held)));
    const double flat = (dm * dk + dk * dn + dm * dn) / ranks;
    t.memory_independent_words = std::max(0.0, 3 * std::cbrt(dm * dn * dk / ranks) * std::cbrt(dm * dn * dk / ranks) - flat);
    if (layers <= 1) {
        t.pdgemm_words = t.summa_words;
        // PBLAS transposes a transposed operand across the grid first (each rank sends its share once).
        if (is_transposed(op_a) && ranks > 1) t.pdgemm_words += dm * dk / ranks;
        if (is_transposed(op_b) && ranks > 1) t.pdgemm_words += dk * dn / ranks;
    }
    // A layer-0 rank: its A, B and C, three panels of each operand, a redistributed slice, and
    // with layers the packed slices it scatters and its packed part of C for the reduction.
    const double w = double(std::max<index_t>(1, std::min(panel, std::max<index_t>(1, k))));
    t.memory_words = held + 3 * w * (std::ceil(dm / P) + std::ceil(dn / Q));
    if (is_transposed(op_a)) t.memory_words += dm * dk / ranks;
    if (is_transposed(op_b)) t.memory_words += dk * dn / ranks;
    if (c > 1) t.memory_words += std::max(dm, dn) * dk * (c - 1) / c / per_layer + dm * dn / per_layer;
    return t;
}

pgemm_rank_plan plan_pgemm(op op_a, op op_b, index_t m, index_t n, index_t k, int ranks, std::size_t word_bytes,
                           index_t panel, std::size_t rank_memory_bytes, int layers, int grid_rows, int grid_cols) {
    if (ranks < 1) throw invalid_argument("plan_pgemm: ranks must be at least 1, got " + std::to_string(ranks));
    if (layers < 0) throw collective_error("--layers must be at least 1, got " + std::to_string(layers));
    const bool grid_given = grid_rows > 0 || grid_cols > 0;
    const long long given = (long long)grid_rows * grid_cols;
    const std::string grid_text = std::to_string(grid_rows) + "x" + std::to_string(grid_cols);
    const std::string np = " (mpirun -np " + std::to_string(ranks) + ")";
    if (layers > 0 && ranks % layers != 0)
        throw collective_error("--layers " + std::to_string(layers) + " does not divide the " + std::to_string(ranks) +
                               " ranks started" + np + ": ranks = P*Q*layers");
    if (grid_given) {
        if (grid_rows < 1 || grid_cols < 1) throw collective_error("--grid expects PxQ with positive P and Q, got " + grid_text);
        if (layers > 0 && given * layers != ranks)
            throw collective_error("--grid " + grid_text + " with --layers " + std::to_string(layers) + " has " +
                                   std::to_string(given * layers) + " processes but " + std::to_string(ranks) +
                                   " ranks were started" + np);
        if (layers == 0 && ranks % given != 0)
            throw collective_error("--grid " + grid_text + " has " + std::to_string(given) + " processes but " +
                                   std::to_string(ranks) + " ranks were started" + np);
    }
    const double word = double(word_bytes);
    auto model = [&](int p, int q, int c) { return model_pgemm_traffic(op_a, op_b, m, n, k, p, q, c, panel); };
    pgemm_rank_plan plan;
    bool chosen = false;
    double best = 0, best_mean = 0;
    for (int c = 1; c <= ranks; ++c) {
        if (ranks % c != 0) continue;
        if (layers > 0 ? c != layers : grid_given ? given * c != ranks : c > 1 && c > k) continue;
        const int per_layer = ranks / c;
        // The layer grid: the given one, else the fewest words on the busiest rank, which sets the
        // time (ties to the squarer grid).
        std::pair<int, int> g = grid_given ? std::pair{grid_rows, grid_cols} : square_grid(per_layer);
        double words = model(g.first, g.second, c).busiest_words;
        for (int p = 1; p <= per_layer && !grid_given; ++p) {
            if (per_layer % p) continue;
            const double w = model(p, per_layer / p, c).busiest_words;
            if (w < words * (1 - 1e-9)) {
                g = {p, per_layer / p};
                words = w;
            }
        }
        const pgemm_traffic t = model(g.first, g.second, c);
        const double memory = t.memory_words * word;
        const bool fits = rank_memory_bytes == 0 || memory <= double(rank_memory_bytes);
        plan.candidates.push_back({g.first, g.second, c, t.words, t.busiest_words, memory, fits});
        // Fewest words on the busiest rank among those that fit (c = 1 always qualifies: nothing
        // needs less memory). Layer 0 carries the scatter and the reduction, so the mean would
        // favour layers that leave one rank with more to send than c = 1 gives any rank.
        // Ties (the busiest rank sends as much) go to the fewer words over all ranks.
        const bool fewer = !chosen || t.busiest_words < best * (1 - 1e-9) ||
                           (t.busiest_words <= best * (1 + 1e-9) && t.words < best_mean * (1 - 1e-9));
        if ((fits || c == 1) && fewer) {
            chosen = true;
            best = t.busiest_words;
            best_mean = t.words;
            plan.grid_rows = g.first;
            plan.grid_cols = g.second;
            plan.layers = c;
            plan.traffic = t;
            plan.fits = fits;
        }
        // A forced plan that does not fit is run as asked.
        if (!chosen && (layers > 0 || grid_given)) {
            chosen = true;
            plan.grid_rows = g.first;
            plan.grid_cols = g.second;
            plan.layers = c;
            plan.traffic = t;
            plan.fits = fits;
        }
    }
    return plan;
}

std::pair<int, int> choose_gemm_grid(index_t m, index_t n, index_t k, int ranks) {
    const pgemm_rank_plan plan = plan_pgemm(op::n, op::n, m, n, k, ranks, 8, 256, 0, 1);
    return {plan.grid_rows, plan.grid_cols};
}

#define TILESTREAM_PGEMM_LAYERS(T)                                                                              \
    template pgemm_report pgemm<T>(const layered_grid&, op, op, index_t, index_t, index_t, T, const T*, index_t,      \
                                   index_t, const int*, const T*, index_t, index_t, const int*, T, T*, index_t,       \
                                   index_t, const int*, const pgemm_options&);
TILESTREAM_PGEMM_LAYERS(float)
TILESTREAM_PGEMM_LAYERS(double)
TILESTREAM_PGEMM_LAYERS(std::complex<float>)
TILESTREAM_PGEMM_LAYERS(std::complex<double>)
#undef TILESTREAM_PGEMM_LAYERS

}  // namespace tilestream::distributed
