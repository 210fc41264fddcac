// Jacobi over ranks on an MPI_Cart grid: each rank runs the one-process engine on its devices for
// its part of the field; through the engine's outer-boundary hook, the part's edge strips leave
// (MPI_Isend/Irecv) as soon as they are swept while the devices sweep the interior, and the
// residual is combined (MPI_Iallgather, summed in rank order) and examined one check late, as the
// one-process engine examines its residual (so both stop after the same iteration).
#include "core/jacobi_outer.hpp"
#include "distributed/mpi_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/jacobi.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <optional>
#include <tuple>

namespace tilestream::distributed {
namespace {

/// Interior rows of part i when n rows go to p parts (as plan_jacobi cuts them).
std::pair<index_t, index_t> cut(index_t n, int parts, int i) { return {1 + n * i / parts, 1 + n * (i + 1) / parts}; }

/// The engine's outer boundary on a rank: its neighbours on the MPI_Cart grid.
class rank_boundary final : public detail::jacobi_outer_boundary {
public:
    /// neighbours: up, down, left, right (MPI_PROC_NULL at the global boundary); a rank's part
    /// has `rows` x `cols` interior points.
    rank_boundary(MPI_Comm cart, std::array<int, 4> neighbours, index_t rows, index_t cols, MPI_Datatype type,
                  std::size_t elem)
        : cart_(cart), nb_(neighbours), type_(type), elem_(elem), sums_(std::size_t(communicator(cart, false).size())) {
        count_ = {int(cols), int(cols), int(rows), int(rows)};
    }
    bool has_neighbour(int s) const override { return nb_[std::size_t(s)] != MPI_PROC_NULL; }
    void start_exchange(index_t, const std::array<const void*, 4>& send, const std::array<void*, 4>& recv) override {
        // A strip sent to side s arrives from the opposite side: tag = the side it lands on.
        static constexpr int opposite[4] = {detail::side_down, detail::side_up, detail::side_right, detail::side_left};
        static const char* const recv_call[4] = {"MPI_Irecv (from up)", "MPI_Irecv (from down)", "MPI_Irecv (from left)",
                                                 "MPI_Irecv (from right)"};
        static const char* const send_call[4] = {"MPI_Isend (to up)", "MPI_Isend (to down)", "MPI_Isend (to left)",
                                                 "MPI_Isend (to right)"};
        for (std::size_t s = 0; s < 4; ++s) {
            if (!has_neighbour(int(s))) continue;
            check_mpi(MPI_Irecv(recv[s], count_[s], type_, nb_[s], int(s), cart_, halo_[s].slot("MPI_Irecv")), recv_call[s]);
        }
        for (std::size_t s = 0; s < 4; ++s) {
            if (!has_neighbour(int(s))) continue;
            check_mpi(MPI_Isend(send[s], count_[s], type_, nb_[s], opposite[s], cart_, halo_[4 + s].slot("MPI_Isend")),
                      send_call[s]);
            halo_bytes += std::size_t(count_[s]) * elem_;
        }
    }
    void finish_exchange() override {
        for (auto& h : halo_) h.wait();
    }
    void start_residual(double local_sum) override {
        local_ = local_sum;
        // Gathered, not reduced: every rank sums in rank order, so all get the same bits and stop alike.
        check_mpi(MPI_Iallgather(&local_, 1, MPI_DOUBLE, sums_.data(), 1, MPI_DOUBLE, cart_, reduction_.slot("MPI_Iallgather")),
                  "MPI_Iallgather (residual)");
    }
    double finish_residual() override {
        reduction_.wait();
        double sum = 0;
        for (double v : sums_) sum += v;
        return sum;
    }
    std::size_t halo_bytes = 0;  ///< sent by this rank

private:
    MPI_Comm cart_;
    std::array<int, 4> nb_;
    std::array<int, 4> count_{};
    MPI_Datatype type_;
    std::size_t elem_;
    std::array<request, 8> halo_;
    request reduction_;
    double local_ = 0;
    std::vector<double> sums_;
};

/// Throws the same collective_error on every rank when `message` is not empty on some rank (the
/// first such rank's message), so an error that depends on a rank's part ends every rank alike.
void agree_on_error(MPI_Comm comm, const std::string& message) {
    const communicator c(comm, false);
    const int mine = message.empty() ? c.size() : c.rank();
    int first = 0;
    check_mpi(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (error)");
    if (first == c.size()) return;
    int length = int(message.size());
    check_mpi(MPI_Bcast(&length, 1, MPI_INT, first, comm), "MPI_Bcast (error)");
    std::string text = message;
    text.resize(std::size_t(length));
    check_mpi(MPI_Bcast(text.data(), length, MPI_CHAR, first, comm), "MPI_Bcast (error)");
    throw collective_error("jacobi: rank " + std::to_string(first) + ": " + text);
}

}  // namespace

template <class T>
distributed_jacobi_report distributed_jacobi(MPI_Comm comm, index_t nx, index_t ny, const distributed_jacobi_options& opt,
                                             std::vector<T>* gather) {
    int size = 0;
    check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
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
    std::array<int, 4> nb{MPI_PROC_NULL, MPI_PROC_NULL, MPI_PROC_NULL, MPI_PROC_NULL};
    check_mpi(MPI_Cart_shift(cart.get(), 0, 1, &nb[detail::side_up], &nb[detail::side_down]), "MPI_Cart_shift (rows)");
    check_mpi(MPI_Cart_shift(cart.get(), 1, 1, &nb[detail::side_left], &nb[detail::side_right]), "MPI_Cart_shift (columns)");

    // This rank's part with its ring, as a field of its own: the ring holds the starting values
    // beyond it (the global boundary or, where a neighbour lies, its starting points). The
    // one-process start on an ny x 3 field gives exactly the global columns 0 and nx-1.
    host_matrix<T> edge(ny, 3);
    fill_jacobi_start<T>(edge.view());
    index_t r0, r1, c0, c1;
    std::tie(r0, r1) = cut(ny - 2, p, coords[0]);
    std::tie(c0, c1) = cut(nx - 2, q, coords[1]);
    const index_t lr = r1 - r0, lc = c1 - c0;
    host_matrix<T> part(lr + 2, lc + 2);
    for (index_t i = 0; i < lr + 2; ++i)
        for (index_t j = 0; j < lc + 2; ++j) {
            const index_t gi = r0 - 1 + i, gj = c0 - 1 + j;
            part(i, j) = gj == 0 ? edge(gi, 0) : gj == nx - 1 ? edge(gi, 2) : T(0);
        }

    // The rank's devices: the given ones, or one CPU device on one thread.
    std::optional<context> own;
    std::vector<device*> devices = opt.devices;
    if (devices.empty()) {
        context_options co;
        co.cpu_threads = 1;
        own.emplace("cpu", co);
        devices = own->devices();
    }
    jacobi_options jo;
    jo.decomposition = opt.decomposition;
    jo.overlap = opt.overlap;
    jo.iters = opt.iters;
    jo.check_every = opt.check_every;
    jo.tol = opt.tol;
    const jacobi_problem problem{lc + 2, lr + 2, dtype_of<T>()};
    std::optional<jacobi_plan> plan;
    std::string plan_error;
    try {
        plan.emplace(plan_jacobi(problem, devices, jo));
    } catch (const invalid_argument& e) {
        plan_error = "its part (rows " + std::to_string(r0) + ".." + std::to_string(r1 - 1) + ", columns " +
                     std::to_string(c0) + ".." + std::to_string(c1 - 1) + ") over its " + std::to_string(devices.size()) +
                     " devices: " + e.what();
    }
    agree_on_error(cart.get(), plan_error);

    distributed_jacobi_report rep;
    rep.grid_rows = p;
    rep.grid_cols = q;
    rep.decomposition = plan->decomposition();
    const MPI_Datatype type = mpi_type<T>();
    check_count((lr + 2) * (lc + 2), "jacobi: a rank's part");
    rank_boundary outer(cart.get(), nb, lr, lc, type, sizeof(T));
    const jacobi_report local = detail::run_jacobi_part<T>(*plan, part.view(), &outer);
    rep.seconds = local.seconds;
    rep.iterations = local.iterations;
    rep.residual = local.residual;
    rep.converged = local.converged;
    rep.halo_bytes = outer.halo_bytes;
    rep.device_halo_bytes = local.halo_bytes;

    if (gather) {
        std::vector<T> mine(static_cast<std::size_t>(lr * lc));
        for (index_t i = 0; i < lr; ++i)
            for (index_t j = 0; j < lc; ++j) mine[std::size_t(i * lc + j)] = part(i + 1, j + 1);
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
