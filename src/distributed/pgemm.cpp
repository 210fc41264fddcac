// Distributed GEMM: SUMMA over a P x Q grid on block-cyclic operands described as ScaLAPACK does,
// panels broadcast with MPI_Ibcast (two in flight) while each rank's local GEMM runs on its devices.
#include "distributed/mpi_support.hpp"

#include <tilestream/gemm.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

namespace tilestream::distributed {

block_cyclic_desc block_cyclic_desc::read(const int* d, const std::string& name) {
    if (d == nullptr) throw invalid_argument("pgemm: descriptor of " + name + " is null");
    block_cyclic_desc r;
    r.dtype = d[0];
    r.ctxt = d[1];
    r.m = d[2];
    r.n = d[3];
    if (d[0] == 1) {
        r.imb = r.mb = d[4];
        r.inb = r.nb = d[5];
        r.rsrc = d[6];
        r.csrc = d[7];
        r.lld = d[8];
    } else if (d[0] == 2) {
        r.imb = d[4];
        r.inb = d[5];
        r.mb = d[6];
        r.nb = d[7];
        r.rsrc = d[8];
        r.csrc = d[9];
        r.lld = d[10];
    } else {
        throw invalid_argument("pgemm: descriptor of " + name + " has DTYPE " + std::to_string(d[0]) +
                               " (1, block-cyclic, or 2, block-cyclic with a first block of its own, are known)");
    }
    return r;
}

void block_cyclic_desc::write11(int* out) const {
    const int v[11] = {2, ctxt, int(m), int(n), int(imb), int(inb), int(mb), int(nb), rsrc, csrc, int(lld)};
    std::copy(v, v + 11, out);
}

operand_desc describe_operand(const char* name, const int* desc, index_t i, index_t j, index_t rows, index_t cols,
                              const process_grid& g) {
    const std::string n(name);
    const block_cyclic_desc d = block_cyclic_desc::read(desc, n);
    if (d.m < 0 || d.n < 0) throw invalid_argument("pgemm: descriptor of " + n + " has a negative size " +
                                                   std::to_string(d.m) + "x" + std::to_string(d.n));
    if (d.mb < 1 || d.nb < 1 || d.imb < 1 || d.inb < 1)
        throw invalid_argument("pgemm: descriptor of " + n + " has block " + std::to_string(d.mb) + "x" +
                               std::to_string(d.nb) + ", first block " + std::to_string(d.imb) + "x" +
                               std::to_string(d.inb) + " (blocks must be at least 1x1)");
    if (d.rsrc < 0 || d.rsrc >= g.rows() || d.csrc < 0 || d.csrc >= g.cols())
        throw invalid_argument("pgemm: descriptor of " + n + " has source process (" + std::to_string(d.rsrc) + ", " +
                               std::to_string(d.csrc) + ") outside the " + std::to_string(g.rows()) + "x" +
                               std::to_string(g.cols()) + " grid");
    const dim_map rmap{d.mb, d.rsrc, g.rows(), i - 1, d.imb}, cmap{d.nb, d.csrc, g.cols(), j - 1, d.inb};
    const index_t local_rows = held_before(d.m, d.imb, d.mb, g.my_row(), d.rsrc, g.rows());
    const index_t local_cols = held_before(d.n, d.inb, d.nb, g.my_col(), d.csrc, g.cols());
    // As PBLAS: LLD >= max(1, local rows) where the rank holds columns, else >= 1.
    if (d.lld < 1 || (local_cols > 0 && d.lld < std::max<index_t>(1, local_rows)))
        throw invalid_argument("pgemm: descriptor of " + n + " has LLD " + std::to_string(d.lld) + " but rank " +
                               std::to_string(g.rank()) + " holds " + std::to_string(local_rows) + " rows");
    if (i < 1 || j < 1 || i - 1 > d.m - rows || j - 1 > d.n - cols)
        throw invalid_argument("pgemm: " + n + "(" + std::to_string(i) + ":" + std::to_string(i - 1 + rows) + ", " +
                               std::to_string(j) + ":" + std::to_string(j - 1 + cols) + ") is outside the " +
                               std::to_string(d.m) + "x" + std::to_string(d.n) + " matrix");
    return {name, rmap, cmap, d.lld};
}

namespace {

/// A matrix on this rank laid out as SUMMA reads it: `rows` local rows from row `row0`, local
/// columns from `col0`, column-major with leading dimension ld; k spread by `kmap`.
template <class T>
struct summa_operand {
    const T* data = nullptr;
    index_t ld = 1, row0 = 0, col0 = 0;
    dim_map kmap;
    std::vector<T> owned;  ///< the redistributed copy, when there is one
};

/// The local multiplies of one pgemm: calls of the rank's context, plans kept per panel shape.
struct local_multiply {
    tilestream::context* ctx = nullptr;
    const gemm_call_options* call = nullptr;
    std::map<std::tuple<index_t, index_t, index_t, bool>, gemm_plan> plans;

