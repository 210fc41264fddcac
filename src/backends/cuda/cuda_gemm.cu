// The CUDA backend's own GEMM kernels: naive (one thread per element of C), tiled (shared-memory
// tiles, register blocking, 16-byte loads) and the C <- beta*C kernel used when alpha == 0 or k == 0,
// for every dtype (cuda_values.cuh: complex values are cplx<R>, four real products a multiply;
// operands read with op::c are conjugated as they are loaded).
//
// Every operand is read through strides, so any layout/op combination works: op(A)(i, p) is
// a[i * a_rs + p * a_cs] (likewise B, C). The tiled kernel is specialised on which index of each
// operand is contiguous ("k-contiguous" or not) so that its global loads can be 16-byte vectors;
// ragged edges and misaligned operands take a scalar, bounds-checked path.
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_values.cuh"
#include "backends/cuda/vector_io.cuh"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

namespace tilestream::cuda {
namespace {

template <class T>
struct gemm_args {
    index_t m, n, k;
    T alpha, beta;
    const T* a;
    index_t a_rs, a_cs;
    const T* b;
    index_t b_rs, b_cs;
    T* c;
    index_t c_rs, c_cs;
    bool conj_a, conj_b;  ///< op(A)/op(B) read conjugated (op::c on complex types)
};

template <class T>
gemm_args<T> make_args(const gemm_call& call) {
    const operand_desc a = call.a_desc(), b = call.b_desc();
    return {call.m,
            call.n,
            call.k,
            device_scalar<T>(call.alpha),
            device_scalar<T>(call.beta),
            static_cast<const T*>(call.a),
            a.row_stride(),
            a.col_stride(),
            static_cast<const T*>(call.b),
            b.row_stride(),
            b.col_stride(),
            static_cast<T*>(call.c),
            call.c_row_stride(),
            call.c_col_stride(),
            a.conjugated(),
            b.conjugated()};
}

// ---------------------------------------------------------------- C <- beta*C

template <class T>
__global__ void gemm_scale_c_kernel(gemm_args<T> p) {
    const index_t total = p.m * p.n;
    const bool rows_contiguous = p.c_cs == 1;  // walk C's contiguous index fastest
    for (index_t idx = blockIdx.x * index_t(blockDim.x) + threadIdx.x; idx < total;
         idx += index_t(gridDim.x) * blockDim.x) {
        const index_t i = rows_contiguous ? idx / p.n : idx % p.m;
        const index_t j = rows_contiguous ? idx % p.n : idx / p.m;
        T* c = p.c + i * p.c_rs + j * p.c_cs;
        *c = p.beta == T{} ? T{} : p.beta * *c;  // beta == 0 never reads C (NaN stays out)
    }
}

// ---------------------------------------------------------------- naive

template <class T>
__global__ void gemm_naive_kernel(gemm_args<T> p) {
    const index_t total = p.m * p.n;
    const bool rows_contiguous = p.c_cs == 1;
    for (index_t idx = blockIdx.x * index_t(blockDim.x) + threadIdx.x; idx < total;
         idx += index_t(gridDim.x) * blockDim.x) {
        // Neighbouring threads take neighbouring elements of C along its contiguous index.
        const index_t i = rows_contiguous ? idx / p.n : idx % p.m;
        const index_t j = rows_contiguous ? idx % p.n : idx / p.m;
        const T* a = p.a + i * p.a_rs;
        const T* b = p.b + j * p.b_cs;
        T acc{};
        for (index_t q = 0; q < p.k; ++q)
            acc = fma(conj_if(a[q * p.a_cs], p.conj_a), conj_if(b[q * p.b_rs], p.conj_b), acc);
        T* c = p.c + i * p.c_rs + j * p.c_cs;
        *c = p.beta == T{} ? p.alpha * acc : p.alpha * acc + p.beta * *c;
    }
}

// ---------------------------------------------------------------- tiled


// Tile geometry. S = elements per 16-byte vector (4 for f32, 2 for f64). A block of 256 threads
// (8 warps as 2 x 4) computes a BM x BN = 32S x 32S tile of C: 128x128 for f32, 64x64 for f64.
// Each warp owns 16S x 8S, each lane a 2S x 2S micro-tile made of 2 x 2 sub-tiles of S x S that
// sit 8S rows and 4S columns apart, so that the fragment reads of a warp from shared memory are
// contiguous 16-byte vectors (conflict-free) and a thread's accumulators stay in registers.
template <class T>
struct tile_shape {
    static constexpr int S = vector_elements(sizeof(T));
    static constexpr int BM = tiled_tile_edge(sizeof(T));
    static constexpr int BN = tiled_tile_edge(sizeof(T));
    static_assert(BM == 32 * S, "the warp layout below assumes 32 vectors per tile edge");
    static constexpr int BK = 8;
    static constexpr int TM = 2 * S;  // micro-tile rows per thread
    static constexpr int TN = 2 * S;
    // Shared tiles are stored k-major (As[k][m], Bs[k][n]); one vector of padding per row keeps
    // the transposing stores of k-contiguous operands free of bank conflicts and 16-byte aligned.
    static constexpr int LDA = BM + S;
    static constexpr int LDB = BN + S;
};

// Block and thread index read with volatile asm, so that a second read after the main loop is
// not merged with the first one and nothing derived from it has to stay live in a register.
__device__ __forceinline__ int block_index() {
#ifdef __CUDA_ARCH__
    int v;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
    return v;
#else
    return int(blockIdx.x);
#endif
}
__device__ __forceinline__ int thread_index() {
#ifdef __CUDA_ARCH__
    int v;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
    return v;
#else
    return int(threadIdx.x);
#endif
}

// First row and column of block `id`'s tile of C. Grouped order: runs of 8 tile rows are walked
// column by column, so consecutive blocks share panels of A and B in L2.
template <class T>
__device__ __forceinline__ void tile_origin(int id, index_t M, index_t N, index_t& m0, index_t& n0) {
    using shape = tile_shape<T>;
    const int tiles_m = int((M + shape::BM - 1) / shape::BM);
    const int tiles_n = int((N + shape::BN - 1) / shape::BN);
    constexpr int group = tiled_group_rows;
    const int per_group = group * tiles_n;
    const int first_m = (id / per_group) * group;
    const int group_rows = min(tiles_m - first_m, group);
    m0 = index_t(first_m + (id % per_group) % group_rows) * shape::BM;
    n0 = index_t((id % per_group) / group_rows) * shape::BN;
}

// This thread's micro-tile within the block tile: rows am + {0, 8S} + [0, S), columns
// bn + {0, 4S} + [0, S). Warps are laid out 2 (m) x 4 (n), lanes 8 (m) x 4 (n).
template <class T>
__device__ __forceinline__ void micro_tile_origin(int tid, int& am, int& bn) {
    constexpr int S = tile_shape<T>::S;
    const int warp = tid / 32, lane = tid % 32;
    am = (warp / 4) * (16 * S) + (lane / 4) * S;
    bn = (warp % 4) * (8 * S) + (lane % 4) * S;
}

// A_KC: op(A) is contiguous along k (a_cs == 1); otherwise along m (a_rs == 1).
// B_KC: op(B) is contiguous along k (b_rs == 1); otherwise along n (b_cs == 1).
// VEC: A and B are 16-byte aligned with leading dimensions a multiple of S, so every full
// vector of a tile can be one 16-byte load.
// C_ROW: C is row-major. A compile-time layout keeps the epilogue from needing more registers
// than the main loop (with a run-time flag ptxas spills).
template <class T, bool A_KC, bool B_KC, bool VEC, bool C_ROW>
__global__ void __launch_bounds__(threads_per_block, 2)
    gemm_tiled_kernel(gemm_args<T> p, bool c_vec) {
    using shape = tile_shape<T>;
    constexpr int S = shape::S, BM = shape::BM, BN = shape::BN, BK = shape::BK;
    constexpr int TM = shape::TM, TN = shape::TN, LDA = shape::LDA, LDB = shape::LDB;
    static_assert(BM * BK == threads_per_block * S && BN * BK == threads_per_block * S,
                  "each thread loads exactly one 16-byte vector of A and of B per k-tile");

    __shared__ __align__(16) T As[2][BK][LDA];
    __shared__ __align__(16) T Bs[2][BK][LDB];

    const int tid = thread_index();
    const index_t M = p.m, N = p.n, K = p.k;
    const index_t lda = A_KC ? p.a_rs : p.a_cs;
    const index_t ldb = B_KC ? p.b_cs : p.b_rs;

    index_t m0, n0;
    tile_origin<T>(block_index(), M, N, m0, n0);

    // Which vector of each k-tile this thread loads.
    constexpr int kvecs = BK / S;                           // vectors along a k-row of 8
    const int a_row = A_KC ? tid / kvecs : (tid % (BM / S)) * S;
    const int a_k = A_KC ? (tid % kvecs) * S : tid / (BM / S);
    const int b_col = B_KC ? tid / kvecs : (tid % (BN / S)) * S;
    const int b_k = B_KC ? (tid % kvecs) * S : tid / (BN / S);

    // Per-thread source pointers advance by one k-tile per step; the row/column bounds of the
    // vectors are loop-invariant, so only the k bound of the current tile is checked per step.
    const index_t a_step = A_KC ? BK : BK * lda;
    const index_t b_step = B_KC ? BK : BK * ldb;
    const index_t a_outer = m0 + a_row, b_outer = n0 + b_col;  // first row of A / column of B
    // Valid elements of this thread's vector along m (A not k-contiguous) or n (B likewise),
    // or whether its row/column exists at all (k-contiguous), in [0, S].
    const int a_valid = int(max(index_t(0), min(index_t(S), A_KC ? (a_outer < M ? S : 0) : M - a_outer)));
    const int b_valid = int(max(index_t(0), min(index_t(S), B_KC ? (b_outer < N ? S : 0) : N - b_outer)));
    const T* a_src = p.a + (A_KC ? min(a_outer, M - 1) * lda + a_k : a_k * lda + a_outer);
    const T* b_src = p.b + (B_KC ? min(b_outer, N - 1) * ldb + b_k : b_k * ldb + b_outer);

    T ra[S], rb[S];
    // tile_k: the k extent of the current tile, min(BK, K - k0).
    auto load_tiles = [&](int tile_k) {
        if constexpr (A_KC) {
            if (VEC && a_valid == S && a_k + S <= tile_k) {
                load16_global(ra, a_src);
            } else {
#pragma unroll
                for (int q = 0; q < S; ++q)
                    ra[q] = (a_valid == S && a_k + q < tile_k) ? load_global(a_src + q) : T{};
            }
        } else {
            if (VEC && a_valid == S && a_k < tile_k) {
                load16_global(ra, a_src);
            } else {
#pragma unroll
                for (int q = 0; q < S; ++q)
                    ra[q] = (q < a_valid && a_k < tile_k) ? load_global(a_src + q) : T{};
            }
        }
        if constexpr (B_KC) {
            if (VEC && b_valid == S && b_k + S <= tile_k) {
                load16_global(rb, b_src);
            } else {
#pragma unroll
                for (int q = 0; q < S; ++q)
                    rb[q] = (b_valid == S && b_k + q < tile_k) ? load_global(b_src + q) : T{};
            }
        } else {
            if (VEC && b_valid == S && b_k < tile_k) {
                load16_global(rb, b_src);
            } else {
#pragma unroll
                for (int q = 0; q < S; ++q)
                    rb[q] = (q < b_valid && b_k < tile_k) ? load_global(b_src + q) : T{};
            }
        }
        a_src += a_step;
        b_src += b_step;
    };
    auto store_tiles = [&](int buf) {
#pragma unroll
        for (int q = 0; q < S; ++q) {
            ra[q] = conj_if(ra[q], p.conj_a);
            rb[q] = conj_if(rb[q], p.conj_b);
        }
        if constexpr (A_KC) {
#pragma unroll
            for (int q = 0; q < S; ++q) As[buf][a_k + q][a_row] = ra[q];
        } else {
            store16(&As[buf][a_k][a_row], ra);
        }
        if constexpr (B_KC) {
#pragma unroll
            for (int q = 0; q < S; ++q) Bs[buf][b_k + q][b_col] = rb[q];
        } else {
            store16(&Bs[buf][b_k][b_col], rb);
        }
    };

    // This thread's micro-tile: rows am + {0, 8S} + [0, S), columns bn + {0, 4S} + [0, S).
    int am, bn;
    micro_tile_origin<T>(tid, am, bn);

    T acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = T{};

    index_t k_left = K;  // k extent from the start of the tile being loaded
    load_tiles(int(min(k_left, index_t(BK))));
    store_tiles(0);
    __syncthreads();

    // Double-buffered main loop: the global loads of tile t+1 are in flight while tile t is
    // multiplied out of shared memory; one barrier per tile suffices because the buffer written
    // after the multiply was last read before the previous barrier.
    for (int cur = 0; k_left > 0; cur ^= 1) {
        k_left -= BK;
        const bool more = k_left > 0;
        if (more) load_tiles(int(min(k_left, index_t(BK))));
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            T fa[TM], fb[TN];
            load16(fa, &As[cur][kk][am]);
            load16(fa + S, &As[cur][kk][am + 8 * S]);
            load16(fb, &Bs[cur][kk][bn]);
            load16(fb + S, &Bs[cur][kk][bn + 4 * S]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fma(fa[i], fb[j], acc[i][j]);
        }
        if (more) store_tiles(cur ^ 1);
        __syncthreads();
    }

    // Epilogue: C <- alpha*acc + beta*C, in 16-byte vectors along C's contiguous index where the
    // vector is whole and aligned; beta == 0 never reads C.
    // The tile and micro-tile origins are recomputed from fresh reads of the block and thread
    // indices rather than kept live through the main loop, which needs every register.
    tile_origin<T>(block_index(), M, N, m0, n0);
    micro_tile_origin<T>(thread_index(), am, bn);
    const T alpha = p.alpha, beta = p.beta;
    constexpr bool c_row_major = C_ROW;
    const index_t ldc = c_row_major ? p.c_rs : p.c_cs;
#pragma unroll
    for (int si = 0; si < 2; ++si) {
#pragma unroll
        for (int sj = 0; sj < 2; ++sj) {
            const index_t r0 = m0 + am + si * 8 * S, c0 = n0 + bn + sj * 4 * S;
#pragma unroll
            for (int u = 0; u < S; ++u) {
                // Row-major C: u walks rows and the vector runs along a row; col-major: transposed.
                const index_t i_out = c_row_major ? r0 + u : c0 + u;  // outer index of the vector
                const index_t v0 = c_row_major ? c0 : r0;              // first inner index
                const index_t outer_n = c_row_major ? M : N, inner_n = c_row_major ? N : M;
                if (i_out >= outer_n) continue;
                T v[S];
#pragma unroll
                for (int e = 0; e < S; ++e)
                    v[e] = alpha * (c_row_major ? acc[si * S + u][sj * S + e]
                                                : acc[si * S + e][sj * S + u]);
                T* dst = p.c + i_out * ldc + v0;
                if (c_vec && v0 + S <= inner_n) {
                    if (beta != T{}) {
                        T old[S];
                        load16(old, dst);
#pragma unroll
                        for (int e = 0; e < S; ++e) v[e] = fma(beta, old[e], v[e]);
                    }
                    store16(dst, v);
                } else {
#pragma unroll
                    for (int e = 0; e < S; ++e)
                        if (v0 + e < inner_n)
                            dst[e] = beta != T{} ? fma(beta, dst[e], v[e]) : v[e];
                }
            }
        }
    }
}

template <class T, bool A_KC, bool B_KC, bool VEC, bool C_ROW>
cudaError_t launch_tiled_variant(const gemm_args<T>& args, const tiled_launch& l, cudaStream_t stream) {
    (void)cudaGetLastError();  // the status returned below is this launch's alone
    gemm_tiled_kernel<T, A_KC, B_KC, VEC, C_ROW>
        <<<l.blocks, threads_per_block, 0, stream>>>(args, l.vector_c);
    return cudaGetLastError();
}

template <class T, bool A_KC, bool B_KC, bool VEC>
cudaError_t launch_tiled_c(const gemm_args<T>& args, const tiled_launch& l, cudaStream_t s) {
    return l.c_row_major ? launch_tiled_variant<T, A_KC, B_KC, VEC, true>(args, l, s)
                         : launch_tiled_variant<T, A_KC, B_KC, VEC, false>(args, l, s);
}

template <class T, bool A_KC, bool B_KC>
cudaError_t launch_tiled_vec(const gemm_args<T>& args, const tiled_launch& l, cudaStream_t s) {
    return l.vector_ab ? launch_tiled_c<T, A_KC, B_KC, true>(args, l, s)
                       : launch_tiled_c<T, A_KC, B_KC, false>(args, l, s);
}

// The specialisation (which index of A and B is contiguous, vector loads, C's layout) was chosen
// on the host by plan_tiled_launch; this only dispatches to the matching instantiation.
template <class T>
cudaError_t launch_tiled(const gemm_call& call, const tiled_launch& l, cudaStream_t stream) {
    if (!l.error.empty() || l.blocks == 0) return cudaErrorInvalidConfiguration;
    const gemm_args<T> args = make_args<T>(call);
    if (l.a_k_contiguous) {
        return l.b_k_contiguous ? launch_tiled_vec<T, true, true>(args, l, stream)
                                : launch_tiled_vec<T, true, false>(args, l, stream);
    }
    return l.b_k_contiguous ? launch_tiled_vec<T, false, true>(args, l, stream)
                            : launch_tiled_vec<T, false, false>(args, l, stream);
}

template <class T>
cudaError_t launch_naive(const gemm_call& call, cudaStream_t stream) {
    const gemm_args<T> args = make_args<T>(call);
    (void)cudaGetLastError();
    gemm_naive_kernel<T><<<grid_stride_blocks(args.m * args.n), threads_per_block, 0, stream>>>(args);
    return cudaGetLastError();
}

template <class T>
cudaError_t launch_scale_c(const gemm_call& call, cudaStream_t stream) {
    const gemm_args<T> args = make_args<T>(call);
    (void)cudaGetLastError();
    gemm_scale_c_kernel<T><<<grid_stride_blocks(args.m * args.n), threads_per_block, 0, stream>>>(args);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gemm_naive(const gemm_call& call, cudaStream_t stream) {
    return visit_device_value(call.type, [&](auto v) { return launch_naive<decltype(v)>(call, stream); });
}

cudaError_t launch_gemm_tiled(const gemm_call& call, const tiled_launch& launch,
                              cudaStream_t stream) {
    return visit_device_value(call.type, [&](auto v) { return launch_tiled<decltype(v)>(call, launch, stream); });
}

cudaError_t launch_gemm_scale_c(const gemm_call& call, cudaStream_t stream) {
    return visit_device_value(call.type, [&](auto v) { return launch_scale_c<decltype(v)>(call, stream); });
}

}  // namespace tilestream::cuda
