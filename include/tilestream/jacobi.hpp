// The Jacobi solver of the 2-D Laplace equation across devices: problem, decomposition into parts
// (rows, columns, tiles) with one halo ring each, a plan that can be explained, the run, its report.
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/types.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tilestream {

/// The field u: ny rows x nx columns, row-major, boundary included (rows 0 and ny-1, columns 0
/// and nx-1 stay fixed). One iteration sets every interior point to 0.25*((N+S)+(W+E)) in the
/// field's type, so every decomposition and device count gives a bitwise identical field.
struct jacobi_problem {
    index_t nx = 0;
    index_t ny = 0;
    dtype type = dtype::f32;

    index_t interior_points() const { return (nx - 2) * (ny - 2); }
    /// Bytes moved per point and iteration when each point is read once and written once:
    /// 8 in f32, 16 in f64 (the GB/s figures count these).
    std::size_t bytes_per_point() const { return 2 * size_of(type); }
};

/// How the interior is cut into a P x Q grid of parts, one per device, in device order
/// (part (i, j) runs on device i*Q + j). Parts differ by at most one row or column.
enum class jacobi_split {
    automatic,  ///< the planner's choice: least halo bytes per iteration over every P x Q = D
    rows,       ///< D x 1: stripes of whole rows (contiguous halos)
    cols,       ///< 1 x D: stripes of whole columns (halos packed)
    tiles,      ///< P x Q; p = q = 0 lets the planner pick the factorization of D
};

struct jacobi_decomposition {
    jacobi_split split = jacobi_split::automatic;
    int p = 0;  ///< parts down the rows
    int q = 0;  ///< parts across the columns
};

/// Parses "auto", "rows", "cols", "tiles" and "tiles:PxQ"; throws invalid_argument otherwise.
jacobi_decomposition parse_jacobi_decomposition(std::string_view text);
/// "rows", "cols", "tiles", "tiles:2x3" or "auto": text parse_jacobi_decomposition reads back.
std::string to_string(const jacobi_decomposition& d);

/// Handed to jacobi_options::progress each time the host examines a residual.
struct jacobi_progress {
    index_t iteration = 0;   ///< the iteration whose residual this is
    index_t iterations = 0;  ///< the most the run will do (options.iters)
    double residual = 0;
    double seconds = 0;      ///< since the iterations started
};

/// Every tunable of a solve, with its default and what it costs:
///
/// | option       | default | meaning                                              | memory            |
/// |--------------|---------|------------------------------------------------------|-------------------|
/// | decomposition| auto    | rows, cols, tiles[:PxQ]; auto = least halo bytes     | -                 |
/// | overlap      | true    | boundary strips first (high-priority stream), their  | 3 more streams    |
/// |              |         | halos sent while the interior is swept               | per part          |
/// | iters        | 1000    | most iterations                                      | -                 |
/// | check_every  | 10      | residual every k iterations (and at the last one);   | 5 doubles per part|
/// |              |         | read back asynchronously, examined one check later   |                   |
/// | tol          | 0       | stop when a residual < tol (0: never); the run ends  | -                 |
/// |              |         | at the next check, the iterations already queued     |                   |
///
/// Each part holds two copies (in/out) of its points plus a one-point halo ring, rows padded
/// to 64 bytes; a packed column halo sent device to device adds three contiguous column-sized
/// buffers per column neighbour (one to pack into, two to land in), through the host two
/// staging buffers of host memory.
struct jacobi_options {
    jacobi_decomposition decomposition;
    bool overlap = true;
    index_t iters = 1000;
    index_t check_every = 10;
    double tol = 0;
    /// Called on the host thread at each examined residual (for progress lines); may be empty.
    std::function<void(const jacobi_progress&)> progress;
    /// When it becomes true the solve stops before its next iteration, lets the queued ones
    /// finish, frees its buffers and throws tilestream::cancelled; the field keeps its starting
    /// values. A device that fails stops the solve the same way with a device_error naming it.
    const std::atomic<bool>* cancel = nullptr;
    /// Receives a span per copy and sweep, with the streams named by role (trace_recorder).
    trace_sink* trace = nullptr;
};

/// One part: the interior points [row_begin, row_end) x [col_begin, col_end) of the field (in
/// the field's indices) on one device, stored with a halo ring as (rows()+2) x ld elements.
struct jacobi_part {
    int device = 0;               ///< index into the plan's device list
    int grid_row = 0, grid_col = 0;
    index_t row_begin = 0, row_end = 0;
    index_t col_begin = 0, col_end = 0;
    index_t ld = 0;               ///< elements between rows of its buffers (cols()+2, padded)
    int up = -1, down = -1, left = -1, right = -1;  ///< neighbour parts; -1 at the boundary
    std::size_t device_bytes = 0; ///< what the part allocates on its device

    index_t rows() const { return row_end - row_begin; }
    index_t cols() const { return col_end - col_begin; }
};

/// A validated decomposition of one problem over a list of devices; reusable for many runs.
class jacobi_plan {
public:
    const jacobi_problem& problem() const { return problem_; }
    const jacobi_options& options() const { return options_; }
    /// The resolved decomposition: never automatic, p and q always set.
    const jacobi_decomposition& decomposition() const { return decomposition_; }
    bool planner_chose() const { return planner_chose_; }
    const std::vector<jacobi_part>& parts() const { return parts_; }
    const std::vector<device*>& devices() const { return devices_; }

    /// Bytes sent between parts per iteration: halo rows (contiguous) and halo columns (each
    /// packed into a contiguous buffer before it leaves its device).
    std::size_t row_halo_bytes() const { return row_halo_bytes_; }
    std::size_t column_halo_bytes() const { return column_halo_bytes_; }
    std::size_t halo_bytes_per_iteration() const { return row_halo_bytes_ + column_halo_bytes_; }
    /// Directed halo messages per iteration that go device to device, and through host memory.
    int peer_links() const { return peer_links_; }
    int host_links() const { return host_links_; }

    /// A few lines: the decomposition and why, each part with its device, extent and memory,
    /// the halo bytes per iteration and how they travel.
    std::string explain() const;

private:
    friend jacobi_plan plan_jacobi(const jacobi_problem&, std::vector<device*>, const jacobi_options&);
    jacobi_problem problem_;
    jacobi_options options_;
    jacobi_decomposition decomposition_;
    bool planner_chose_ = false;
    std::vector<jacobi_part> parts_;
    std::vector<device*> devices_;
    std::size_t row_halo_bytes_ = 0, column_halo_bytes_ = 0;
    int peer_links_ = 0, host_links_ = 0;
};

/// Checks the problem and options and cuts the interior into one part per device. Throws
/// invalid_argument naming what is wrong: a grid smaller than 3x3, more parts than interior
/// rows or columns, tiles:PxQ that does not multiply to the device count, check_every < 1...
/// The devices must outlive the plan.
jacobi_plan plan_jacobi(const jacobi_problem& problem, std::vector<device*> devices,
                        const jacobi_options& options = {});
jacobi_plan plan_jacobi(const jacobi_problem& problem,
                        const std::vector<std::unique_ptr<device>>& devices,
                        const jacobi_options& options = {});

/// What one solve did.
struct jacobi_report {
    index_t iterations = 0;
    double seconds = 0;        ///< the iterations alone (parts resident on their devices)
    double total_seconds = 0;  ///< allocation and the copies in and out included
    double glups = 0;          ///< interior points updated per second, in 1e9
    double gbps = 0;           ///< glups * bytes_per_point (8 in f32, 16 in f64)
    /// sqrt(sum over interior points of (u_new - u)^2) of the last iteration; NaN when none ran.
    double residual = std::numeric_limits<double>::quiet_NaN();
    bool converged = false;    ///< a residual fell below tol
    index_t converged_at = 0;  ///< the iteration whose residual did (0: none)
    std::size_t halo_bytes = 0;  ///< sent between parts in all
};

/// Runs the plan on `field` (ny x nx, row-major, the plan's dtype): its values are the starting
/// field and, on return, the final field; the boundary is never written. Throws
/// dimension_mismatch when the field does not fit the plan, out_of_budget when a part does not
/// fit its device.
template <class T>
jacobi_report run_jacobi(const jacobi_plan& plan, host_matrix_view<T> field);

/// The report with the final field.
template <class T>
struct jacobi_solution {
    jacobi_report report;
    host_matrix<T> field;
};
/// Runs the plan from the default starting field.
template <class T>
jacobi_solution<T> solve_jacobi(const jacobi_plan& plan);

/// The default starting field: columns 0 and nx-1 hold sin(2*pi*i/(ny-1)) for row i (computed
/// in double, rounded to T), rows 0 and ny-1 are 0 between them, the interior is 0.
template <class T>
void fill_jacobi_start(host_matrix_view<T> field);

/// One timed solve from the default starting field, for scaling studies (`scale jacobi`).
struct jacobi_measurement {
    jacobi_problem problem;
    jacobi_decomposition decomposition;  ///< resolved
    int devices = 0;
    bool overlap = true;
    index_t iterations = 0;
    double seconds = 0, glups = 0, gbps = 0, residual = 0;
    std::size_t halo_bytes_per_iteration = 0;
};
jacobi_measurement measure_jacobi(const jacobi_problem& problem, const std::vector<device*>& devices,
                                  const jacobi_options& options = {});

/// Weak scaling: the problem whose interior is `per_device`'s grown P times down the rows and Q
/// times across the columns, P x Q the most square factorization of device_count (P >= Q), so
/// tiles:PxQ gives every device a part of exactly per_device's interior.
jacobi_problem weak_scaling_problem(const jacobi_problem& per_device, int device_count);

}  // namespace tilestream
