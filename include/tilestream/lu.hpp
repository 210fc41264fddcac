// LU factorization with partial pivoting (LAPACK's ?getrf) and its solves (?getrs, ?gesv) on
// devices, out of core beyond their memory, as tile tasks on the Level 3 engine (blas3.hpp).
//
//     tilestream::context ctx("cpu:2", {.memory_budget = 256ull << 20});
//     std::vector<tilestream::index_t> ipiv(std::min(m, n));
//     const auto rep = ctx.getrf<double>(a.view(), ipiv);   // rep.info: LAPACK's info
//
// LAPACK's semantics: A = P L U with L unit lower trapezoidal (m x min(m, n)) and U upper
// trapezoidal (min(m, n) x n) stored over A; ipiv 1-based (row i was interchanged with row
// ipiv[i]); info = i > 0 when U(i, i) is exactly zero (the factorization is still completed);
// the pivots are LAPACK's (the first largest |x|, complex |re| + |im|) up to ties.
// Stages as for the Level 3 routines: describe_getrf -> plan_getrf -> explain -> execute_getrf.
#pragma once

#include <tilestream/anchor.hpp>
#include <tilestream/blas3.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tilestream {

/// The order of getrf's tasks over A's block columns. Right-looking factors a panel and updates
/// every column right of it (the most tasks in parallel; look-ahead through the executor's
/// critical-path priority); left-looking brings each block column up to date from the panels
/// left of it, then factors it (each column loaded and written once: the fewest bytes out of
/// core). Both apply the same operations to each column in the same order: their results are
/// bitwise equal. `automatic`: the cost model's choice.
enum class lu_order { automatic, left_looking, right_looking };
std::string_view to_string(lu_order o) noexcept;
/// "auto", "left", "right" (and "left-looking", "right-looking").
lu_order parse_lu_order(std::string_view s);

/// One getrf call as the planner sees it (no data).
struct getrf_problem {
    dtype type = dtype::f64;
    index_t m = 0, n = 0;
    layout lay = layout::col_major;
    index_t lda = 0;
    bool quick_return() const { return m == 0 || n == 0; }
    double flops() const;  ///< LAPACK's count (complex: 4x)
    /// "getrf: A 300x200 col-major, f64".
    std::string describe() const;
};

template <class T>
getrf_problem describe_getrf(host_matrix_view<const T> a);

struct getrf_options {
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
    index_t tile = 0;  ///< block columns' width (0: the planner's)
    lu_order order = lu_order::automatic;
    int devices = 1;
    /// Devices the model spreads tasks over (0: all `devices`): the context leaves out those a
    /// device negligible_device_ratio faster keeps idle (the executor's balance), as GEMM's plans do.
    int working_devices = 0;
    bool in_place = false;     ///< every device computes on A where it lies (CPU devices without a budget)
    /// Bitwise identical results across budgets, device counts and orders: block columns of the
    /// k-block, panels and triangular solves on the reference kernel, updates on the tiled one.
    bool reproducible = false;
    /// Per device the kernel of its GEMM updates where they do not take `kernel` (empty: `kernel`
    /// everywhere), as blas3_options::gemm_kernels.
    std::vector<gemm_kernel> gemm_kernels;
};

/// One order's predicted traffic and time at the chosen tile (explain compares them).
struct getrf_alternative {
    lu_order order = lu_order::left_looking;
    std::size_t bytes_h2d = 0, bytes_d2h = 0;
    double predicted_seconds = 0;
};

struct getrf_plan {
    getrf_problem problem;
    gemm_kernel kernel = gemm_kernel::vendor;
    std::vector<gemm_kernel> gemm_kernels;  ///< getrf_options::gemm_kernels
    bool blocked_diagonal = false;          ///< as blas3_plan::blocked_diagonal (its trsm tiles)
    math_mode math = math_mode::strict;
    lu_order order = lu_order::right_looking;
    index_t tile = 0;
    bool in_place = false;
    bool reproducible = false;
    int devices = 1;
    std::size_t tasks = 0, steps = 0, dependencies = 0;
    std::vector<std::pair<tile_kind, std::size_t>> kernel_counts;
    int slots = 0;
    std::size_t slot_bytes = 0;
    std::size_t bytes_h2d = 0, bytes_d2h = 0;
    std::size_t peak_device_bytes = 0, budget = 0;
    double predicted_seconds = 0, predicted_compute_seconds = 0;
    double predicted_h2d_seconds = 0, predicted_d2h_seconds = 0, predicted_critical_path_seconds = 0;
    std::string bound;
    device_rates rates;
    /// Per device (in the context's order) its measured GEMM rate (FLOP/s) when a context measured
    /// its devices one by one (empty: not measured): the balance's first estimate of each device.
    std::vector<double> device_flops;
    std::vector<getrf_alternative> alternatives;
    std::shared_ptr<const detail::engine::task_graph> graph;  ///< the tasks (library-private)
};

/// Plans for `options.devices` devices with `budget` bytes each; out_of_budget naming what three
/// block columns of the smallest width need when nothing fits.
getrf_plan plan_getrf(const getrf_problem& problem, std::size_t budget, const device_rates& rates,
                      const getrf_options& options = {});
std::string explain(const getrf_plan& plan);

struct getrf_report {
    getrf_plan plan;
    index_t info = 0;  ///< 0, or i > 0: U(i, i) (1-based) is exactly zero
    double seconds = 0;
    std::size_t bytes_h2d = 0, bytes_d2h = 0, peak_device_bytes = 0;
    std::size_t cache_hits = 0, cache_misses = 0, bytes_saved = 0;
    std::vector<device_share> devices;  ///< `units` counts tasks
    std::vector<std::string> warnings;
    std::vector<device_fault> faults;
};

/// Factors A in place and writes min(m, n) pivots into ipiv. Faults as execute_blas3: with two or
/// more devices a failed device's tasks rerun elsewhere from committed tile versions.
template <class T>
getrf_report execute_getrf(const getrf_plan& plan, std::span<device* const> devices, host_matrix_view<T> a,
                           std::span<index_t> ipiv, const blas3_run_options& run = {});

/// B's rows interchanged as ipiv says (LAPACK's ?laswp with incx 1 over ipiv's entries in order,
/// or in reverse order when `reverse`): what ?getrs does before (after, transposed) its solves.
template <class T>
void apply_row_swaps(host_matrix_view<T> b, std::span<const index_t> ipiv, bool reverse = false);

/// The sequential oracle: LAPACK's ?getf2 loop on host data in A's precision; returns info.
template <class T>
index_t reference_getrf(host_matrix_view<T> a, std::span<index_t> ipiv);

/// ||P A - L U||_F / (||A||_F max(m, n) u) of a factorization (lu, ipiv) of `a`, in float64.
template <class T>
double getrf_residual(host_matrix_view<const T> a, host_matrix_view<const T> lu, std::span<const index_t> ipiv);

/// ||A X - B||_F / (||A||_F ||X||_F n eps) of a solve (A n x n, X and B n x nrhs), in float64:
/// gesv's backward error (what --check bounds).
template <class T>
double gesv_backward_error(host_matrix_view<const T> a, host_matrix_view<const T> x, host_matrix_view<const T> b);

/// Times OpenBLAS's own ?getrf_ (all hardware threads) on a column-major copy of A, refreshed
/// before each run: the anchor of `--anchor` (median of `repeat` runs after a warm-up).
template <class T>
blas_anchor time_host_getrf(host_matrix_view<const T> a, int repeat);

}  // namespace tilestream
