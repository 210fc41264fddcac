// Jacobi over ranks on an MPI_Cart grid: each rank sweeps its part of the interior, boundary
// strips first so their halos travel (MPI_Isend/Irecv) while the interior is swept, and the
// residual is reduced with MPI_Iallreduce and examined one check late, as the one-process engine
// examines its residual (so both stop after the same iteration).
#include "backends/cpu/thread_pool.hpp"
#include "distributed/mpi_support.hpp"

#include <tilestream/jacobi.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>
#include <tuple>

namespace tilestream::distributed {
namespace {

/// This rank's part: interior rows [r0, r1) and columns [c0, c1) of the field, stored with a
/// one-point ring as (rows + 2) x (cols + 2), row-major.
template <class T>
struct part_field {
    index_t r0 = 0, r1 = 0, c0 = 0, c1 = 0, ld = 0;
    std::vector<T> u, v;
    index_t rows() const { return r1 - r0; }
    index_t cols() const { return c1 - c0; }
};

/// Sweeps local rows [i0, i1) x columns [j0, j1) (ring coordinates) from in to out, with the
/// one-process expression; adds sum((out - in)^2) to *residual when given.
template <class T>
void sweep(const T* in, T* out, index_t ld, index_t i0, index_t i1, index_t j0, index_t j1, double* residual) {
    double sum = 0;
    for (index_t i = i0; i < i1; ++i) {
        const T* c = in + i * ld;
        T* o = out + i * ld;
        for (index_t j = j0; j < j1; ++j) o[j] = T(0.25) * ((c[j - ld] + c[j + ld]) + (c[j - 1] + c[j + 1]));
        if (residual)
            for (index_t j = j0; j < j1; ++j) {
                const double d = double(o[j]) - double(c[j]);
                sum += d * d;
            }
    }
    if (residual) *residual += sum;
}

/// Interior rows of part i when n rows go to p parts (as plan_jacobi cuts them).
std::pair<index_t, index_t> cut(index_t n, int parts, int i) { return {1 + n * i / parts, 1 + n * (i + 1) / parts}; }

}  // namespace

template <class T>
distributed_jacobi_report distributed_jacobi(MPI_Comm comm, index_t nx, index_t ny, const distributed_jacobi_options& opt,
                                             std::vector<T>* gather) {
    int size = 0, world_rank = 0;
    check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    check_mpi(MPI_Comm_rank(comm, &world_rank), "MPI_Comm_rank");
    int p = opt.grid_rows, q = opt.grid_cols;
    if (p == 0 && q == 0) {
        const auto g = square_grid(size);
        p = g.second;  // more rows than columns: row halos are contiguous
        q = g.first;
    }
    if (p < 1 || q < 1 || p * q != size)
        throw collective_error("jacobi: --grid " + std::to_string(p) + "x" + std::to_string(q) + " has " +
                               std::to_string(p * q) + " processes but " + std::to_string(size) + " ranks were started");
    if (nx < 3 || ny < 3) throw collective_error("jacobi: the grid must be at least 3x3, got nx=" + std::to_string(nx) +
                                                 " ny=" + std::to_string(ny));
    if (ny - 2 < p || nx - 2 < q)
        throw collective_error("jacobi: " + std::to_string(ny - 2) + "x" + std::to_string(nx - 2) +
                               " interior points cannot be cut into a " + std::to_string(p) + "x" + std::to_string(q) +
                               " grid of ranks (each needs at least one row and one column)");
    if (opt.check_every < 1) throw collective_error("jacobi: --check-every must be at least 1");
    if (opt.iters < 0) throw collective_error("jacobi: --iters must not be negative");

    const int dims[2] = {p, q}, periods[2] = {0, 0};
    MPI_Comm cart_raw = MPI_COMM_NULL;
    check_mpi(MPI_Cart_create(comm, 2, dims, periods, 0, &cart_raw), "MPI_Cart_create");
    const communicator cart(cart_raw);
    check_mpi(MPI_Comm_set_errhandler(cart.get(), MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    const int rank = cart.rank();
    int coords[2] = {0, 0};
    check_mpi(MPI_Cart_coords(cart.get(), rank, 2, coords), "MPI_Cart_coords");
    int up = MPI_PROC_NULL, down = MPI_PROC_NULL, left = MPI_PROC_NULL, right = MPI_PROC_NULL;
    check_mpi(MPI_Cart_shift(cart.get(), 0, 1, &up, &down), "MPI_Cart_shift (rows)");
    check_mpi(MPI_Cart_shift(cart.get(), 1, 1, &left, &right), "MPI_Cart_shift (columns)");

    // The starting values of the fixed boundary: the one-process start on an ny x 3 field gives
    // exactly its columns 0 and nx-1 (rows 0 and ny-1 are 0 between them, the interior 0).
    host_matrix<T> edge(ny, 3);
    fill_jacobi_start<T>(edge.view());

    part_field<T> f;
    std::tie(f.r0, f.r1) = cut(ny - 2, p, coords[0]);
    std::tie(f.c0, f.c1) = cut(nx - 2, q, coords[1]);
    const index_t lr = f.rows(), lc = f.cols();
    f.ld = lc + 2;
    f.u.assign(std::size_t((lr + 2) * f.ld), T(0));
    for (index_t i = 0; i < lr + 2; ++i) {
        const index_t gi = f.r0 - 1 + i;
        if (f.c0 == 1) f.u[std::size_t(i * f.ld)] = edge(gi, 0);
        if (f.c1 == nx - 1) f.u[std::size_t(i * f.ld + lc + 1)] = edge(gi, 2);
    }
    f.v = f.u;  // the fixed boundary in both buffers

    distributed_jacobi_report rep;
    rep.grid_rows = p;
    rep.grid_cols = q;
    const MPI_Datatype type = mpi_type<T>();
    check_count((lr + 2) * f.ld, "jacobi: a rank's part");
    const auto lr_n = static_cast<std::size_t>(lr);
    std::vector<T> send_left(lr_n), send_right(lr_n), recv_left(lr_n), recv_right(lr_n);
    std::vector<request> halo(8);
    std::optional<cpu::thread_pool> pool;
    if (opt.threads > 1) pool.emplace(opt.threads);
    std::vector<double> partial(std::size_t(std::max(1, opt.threads)), 0.0);
    const auto t0 = std::chrono::steady_clock::now();

    double local_sum = 0, global_sum = 0;
    std::optional<index_t> pending;  // the check whose reduction is in flight
    request reduction;
    index_t done = 0;
    bool stop = false;
    const index_t n = opt.iters, k = opt.check_every;
    for (index_t t = 1; t <= n && !stop; ++t) {
        const bool check = t % k == 0 || t == n;
        const T* in = f.u.data();
        T* out = f.v.data();
        double sum = 0;
        double* res = check ? &sum : nullptr;
        // Boundary strips of the part first: top and bottom rows, then the left and right columns
        // between them (a part of one row or column is all strip).
        sweep(in, out, f.ld, 1, 2, 1, lc + 1, res);
        if (lr > 1) sweep(in, out, f.ld, lr, lr + 1, 1, lc + 1, res);
        if (lr > 2) {
            sweep(in, out, f.ld, 2, lr, 1, 2, res);
            if (lc > 1) sweep(in, out, f.ld, 2, lr, lc, lc + 1, res);
        }
        // Their halos leave while the interior is swept.
        for (index_t i = 0; i < lr; ++i) {
            send_left[std::size_t(i)] = out[(i + 1) * f.ld + 1];
            send_right[std::size_t(i)] = out[(i + 1) * f.ld + lc];
        }
        const int row_count = int(lc), col_count = int(lr);
        check_mpi(MPI_Irecv(out + 1, row_count, type, up, 0, cart.get(), halo[0].slot("MPI_Irecv")), "MPI_Irecv (from up)");
        check_mpi(MPI_Irecv(out + (lr + 1) * f.ld + 1, row_count, type, down, 1, cart.get(), halo[1].slot("MPI_Irecv")),
                  "MPI_Irecv (from down)");
        check_mpi(MPI_Irecv(recv_left.data(), col_count, type, left, 2, cart.get(), halo[2].slot("MPI_Irecv")),
                  "MPI_Irecv (from left)");
        check_mpi(MPI_Irecv(recv_right.data(), col_count, type, right, 3, cart.get(), halo[3].slot("MPI_Irecv")),
                  "MPI_Irecv (from right)");
        check_mpi(MPI_Isend(out + f.ld + 1, row_count, type, up, 1, cart.get(), halo[4].slot("MPI_Isend")), "MPI_Isend (to up)");
        check_mpi(MPI_Isend(out + lr * f.ld + 1, row_count, type, down, 0, cart.get(), halo[5].slot("MPI_Isend")),
                  "MPI_Isend (to down)");
        check_mpi(MPI_Isend(send_left.data(), col_count, type, left, 3, cart.get(), halo[6].slot("MPI_Isend")),
                  "MPI_Isend (to left)");
        check_mpi(MPI_Isend(send_right.data(), col_count, type, right, 2, cart.get(), halo[7].slot("MPI_Isend")),
                  "MPI_Isend (to right)");
        for (int d : {up, down}) rep.halo_bytes += d != MPI_PROC_NULL ? std::size_t(lc) * sizeof(T) : 0;
        for (int d : {left, right}) rep.halo_bytes += d != MPI_PROC_NULL ? std::size_t(lr) * sizeof(T) : 0;
        // The interior, in row blocks with the halo requests tested between them (MPI moves a
        // large message only inside MPI calls); each block's rows split over the rank's threads.
        if (lr > 2 && lc > 2) {
            const index_t blocks = std::clamp<index_t>((lr - 2) / 64, 1, 8);
            for (index_t bk = 0; bk < blocks; ++bk) {
                const index_t i0 = 2 + (lr - 2) * bk / blocks, i1 = 2 + (lr - 2) * (bk + 1) / blocks;
                if (!pool) {
                    sweep(in, out, f.ld, i0, i1, 2, lc, res);
                } else {
                    const int parts = int(std::min<index_t>(i1 - i0, pool->size()));
                    std::fill(partial.begin(), partial.end(), 0.0);
                    pool->run(parts, [&](int part) {
                        sweep(in, out, f.ld, i0 + (i1 - i0) * part / parts, i0 + (i1 - i0) * (part + 1) / parts, 2, lc,
                              res ? &partial[std::size_t(part)] : nullptr);
                    });
                    for (int part = 0; part < parts; ++part) sum += partial[std::size_t(part)];  // in part order
                }
                for (auto& h : halo) h.test();
            }
        }
        for (auto& h : halo) h.wait();
        for (index_t i = 0; i < lr; ++i) {
            if (left != MPI_PROC_NULL) out[(i + 1) * f.ld] = recv_left[std::size_t(i)];
            if (right != MPI_PROC_NULL) out[(i + 1) * f.ld + lc + 1] = recv_right[std::size_t(i)];
        }
        std::swap(f.u, f.v);
        done = t;
        if (!check) continue;
        if (pending) {
            reduction.wait();
            if (opt.tol > 0 && std::sqrt(global_sum) < opt.tol) {
                rep.converged = true;
                stop = true;
            }
        }
        local_sum = sum;
        check_mpi(MPI_Iallreduce(&local_sum, &global_sum, 1, MPI_DOUBLE, MPI_SUM, cart.get(), reduction.slot("MPI_Iallreduce")),
                  "MPI_Iallreduce");
        pending = t;
    }
    reduction.wait();
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rep.iterations = done;
    rep.residual = pending ? std::sqrt(global_sum) : std::nan("");
    if (!rep.converged && opt.tol > 0 && rep.residual < opt.tol) rep.converged = true;

    if (gather) {
        std::vector<T> mine(static_cast<std::size_t>(lr * lc));
        for (index_t i = 0; i < lr; ++i)
            for (index_t j = 0; j < lc; ++j) mine[std::size_t(i * lc + j)] = f.u[std::size_t((i + 1) * f.ld + j + 1)];
        const auto ranks = static_cast<std::size_t>(size);
        std::vector<int> counts(ranks), displs(ranks);
        std::vector<std::array<index_t, 4>> extents(ranks);
        index_t total = 0;
        for (int r = 0; r < size; ++r) {
            int c[2];
            check_mpi(MPI_Cart_coords(cart.get(), r, 2, c), "MPI_Cart_coords");
            const auto [a0, a1] = cut(ny - 2, p, c[0]);
            const auto [b0, b1] = cut(nx - 2, q, c[1]);
            extents[std::size_t(r)] = {a0, a1, b0, b1};
            counts[std::size_t(r)] = int((a1 - a0) * (b1 - b0));
            displs[std::size_t(r)] = int(total);
            total += (a1 - a0) * (b1 - b0);
        }
        if (rank == 0) check_count(total, "jacobi: the gathered field");
        std::vector<T> all(rank == 0 ? std::size_t(total) : 1);
        check_mpi(MPI_Gatherv(mine.data(), int(lr * lc), type, all.data(), counts.data(), displs.data(), type, 0, cart.get()),
                  "MPI_Gatherv (field)");
        gather->clear();
        if (rank == 0) {
            host_matrix<T> field(ny, nx);
            fill_jacobi_start<T>(field.view());
            for (int r = 0; r < size; ++r) {
                const auto [a0, a1, b0, b1] = extents[std::size_t(r)];
                const T* src = all.data() + displs[std::size_t(r)];
                for (index_t i = a0; i < a1; ++i)
                    for (index_t j = b0; j < b1; ++j) field(i, j) = *src++;
            }
            gather->assign(field.data(), field.data() + ny * nx);
        }
    }
    return rep;
}

template distributed_jacobi_report distributed_jacobi<float>(MPI_Comm, index_t, index_t, const distributed_jacobi_options&,
                                                             std::vector<float>*);
template distributed_jacobi_report distributed_jacobi<double>(MPI_Comm, index_t, index_t,
                                                              const distributed_jacobi_options&, std::vector<double>*);

}  // namespace tilestream::distributed
