// Planning a Jacobi solve: parsing decompositions, choosing P x Q by halo bytes, cutting the
// interior into parts, and explaining the result.
#include "core/jacobi_layout.hpp"

#include <tilestream/error.hpp>
#include <tilestream/jacobi.hpp>

#include <charconv>
#include <cmath>
#include <sstream>

namespace tilestream {
namespace {

std::string grid_text(index_t nx, index_t ny) { return std::to_string(nx) + "x" + std::to_string(ny); }

/// Halo elements sent per iteration by a P x Q grid over an NY x NX interior: every cut between
/// part rows carries NX elements each way, every cut between part columns NY elements each way.
struct halo_cost {
    std::size_t row_elems = 0, col_elems = 0;
    std::size_t total() const { return row_elems + col_elems; }
};
halo_cost cost_of(int p, int q, index_t interior_rows, index_t interior_cols) {
    return {2 * std::size_t(p - 1) * std::size_t(interior_cols),
            2 * std::size_t(q - 1) * std::size_t(interior_rows)};
}

jacobi_split split_of_shape(int p, int q) {
    if (q == 1) return jacobi_split::rows;
    if (p == 1) return jacobi_split::cols;
    return jacobi_split::tiles;
}

/// The feasible factorization of d with the fewest halo bytes; ties go to fewer packed column
/// bytes (row halos need no packing). Returns p = 0 when none is feasible.
std::pair<int, int> least_halo(int d, index_t interior_rows, index_t interior_cols) {
    std::pair<int, int> best{0, 0};
    halo_cost best_cost;
    for (int p = d; p >= 1; --p) {
        if (d % p != 0) continue;
        const int q = d / p;
        if (p > interior_rows || q > interior_cols) continue;
        const halo_cost c = cost_of(p, q, interior_rows, interior_cols);
        if (best.first == 0 || c.total() < best_cost.total() ||
            (c.total() == best_cost.total() && c.col_elems < best_cost.col_elems)) {
            best = {p, q};
            best_cost = c;
        }
    }
    return best;
}

}  // namespace

jacobi_decomposition parse_jacobi_decomposition(std::string_view text) {
    const auto bad = [&] {
        return invalid_argument("jacobi: unknown decomposition '" + std::string(text) +
                                "' (expected rows, cols, tiles, tiles:PxQ or auto)");
    };
    jacobi_decomposition d;
    if (text == "auto") return d;
    if (text == "rows") {
        d.split = jacobi_split::rows;
        return d;
    }
    if (text == "cols") {
        d.split = jacobi_split::cols;
        return d;
    }
    if (text == "tiles") {
        d.split = jacobi_split::tiles;
        return d;
    }
    if (text.rfind("tiles:", 0) != 0) throw bad();
    const std::string_view shape = text.substr(6);
    const auto x = shape.find('x');
    if (x == std::string_view::npos) throw bad();
    const auto number = [&](std::string_view s) {
        int v = 0;
        auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || ptr != s.data() + s.size() || v < 1)
            throw invalid_argument("jacobi: decomposition '" + std::string(text) +
                                   "': P and Q of tiles:PxQ must be positive integers");
        return v;
    };
    d.split = jacobi_split::tiles;
    d.p = number(shape.substr(0, x));
    d.q = number(shape.substr(x + 1));
    return d;
}

std::string to_string(const jacobi_decomposition& d) {
    switch (d.split) {
        case jacobi_split::automatic: return "auto";
        case jacobi_split::rows: return "rows";
        case jacobi_split::cols: return "cols";
        case jacobi_split::tiles:
            return d.p ? "tiles:" + std::to_string(d.p) + "x" + std::to_string(d.q) : "tiles";
    }
    return "?";
}