    template <class T>
    void run(index_t m, index_t n, index_t k, T alpha, const T* a, const T* b, index_t ldb, T beta, T* c, index_t ldc) {
        const host_matrix_view<const T> av(a, m, k, layout::col_major, std::max<index_t>(1, m));
        const host_matrix_view<const T> bv(b, k, n, layout::col_major, std::max<index_t>(1, ldb));
        const host_matrix_view<T> cv(c, m, n, layout::col_major, ldc);
        const auto key = std::make_tuple(m, n, k, beta != T(0));
        auto it = plans.find(key);
        if (it == plans.end()) it = plans.emplace(key, ctx->plan<T>(op::n, op::n, alpha, av, bv, beta, cv, *call)).first;
        ctx->execute<T>(it->second, alpha, av, bv, beta, cv, *call);
    }
};

/// The context a pgemm opens when it is given none: one CPU thread (a rank per core). Its calls
/// step only when they carry a cancel flag or a step callback, as every context's do.
context_options own_options() { return context_options{.cpu_threads = 1}; }

/// Scales the local part of C by beta (0 overwrites: C is not read, as in BLAS).
template <class T>
void scale_local(T* c, index_t ldc, index_t rows, index_t cols, T beta) {
    for (index_t j = 0; j < cols; ++j)
        for (index_t i = 0; i < rows; ++i) c[i + j * ldc] = beta == T(0) ? T(0) : beta * c[i + j * ldc];
}

}  // namespace

template <class T>
pgemm_report pgemm(const process_grid& grid, op op_a, op op_b, index_t m, index_t n, index_t k, T alpha, const T* a,
                   index_t ia, index_t ja, const int* desca, const T* b, index_t ib, index_t jb, const int* descb,
                   T beta, T* c, index_t ic, index_t jc, const int* descc, const pgemm_options& options) {
    const auto start = std::chrono::steady_clock::now();
    if (m < 0 || n < 0 || k < 0)
        throw invalid_argument("pgemm: negative size m=" + std::to_string(m) + " n=" + std::to_string(n) +
                               " k=" + std::to_string(k));
    const bool na = op_a == op::n, nb_ = op_b == op::n;
    const operand_desc da = describe_operand("A", desca, ia, ja, na ? m : k, na ? k : m, grid);
    const operand_desc db = describe_operand("B", descb, ib, jb, nb_ ? k : n, nb_ ? n : k, grid);
    const operand_desc dc = describe_operand("C", descc, ic, jc, m, n, grid);
    pgemm_report rep;
    rep.grid_rows = grid.rows();
    rep.grid_cols = grid.cols();

    // This rank's part of C(ic:, jc:): a contiguous range of local rows and columns.
    const index_t lr = dc.rows.owned(m, grid.my_row()), lc = dc.cols.owned(n, grid.my_col());
    const index_t c_r0 = dc.rows.first_local(grid.my_row()), c_c0 = dc.cols.first_local(grid.my_col());
    // A rank without elements of C may pass no array at all.
    T* const c_local = lr > 0 && lc > 0 ? c + c_r0 + c_c0 * dc.ld : nullptr;

    if (m == 0 || n == 0) return rep;
    if (k == 0 || alpha == T(0)) {
        if (lr > 0 && lc > 0 && beta != T(1)) scale_local(c_local, dc.ld, lr, lc, beta);
        rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return rep;
    }
    if (grid.rows() == 1 && grid.cols() == 1) {
        // One process holds every element (at its global index, whatever the blocks): one call of
        // the rank's context on the sub-matrices where they lie, no panels and no copies. (With a
        // reproducible context the call adds k in the same k-blocks as the panels would.)
        std::optional<tilestream::context> own;
        tilestream::context* ctx = options.context ? options.context : &own.emplace("cpu", own_options());
        const index_t ar = na ? m : k, ac = na ? k : m, br = nb_ ? k : n, bc = nb_ ? n : k;
        const host_matrix_view<const T> av(a + da.rows.local(0) + da.cols.local(0) * da.ld, ar, ac, layout::col_major, da.ld);
        const host_matrix_view<const T> bv(b + db.rows.local(0) + db.cols.local(0) * db.ld, br, bc, layout::col_major, db.ld);
        const host_matrix_view<T> cv(c_local, m, n, layout::col_major, dc.ld);
        const gemm_plan plan = ctx->plan<T>(op_a, op_b, alpha, av, bv, beta, cv, options.call);
        ctx->execute<T>(plan, alpha, av, bv, beta, cv, options.call);
        rep.panels = 1;
        rep.panel_width = k;
        rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return rep;
    }
    const index_t panel = options.panel > 0 ? options.panel : 256;

    // op(A) as SUMMA wants it: C's rows down the process rows, k across the process columns.
    summa_operand<T> sa;
    if (na && da.rows.same_as(dc.rows)) {
        sa.data = a;
        sa.ld = da.ld;
        sa.row0 = da.rows.first_local(grid.my_row());
        sa.col0 = 0;
        sa.kmap = da.cols;
    } else {
        // Not transposed, A keeps its own k-columns and only its rows move to C's (a sub-matrix at
        // another offset); transposed, it is laid out anew in panel-wide k-blocks.
        sa.kmap = na ? da.cols : dim_map{panel, 0, grid.cols(), 0};
        const index_t lk = sa.kmap.owned(k, grid.my_col());
        sa.owned.resize(std::size_t(std::max<index_t>(1, lr * lk)));
        redistribute<T>(grid, a, da.ld, da.rows, da.cols, op_a, dc.rows, sa.kmap, m, k, sa.owned.data(), rep);
        sa.data = sa.owned.data();
        sa.ld = std::max<index_t>(1, lr);
        sa.col0 = -sa.kmap.first_local(grid.my_col());  // kmap.local counts from the map's first local column
        rep.redistributed_a = true;
    }
    // op(B): k down the process rows, C's columns across the process columns.
    summa_operand<T> sb;
    if (nb_ && db.cols.same_as(dc.cols)) {
        sb.data = b;
        sb.ld = db.ld;
        sb.row0 = 0;
        sb.col0 = db.cols.first_local(grid.my_col());
        sb.kmap = db.rows;
    } else {
        // Not transposed, B keeps its own k-rows and only its columns move to C's.
        sb.kmap = nb_ ? db.rows : dim_map{panel, 0, grid.rows(), 0};
        const index_t lk = sb.kmap.owned(k, grid.my_row());
        sb.owned.resize(std::size_t(std::max<index_t>(1, lk * lc)));
        redistribute<T>(grid, b, db.ld, db.rows, db.cols, op_b, sb.kmap, dc.cols, k, n, sb.owned.data(), rep);
        sb.data = sb.owned.data();
        sb.ld = std::max<index_t>(1, lk);
        sb.row0 = -sb.kmap.first_local(grid.my_row());
        rep.redistributed_b = true;
    }

    // The pieces: k cut where either operand's k-blocks end (and where a k-block of
    // options.k_block ends); a panel is one piece, or with k_block the pieces of one k-block.
    struct piece {
        index_t k0, width;
        int a_root, b_root;
        index_t a_col, b_row;  ///< local column of op(A), local row of op(B) where the piece starts
    };
    std::vector<piece> pieces;
    const index_t kb = options.k_block;
    for (index_t g = 0; g < k;) {
        index_t end = std::min({sa.kmap.block_end(g), sb.kmap.block_end(g), k});
        if (kb > 0) end = std::min(end, (g / kb + 1) * kb);
        pieces.push_back({g, end - g, sa.kmap.owner(g), sb.kmap.owner(g), sa.kmap.local(g), sb.kmap.local(g)});
        g = end;
    }
    struct k_panel {
        std::size_t first, count;  ///< its pieces
        index_t width;
    };
    std::vector<k_panel> steps;
    for (std::size_t i = 0; i < pieces.size();) {
        k_panel s{i, 0, 0};
        const index_t block = kb > 0 ? pieces[i].k0 / kb : -1;
        while (i < pieces.size() && (s.count == 0 || (kb > 0 && pieces[i].k0 / kb == block))) {
            s.width += pieces[i].width;
            ++s.count;
            ++i;
        }
        steps.push_back(s);
    }
    index_t wmax = 0;
    for (const auto& s : steps) wmax = std::max(wmax, s.width);
    rep.panels = index_t(steps.size());
    rep.panel_width = wmax;
    check_count(lr * wmax, "pgemm: an A panel");
    check_count(wmax * lc, "pgemm: a B panel");

    std::optional<tilestream::context> own;
    local_multiply mul;
    mul.ctx = options.context;
    mul.call = &options.call;
    if (!mul.ctx) mul.ctx = &own.emplace("cpu", own_options());
    trace_sink* const trace = options.call.run.trace;

    // Three panel buffers per operand: the one being multiplied and two in flight. A panel of A
    // is lr x width (leading dimension lr), one of B width x lc (leading dimension width); a
    // piece of B inside a wider panel is a strided block, broadcast with a vector datatype.
    constexpr int depth = 3;
    std::vector<std::vector<T>> apan(depth), bpan(depth);
    for (int i = 0; i < depth; ++i) {
        apan[i].resize(std::size_t(std::max<index_t>(1, lr * wmax)));
        bpan[i].resize(std::size_t(std::max<index_t>(1, wmax * lc)));
    }
    std::size_t most_pieces = 1;
    for (const auto& s : steps) most_pieces = std::max(most_pieces, s.count);
    std::vector<std::vector<request>> areq(depth), breq(depth);
    std::vector<std::vector<datatype>> btypes(depth);
    for (int i = 0; i < depth; ++i) {
        areq[i] = std::vector<request>(most_pieces);
        breq[i] = std::vector<request>(most_pieces);
        btypes[i].resize(most_pieces);
    }
    const MPI_Datatype type = mpi_type<T>();
    const int row_size = grid.cols(), col_size = grid.rows();

    auto post = [&](std::size_t s) {
        const k_panel& st = steps[s];
        const int slot = int(s % depth);
        index_t off = 0;
        for (std::size_t p = 0; p < st.count; ++p) {
            const piece& pc = pieces[st.first + p];
            if (lr > 0) {
                T* buf = apan[slot].data() + off * lr;
                if (grid.my_col() == pc.a_root) {
                    for (index_t j = 0; j < pc.width; ++j)
                        std::memcpy(buf + j * lr, sa.data + sa.row0 + (sa.col0 + pc.a_col + j) * sa.ld,
                                    std::size_t(lr) * sizeof(T));
                    rep.bytes_sent += std::size_t(lr * pc.width) * sizeof(T) * std::size_t(row_size - 1);
                } else {
                    rep.bytes_received += std::size_t(lr * pc.width) * sizeof(T);
                }
                if (row_size > 1) areq[slot][p].start_ibcast(buf, int(lr * pc.width), type, pc.a_root, grid.row_comm());
            }
            if (lc > 0) {
                T* buf = bpan[slot].data() + off;
                if (grid.my_row() == pc.b_root) {
                    for (index_t j = 0; j < lc; ++j)
                        std::memcpy(buf + j * st.width, sb.data + sb.row0 + pc.b_row + (sb.col0 + j) * sb.ld,
                                    std::size_t(pc.width) * sizeof(T));
                    rep.bytes_sent += std::size_t(pc.width * lc) * sizeof(T) * std::size_t(col_size - 1);
                } else {
                    rep.bytes_received += std::size_t(pc.width * lc) * sizeof(T);
                }
                if (col_size > 1) {
                    if (st.count == 1) {
                        breq[slot][p].start_ibcast(buf, int(pc.width * lc), type, pc.b_root, grid.col_comm());
                    } else {
                        MPI_Datatype v = MPI_DATATYPE_NULL;
                        check_mpi(MPI_Type_vector(int(lc), int(pc.width), int(st.width), type, &v), "MPI_Type_vector");
                        btypes[slot][p] = datatype(v);
                        breq[slot][p].start_ibcast(buf, 1, btypes[slot][p].get(), pc.b_root, grid.col_comm());
                    }
                }
            }
            off += pc.width;
        }
    };
    // Broadcasts progress only inside MPI calls: the local GEMM is cut into column chunks and
    // the requests in flight are tested between them.
    auto poke = [&]() {
        for (int i = 0; i < depth; ++i)
            for (std::size_t p = 0; p < most_pieces; ++p) {
                areq[i][p].test();
                breq[i][p].test();
            }
    };
    const index_t chunks = std::clamp<index_t>(lc / 128, 1, 4);
    for (std::size_t s = 0; s < std::min<std::size_t>(2, steps.size()); ++s) post(s);
    for (std::size_t s = 0; s < steps.size(); ++s) {
        const int slot = int(s % depth);
        const double w0 = trace ? trace_clock_seconds() : 0;
        for (std::size_t p = 0; p < steps[s].count; ++p) {
            areq[slot][p].wait();
            breq[slot][p].wait();
        }
        if (trace) trace->record("mpi", 0, span_kind::host, "wait for panel " + std::to_string(s), 0, 0, w0, trace_clock_seconds());
        if (s + 2 < steps.size()) post(s + 2);
        if (lr > 0 && lc > 0) {
            const T b_eff = s == 0 ? beta : T(1);
            const index_t w = steps[s].width;
            for (index_t ch = 0; ch < chunks; ++ch) {
                const index_t j0 = lc * ch / chunks, j1 = lc * (ch + 1) / chunks;
                mul.run<T>(lr, j1 - j0, w, alpha, apan[slot].data(), bpan[slot].data() + j0 * w, w, b_eff,
                           c_local + j0 * dc.ld, dc.ld);
                poke();
            }
        }
    }
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return rep;
}

#define TILESTREAM_PGEMM(T)                                                                                     \
    template pgemm_report pgemm<T>(const process_grid&, op, op, index_t, index_t, index_t, T, const T*, index_t,      \
                                   index_t, const int*, const T*, index_t, index_t, const int*, T, T*, index_t,       \
                                   index_t, const int*, const pgemm_options&);
TILESTREAM_PGEMM(float)
TILESTREAM_PGEMM(double)
TILESTREAM_PGEMM(std::complex<float>)
TILESTREAM_PGEMM(std::complex<double>)
#undef TILESTREAM_PGEMM

}  // namespace tilestream::distributed
