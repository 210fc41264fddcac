// Why LU's panels staged from a GPU to the host's LAPACK are slow (an H200 host, session 15: getrf
// f64 4096 on cuda:0 spent 160-392 ms in each 4096 x 384 panel, where this program's dgetrf_ alone
// took 10-12 ms with 16 OpenBLAS threads): (1) OpenBLAS dgetrf on that panel by thread count;
// (2) with 16 threads while other threads spin (as CUDA's synchronizing calls spin by default);
// (3) from a CUDA host function (cudaLaunchHostFunc, where the executor runs it) while the host
// thread synchronizes; (4) with a fresh column-major copy per call (page faults on first touch);
// then what a new stream's cuBLAS and cuSOLVER handles cost and a first potrf. Not built by CMake:
// scripts/gpu-bundle.sh compiles it, scripts/gpu-tile-rates.sh runs it.
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
extern "C" void dgetrf_(const int*, const int*, double*, const int*, int*, int*);
extern "C" void openblas_set_num_threads(int);
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main() {
    const int m = 4096, n = 384;
    std::vector<double> a0(size_t(m) * n), a(size_t(m) * n);
    for (size_t i = 0; i < a0.size(); ++i) a0[i] = double((i * 7919) % 1000) / 1000.0 - 0.5;
    std::vector<int> ipiv(n);
    int hw = std::thread::hardware_concurrency();
    printf("host threads %d; %s\n", hw, openblas_get_config());
    for (int round = 0; round < 2; ++round)
        for (int t : {1, 2, 4, 8, 16, hw}) {
            if (t > hw) continue;
            openblas_set_num_threads(t);
            double best = 1e9;
            for (int r = 0; r < 3; ++r) {
                a = a0;
                int info = 0;
                double t0 = now();
                dgetrf_(&m, &n, a.data(), &m, ipiv.data(), &info);
                best = std::min(best, now() - t0);
            }
            std::vector<double> b(size_t(m) * n, 1.0), c(size_t(m) * n, 0.0);
            double t0 = now();
            cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, n, 1.0, b.data(), m, a0.data(), m, 0.0, c.data(), m);
            double g = now() - t0;
            const double f = double(m) * n * n - double(n) * n * n / 3;
            printf("round %d threads %2d dgetrf 4096x384 %.2f ms (%.1f GFLOP/s)   dgemm 4096x384x384 %.2f ms\n", round, t, best * 1e3,
                   f / best * 1e-9, g * 1e3);
        }
    // (2) Spinning threads beside OpenBLAS's.
    openblas_set_num_threads(hw);
    const auto getrf_ms = [&](bool fresh) {
        double best = 1e9;
        for (int r = 0; r < 3; ++r) {
            std::unique_ptr<double[]> copy;
            double* p = a.data();
            if (fresh) {
                copy.reset(new double[a0.size()]);  // not touched yet: its first touch is timed
                p = copy.get();
            } else {
                a = a0;
            }
            int info = 0;
            const double t0 = now();
            if (fresh) std::copy(a0.begin(), a0.end(), p);
            dgetrf_(&m, &n, p, &m, ipiv.data(), &info);
            best = std::min(best, now() - t0);
        }
        return best * 1e3;
    };
    for (int spinners : {0, 1, 2, 3, 4}) {
        std::atomic<bool> stop{false};
        std::vector<std::thread> spin;
        for (int i = 0; i < spinners; ++i)
            spin.emplace_back([&] {
                while (!stop.load(std::memory_order_relaxed)) {
                }
            });
        const double ms = getrf_ms(false);
        stop = true;
        for (auto& t : spin) t.join();
        printf("dgetrf %d threads beside %d spinning threads: %.2f ms\n", hw, spinners, ms);
    }
    // (3) From a CUDA host function while this thread synchronizes (spins, by default).
    cudaStream_t hs;
    cudaStreamCreate(&hs);
    for (int r = 0; r < 2; ++r) {
        struct job {
            const std::function<double(bool)>* fn;
            double ms;
        };
        const std::function<double(bool)> fn = getrf_ms;
        job j{&fn, 0};
        cudaLaunchHostFunc(hs, [](void* p) { auto* jj = static_cast<job*>(p); jj->ms = (*jj->fn)(false); }, &j);
        cudaStreamSynchronize(hs);
        printf("dgetrf %d threads in a CUDA host function: %.2f ms\n", hw, j.ms);
    }
    cudaStreamDestroy(hs);
    // (4) A fresh copy per call.
    printf("dgetrf %d threads on a fresh copy (first touch timed): %.2f ms\n", hw, getrf_ms(true));
    // Handles
    cudaFree(nullptr);
    for (int i = 0; i < 3; ++i) {
        cudaStream_t s;
        cudaStreamCreate(&s);
        double t0 = now();
        cublasHandle_t bh;
        cublasCreate(&bh);
        cublasSetStream(bh, s);
        double t1 = now();
        cusolverDnHandle_t sh;
        cusolverDnCreate(&sh);
        cusolverDnSetStream(sh, s);
        double t2 = now();
        const int nn = 768;
        double* d;
        cudaMalloc(&d, sizeof(double) * nn * nn);
        std::vector<double> h(size_t(nn) * nn, 0.001);
        for (int k = 0; k < nn; ++k) h[size_t(k) * nn + k] = nn;
        cudaMemcpy(d, h.data(), sizeof(double) * nn * nn, cudaMemcpyHostToDevice);
        int lwork = 0;
        cusolverDnDpotrf_bufferSize(sh, CUBLAS_FILL_MODE_LOWER, nn, d, nn, &lwork);
        double* w;
        int* info;
        double t3 = now();
        cudaMalloc(&w, sizeof(double) * std::max(lwork, 1));
        cudaMalloc(&info, sizeof(int));
        double t4 = now();
        cusolverDnDpotrf(sh, CUBLAS_FILL_MODE_LOWER, nn, d, nn, w, lwork, info);
        cudaStreamSynchronize(s);
        double t5 = now();
        cudaMemcpy(d, h.data(), sizeof(double) * nn * nn, cudaMemcpyHostToDevice);
        double t6 = now();
        cusolverDnDpotrf(sh, CUBLAS_FILL_MODE_LOWER, nn, d, nn, w, lwork, info);
        cudaStreamSynchronize(s);
        double t7 = now();
        printf("stream %d: cublasCreate %.2f ms, cusolverDnCreate %.2f ms, workspace malloc %.2f ms, potrf 768 first %.2f ms, second %.2f ms\n", i,
               (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t4 - t3) * 1e3, (t5 - t4) * 1e3, (t7 - t6) * 1e3);
        cudaFree(d); cudaFree(w); cudaFree(info);
        cusolverDnDestroy(sh); cublasDestroy(bh); cudaStreamDestroy(s);
    }
}