jacobi_plan plan_jacobi(const jacobi_problem& problem, std::vector<device*> devices,
                        const jacobi_options& options) {
    if (problem.nx < 3 || problem.ny < 3)
        throw invalid_argument("jacobi: the grid must be at least 3x3 (a boundary around one interior "
                               "point), got nx x ny = " + grid_text(problem.nx, problem.ny));
    checked_bytes(problem.ny, problem.nx, problem.type, "jacobi: field");
    if (is_complex(problem.type))
        throw invalid_argument("jacobi: " + std::string(to_string(problem.type)) +
                               " is complex; the Laplace solve runs in f32 or f64");
    if (devices.empty()) throw invalid_argument("jacobi: no devices to run on");
    for (std::size_t i = 0; i < devices.size(); ++i) {
        if (devices[i] == nullptr) throw invalid_argument("jacobi: device " + std::to_string(i) + " is null");
        for (std::size_t j = 0; j < i; ++j)
            if (devices[j] == devices[i])
                throw invalid_argument("jacobi: device " + devices[i]->id() + " is listed twice");
    }
    if (options.iters < 0) throw invalid_argument("jacobi: iters must be >= 0, got " + std::to_string(options.iters));
    if (options.check_every < 1)
        throw invalid_argument("jacobi: check_every must be >= 1, got " + std::to_string(options.check_every));
    if (!(options.tol >= 0) || !std::isfinite(options.tol))
        throw invalid_argument("jacobi: tol must be a finite number >= 0 (0 disables the test)");

    const int d = static_cast<int>(devices.size());
    const index_t ny_in = problem.ny - 2, nx_in = problem.nx - 2;
    const std::string where = "jacobi: " + grid_text(problem.nx, problem.ny) + " grid (" +
                              std::to_string(ny_in) + " interior rows, " + std::to_string(nx_in) +
                              " interior columns) over " + std::to_string(d) + " devices";

    jacobi_plan plan;
    plan.problem_ = problem;
    plan.options_ = options;
    plan.devices_ = std::move(devices);
    jacobi_decomposition& dec = plan.decomposition_;
    dec = options.decomposition;
    switch (dec.split) {
        case jacobi_split::rows: dec.p = d, dec.q = 1; break;
        case jacobi_split::cols: dec.p = 1, dec.q = d; break;
        case jacobi_split::tiles:
            if (dec.p == 0 && dec.q == 0) {
                std::tie(dec.p, dec.q) = least_halo(d, ny_in, nx_in);
                plan.planner_chose_ = true;
                if (dec.p == 0)
                    throw invalid_argument(where + ": no tiles:PxQ with P*Q = " + std::to_string(d) +
                                           " leaves every part an interior row and column");
            } else if (std::int64_t(dec.p) * dec.q != d) {  // 64-bit: P*Q of two ints can overflow int
                throw invalid_argument("jacobi: " + to_string(dec) + " makes " +
                                       std::to_string(std::int64_t(dec.p) * dec.q) +
                                       " parts but " + std::to_string(d) + " devices were given");
            }
            break;
        case jacobi_split::automatic:
            std::tie(dec.p, dec.q) = least_halo(d, ny_in, nx_in);
            plan.planner_chose_ = true;
            if (dec.p == 0)
                throw invalid_argument(where + ": no decomposition leaves every part an interior row "
                                       "and column (use fewer devices)");
            dec.split = split_of_shape(dec.p, dec.q);
            break;
    }
    if (dec.p > ny_in)
        throw invalid_argument(where + ": " + to_string(dec) + " needs " + std::to_string(dec.p) +
                               " parts down the rows, each with at least one interior row, but there are " +
                               std::to_string(ny_in));
    if (dec.q > nx_in)
        throw invalid_argument(where + ": " + to_string(dec) + " needs " + std::to_string(dec.q) +
                               " parts across the columns, each with at least one interior column, but "
                               "there are " + std::to_string(nx_in));

    const std::size_t elem = size_of(problem.type);
    const index_t pad = index_t(detail::jacobi_row_alignment / elem);
    for (int i = 0; i < dec.p; ++i) {
        for (int j = 0; j < dec.q; ++j) {
            jacobi_part part;
            part.device = i * dec.q + j;
            part.grid_row = i;
            part.grid_col = j;
            part.row_begin = 1 + ny_in * i / dec.p;
            part.row_end = 1 + ny_in * (i + 1) / dec.p;
            part.col_begin = 1 + nx_in * j / dec.q;
            part.col_end = 1 + nx_in * (j + 1) / dec.q;
            part.ld = (part.cols() + 2 + pad - 1) / pad * pad;
            part.up = i > 0 ? part.device - dec.q : -1;
            part.down = i + 1 < dec.p ? part.device + dec.q : -1;
            part.left = j > 0 ? part.device - 1 : -1;
            part.right = j + 1 < dec.q ? part.device + 1 : -1;
            plan.parts_.push_back(part);
        }
    }
    // Bytes per part: two field buffers, residual slots, and for each column neighbour reached
    // device to device a pack buffer (sender side) and two landing buffers (receiver side; the
    // links come in symmetric pairs, so each part holds one pack and two landings per link).
    for (auto& part : plan.parts_) {
        part.device_bytes = 2 * checked_bytes(part.rows() + 2, part.ld, problem.type, "jacobi: part") +
                            detail::jacobi_residual_doubles * sizeof(double);
        device& own = *plan.devices_[part.device];
        for (int n : {part.up, part.down, part.left, part.right}) {
            if (n < 0) continue;
            device& other = *plan.devices_[n];
            const bool column = n == part.left || n == part.right;
            const std::size_t bytes = std::size_t(column ? part.rows() : part.cols()) * elem;
            (column ? plan.column_halo_bytes_ : plan.row_halo_bytes_) += bytes;
            if (own.can_copy_peer(other)) {
                ++plan.peer_links_;
                if (column) part.device_bytes += 3 * bytes;  // pack here, two landings there (same size)
            } else {
                ++plan.host_links_;
            }
        }
    }
    return plan;
}

