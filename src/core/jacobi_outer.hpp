// The Jacobi engine's hook for a field that is one part of a larger one (a rank's part of the
// global field over MPI): what lies beyond its edges arrives each iteration from outside, and its
// residual is combined with the other parts'. Private to the library and its distributed layer.
#pragma once

#include <tilestream/jacobi.hpp>

#include <array>

namespace tilestream::detail {

/// The sides of a field, in the order of the arrays below.
enum jacobi_side : int { side_up = 0, side_down = 1, side_left = 2, side_right = 3 };

/// What the engine calls, on the thread that runs the solve, when its field is a part of a larger
/// one. A side with a neighbour has its ring replaced each iteration by the neighbour's edge strip.
/// Per iteration t: the engine sweeps its edge strips first, copies them to host memory, calls
/// start_exchange, then finish_exchange (the devices sweep the interior meanwhile), and copies
/// what arrived into its ring before iteration t+1 sweeps the strips again.
class jacobi_outer_boundary {
public:
    virtual ~jacobi_outer_boundary() = default;
    /// Whether a neighbour lies beyond side s.
    virtual bool has_neighbour(int s) const = 0;
    /// Starts sending `send[s]` (this field's first/last interior row: nx-2 elements; first/last
    /// interior column: ny-2 elements) to the neighbour of each side s that has one, and
    /// receiving the neighbour's strip into `recv[s]` (same sizes). The buffers stay untouched
    /// until finish_exchange returns.
    virtual void start_exchange(index_t iteration, const std::array<const void*, 4>& send,
                                const std::array<void*, 4>& recv) = 0;
    virtual void finish_exchange() = 0;
    /// Starts combining this field's sum of (u_new - u)^2 at a check with the other parts'; the
    /// engine starts it an iteration after the check and finishes it at the next check.
    virtual void start_residual(double local_sum) = 0;
    /// The sum over every part; the same value wherever it is computed (every part stops alike).
    virtual double finish_residual() = 0;
};

/// run_jacobi on a field whose sides with a neighbour in `outer` take their ring from it each
/// iteration (null: run_jacobi itself). The report's residual is the combined one.
template <class T>
jacobi_report run_jacobi_part(const jacobi_plan& plan, host_matrix_view<T> field, jacobi_outer_boundary* outer);

}  // namespace tilestream::detail