jacobi_plan plan_jacobi(const jacobi_problem& problem, const std::vector<std::unique_ptr<device>>& devices,
                        const jacobi_options& options) {
    std::vector<device*> raw;
    for (const auto& d : devices) raw.push_back(d.get());
    return plan_jacobi(problem, std::move(raw), options);
}

std::string jacobi_plan::explain() const {
    std::ostringstream s;
    const auto& pb = problem_;
    s << "jacobi plan: " << pb.nx << "x" << pb.ny << " " << to_string(pb.type) << " field ("
      << pb.nx - 2 << "x" << pb.ny - 2 << " interior points) in " << decomposition_.p << "x"
      << decomposition_.q << " parts: " << to_string(decomposition_)
      << (planner_chose_ ? " (planner's choice: least halo bytes per iteration)" : "")
      << ", overlap " << (options_.overlap ? "on" : "off") << "\n";
    for (std::size_t k = 0; k < parts_.size(); ++k) {
        const auto& p = parts_[k];
        s << "  part " << k << " (" << p.grid_row << "," << p.grid_col << ") on "
          << devices_[p.device]->id() << ": rows [" << p.row_begin << "," << p.row_end << ") x cols ["
          << p.col_begin << "," << p.col_end << "), " << p.rows() << "x" << p.cols() << " points, "
          << format_bytes(p.device_bytes) << " of device memory";
        std::string nb;
        const auto add = [&](const char* name, int n) {
            if (n < 0) return;
            if (!nb.empty()) nb += ' ';
            nb.append(name).append("=").append(std::to_string(n));
        };
        add("up", p.up);
        add("down", p.down);
        add("left", p.left);
        add("right", p.right);
        s << (nb.empty() ? "" : "; neighbours " + nb) << "\n";
    }
    s << "  halo per iteration: " << format_bytes(halo_bytes_per_iteration()) << " (rows "
      << format_bytes(row_halo_bytes_) << ", columns " << format_bytes(column_halo_bytes_)
      << " packed); " << peer_links_ << " messages device to device, " << host_links_
      << " through host memory\n";
    s << "  residual every " << options_.check_every << " iterations, read one check later; stop at "
      << options_.iters << " iterations";
    if (options_.tol > 0) s << " or when the residual is below " << options_.tol;
    s << "\n";
    return s.str();
}

jacobi_problem weak_scaling_problem(const jacobi_problem& per_device, int device_count) {
    if (device_count < 1) throw invalid_argument("jacobi: weak scaling needs at least one device");
    if (per_device.nx < 3 || per_device.ny < 3)
        throw invalid_argument("jacobi: the per-device grid must be at least 3x3, got " +
                               grid_text(per_device.nx, per_device.ny));
    int q = static_cast<int>(std::sqrt(double(device_count)));
    while (q > 1 && device_count % q != 0) --q;
    const int p = device_count / q;
    jacobi_problem r = per_device;
    r.ny = checked_add(checked_mul(per_device.ny - 2, p, "jacobi: weak scaling rows"), 2, "jacobi: weak scaling rows");
    r.nx = checked_add(checked_mul(per_device.nx - 2, q, "jacobi: weak scaling columns"), 2,
                       "jacobi: weak scaling columns");
    return r;
}

}  // namespace tilestream
