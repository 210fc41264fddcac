// GPU benchmark of the CUDA backend: in-core GEMM GFLOP/s (f32, f64, c32, c64; complex counted as
// 8mnk) of tilestream's vendor, tiled and naive kernels next to cuBLAS called directly, host<->device copy bandwidth (pinned, registered,
// pageable) next to a plain cudaMemcpyAsync loop, device-to-device copies, and the Jacobi sweep
// next to a device copy. Every figure is the median of timed repetitions after warm-up, timed
// with CUDA events on the stream that runs the work. Writes JSON to the path given with --out.
//
//   gpu_bench --out results.json [--git-hash HASH] [--gpu N] [--quick]
#include "backends/backends.hpp"
#include "backends/cuda/cuda_device.hpp"

#include <tilestream/device.hpp>
#include <tilestream/error.hpp>
#include <tilestream/kernels.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using namespace tilestream;

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string(what) + " failed: " + cublasGetStatusString(s));
}

// ---- a small JSON writer (flat objects of strings and numbers)

std::string json_escape(const std::string& s) {
    std::string r;
    for (char c : s) {
        if (c == '"' || c == '\\') r += '\\', r += c;
        else if (static_cast<unsigned char>(c) < 0x20) r += ' ';
        else r += c;
    }
    return r;
}

class json_row {
public:
    json_row& add(const std::string& key, const std::string& value) {
        fields_.push_back("\"" + key + "\": \"" + json_escape(value) + "\"");
        return *this;
    }
    json_row& add(const std::string& key, double value) {
        char buf[64];
        if (std::isfinite(value))
            std::snprintf(buf, sizeof buf, "%.6g", value);
        else
            std::snprintf(buf, sizeof buf, "null");
        fields_.push_back("\"" + key + "\": " + buf);
        return *this;
    }
    std::string str() const {
        std::string r = "{";
        for (std::size_t i = 0; i < fields_.size(); ++i) r += (i ? ", " : "") + fields_[i];
        return r + "}";
    }

private:
    std::vector<std::string> fields_;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `op` (which enqueues work on `s`) with CUDA events: warm-up runs, then repetitions until
// about `budget_s` seconds or `max_reps`, at least `min_reps`. Returns the median in seconds.
struct timing {
    double median_s = 0, min_s = 0;
    int reps = 0;
};

timing time_on_stream(cudaStream_t s, const std::function<void()>& op, int warmup = 2,
                      int min_reps = 5, int max_reps = 20, double budget_s = 1.0) {
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    for (int i = 0; i < warmup; ++i) op();
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    std::vector<double> t;
    double spent = 0;
    while (int(t.size()) < max_reps && (int(t.size()) < min_reps || spent < budget_s)) {
        check(cudaEventRecord(start, s), "cudaEventRecord");
        op();
        check(cudaEventRecord(stop, s), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        t.push_back(1e-3 * ms);
        spent += 1e-3 * ms;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    timing r;
    r.median_s = median(t);
    r.min_s = *std::min_element(t.begin(), t.end());
    r.reps = int(t.size());
    return r;
}

std::string utc_date() {
    std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return buf;
}

std::string machine_name() {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string cpu = "unknown CPU";
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);)
        if (line.rfind("model name", 0) == 0) {
            cpu = line.substr(line.find(':') + 2);
            break;
        }
    return std::string(host) + " (" + cpu + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) +
           " CPUs)";
}

// Random non-zero values in [-1, 1] from a fast generator (the inputs only need to be non-trivial).
// Complex values get both parts random (the parts are filled as 2n reals).
template <class T>
void fill_random(T* p, std::size_t n, std::uint64_t seed) {
    if constexpr (is_complex_v<T>) {
        fill_random(reinterpret_cast<real_type_t<T>*>(p), 2 * n, seed);
    } else {
        std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
        for (std::size_t i = 0; i < n; ++i) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            double v = double(x >> 11) * (2.0 / 9007199254740992.0) - 1.0;
            if (std::abs(v) < 1e-3) v = 0.5;
            p[i] = T(v);
        }
    }
}

struct bench_context {
    device& dev;
    stream& st;
    cudaStream_t native;
    cublasHandle_t blas;
    bool quick;
    std::vector<json_row> rows;
};

void print_row(const char* what, const std::string& detail, double value, const char* unit,
               double anchor_value, const std::string& anchor) {
    if (anchor.empty())
        std::printf("%-10s %-44s %10.1f %-6s\n", what, detail.c_str(), value, unit);
    else
        std::printf("%-10s %-44s %10.1f %-6s  %-22s %10.1f  ratio %.3f\n", what, detail.c_str(),
                    value, unit, anchor.c_str(), anchor_value, value / anchor_value);
    std::fflush(stdout);
}

// ---- GEMM

template <class T>
double max_relative_difference(const std::vector<T>& x, const std::vector<T>& ref) {
    double scale = 0, diff = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        scale = std::max(scale, double(std::abs(ref[i])));
        diff = std::max(diff, double(std::abs(x[i] - ref[i])));
    }
    return scale > 0 ? diff / scale : diff;
}

template <class T>
void bench_gemm(bench_context& ctx, index_t n, const T* host_a, const T* host_b) {
    const dtype type = dtype_of<T>();
    const std::size_t elems = std::size_t(n) * std::size_t(n), bytes = elems * sizeof(T);
    device_buffer a = ctx.dev.allocate(bytes), b = ctx.dev.allocate(bytes), c = ctx.dev.allocate(bytes);
    device_buffer c_anchor = ctx.dev.allocate(bytes);
    ctx.dev.copy_to_device(ctx.st, a.get(), host_a, bytes);
    ctx.dev.copy_to_device(ctx.st, b.get(), host_b, bytes);
    ctx.st.synchronize();
    const double flops = double(dtype_traits(type).flops_per_multiply_add) * double(n) * double(n) * double(n);
    std::vector<T> got(elems), want(elems);

    struct variant {
        gemm_kernel kernel;
        math_mode math;
    };
    std::vector<variant> variants = {{gemm_kernel::vendor, math_mode::strict}};
    if (type == dtype::f32) variants.push_back({gemm_kernel::vendor, math_mode::tf32});
    variants.push_back({gemm_kernel::tiled, math_mode::strict});
    if (n <= 4096) variants.push_back({gemm_kernel::naive, math_mode::strict});

    for (const variant& v : variants) {
        // cuBLAS directly, the anchor: the same row-major product as C^T = B^T A^T.
        const bool tf32 = v.math == math_mode::tf32;
        const T one = 1, zero = 0;
        auto cublas_direct = [&] {
            const int ni = int(n);
            if (type == dtype::f64) {
                check(cublasDgemm(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni,
                                  reinterpret_cast<const double*>(&one), b.as<double>(), ni,
                                  a.as<double>(), ni, reinterpret_cast<const double*>(&zero),
                                  c_anchor.as<double>(), ni),
                      "cublasDgemm");
            } else if (type == dtype::c64) {
                check(cublasZgemm(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni,
                                  reinterpret_cast<const cuDoubleComplex*>(&one), b.as<cuDoubleComplex>(), ni,
                                  a.as<cuDoubleComplex>(), ni, reinterpret_cast<const cuDoubleComplex*>(&zero),
                                  c_anchor.as<cuDoubleComplex>(), ni),
                      "cublasZgemm");
            } else {
                // f32 and c32: cublasGemmEx with the table's data type, single-precision compute.
                const cudaDataType_t data = static_cast<cudaDataType_t>(dtype_traits(type).cuda);
                check(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, b.get(), data, ni,
                                   a.get(), data, ni, &zero, c_anchor.get(), data, ni,
                                   tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
                      "cublasGemmEx");
            }
        };
        gemm_call call;
        call.type = type;
        call.m = call.n = call.k = n;
        call.a = a.get(), call.lda = n;
        call.b = b.get(), call.ldb = n;
        call.c = c.get(), call.ldc = n;
        call.kernel = v.kernel;
        call.math = v.math;
        auto ours = [&] { ctx.dev.gemm(ctx.st, call); };

        const int max_reps = ctx.quick ? 5 : 20;
        const timing anchor = time_on_stream(ctx.native, cublas_direct, 2, 3, max_reps);
        const int warm = v.kernel == gemm_kernel::naive ? 1 : 2;
        const timing t = time_on_stream(ctx.native, ours, warm, 3, max_reps);

        ctx.dev.copy_to_host(ctx.st, got.data(), c.get(), bytes);
        ctx.dev.copy_to_host(ctx.st, want.data(), c_anchor.get(), bytes);
        ctx.st.synchronize();
        const double diff = max_relative_difference(got, want);

        const double gf = flops / t.median_s * 1e-9, gf_anchor = flops / anchor.median_s * 1e-9;
        std::string label = std::string(to_string(v.kernel)) + (tf32 ? "/tf32" : "");
        const std::string detail = std::string(to_string(type)) + " " + label + " " +
                                   std::to_string(n) + "^3";
        const std::string anchor_name = tf32                 ? "cublasGemmEx/tf32"
                                        : type == dtype::f64 ? "cublasDgemm"
                                        : type == dtype::c64 ? "cublasZgemm"
                                                             : "cublasGemmEx";
        print_row("gemm", detail, gf, "GF/s", gf_anchor, anchor_name);
        json_row row;
        row.add("kind", "gemm").add("dtype", std::string(to_string(type))).add("kernel", label);
        row.add("m", double(n)).add("n", double(n)).add("k", double(n)).add("layout", "row-major nn");
        row.add("median_ms", 1e3 * t.median_s).add("min_ms", 1e3 * t.min_s).add("reps", t.reps);
        row.add("gflops", gf).add("anchor", anchor_name).add("anchor_gflops", gf_anchor);
        row.add("ratio_to_anchor", gf / gf_anchor).add("max_rel_diff_vs_anchor", diff);
        ctx.rows.push_back(row);
    }
}

// ---- copies

void bench_copies(bench_context& ctx) {
    const std::size_t bytes = std::size_t(ctx.quick ? 64 : 256) << 20;
    const double gb = double(bytes) * 1e-9;
    device_buffer d = ctx.dev.allocate(bytes);
    host_staging_buffer pinned = ctx.dev.allocate_host_staging(bytes);
    std::memset(pinned.get(), 1, bytes);
    std::vector<char> pageable(bytes, 2);
    // Page-aligned, as user buffers of that size usually are (mmap, aligned allocations).
    std::unique_ptr<char, decltype(&std::free)> registered(
        static_cast<char*>(std::aligned_alloc(4096, bytes)), &std::free);
    if (!registered) throw std::runtime_error("out of host memory");
    std::memset(registered.get(), 3, bytes);
    ctx.dev.register_host(registered.get(), bytes);

    // The anchor: cudaMemcpyAsync on the same stream from the same pinned memory.
    const timing anchor_h2d = time_on_stream(ctx.native, [&] {
        check(cudaMemcpyAsync(d.get(), pinned.get(), bytes, cudaMemcpyHostToDevice, ctx.native),
              "cudaMemcpyAsync");
    });
    const timing anchor_d2h = time_on_stream(ctx.native, [&] {
        check(cudaMemcpyAsync(pinned.get(), d.get(), bytes, cudaMemcpyDeviceToHost, ctx.native),
              "cudaMemcpyAsync");
    });
    struct source {
        const char* name;
        void* host;
    };
    for (const source& src : {source{"pinned", pinned.get()}, source{"registered", registered.get()},
                              source{"pageable", pageable.data()}}) {
        for (bool to_device : {true, false}) {
            const timing t = time_on_stream(ctx.native, [&] {
                if (to_device)
                    ctx.dev.copy_to_device(ctx.st, d.get(), src.host, bytes);
                else
                    ctx.dev.copy_to_host(ctx.st, src.host, d.get(), bytes);
            });
            const timing& anchor = to_device ? anchor_h2d : anchor_d2h;
            const double bw = gb / t.median_s, bw_anchor = gb / anchor.median_s;
            const std::string dir = to_device ? "h2d" : "d2h";
            print_row("copy", dir + " " + src.name + " " + std::to_string(bytes >> 20) + " MiB", bw,
                      "GB/s", bw_anchor, "cudaMemcpyAsync pinned");
            json_row row;
            row.add("kind", "copy").add("direction", dir).add("host_memory", src.name);
            row.add("bytes", double(bytes)).add("median_ms", 1e3 * t.median_s);
            row.add("min_ms", 1e3 * t.min_s).add("reps", t.reps).add("gb_per_s", bw);
            row.add("anchor", "cudaMemcpyAsync pinned").add("anchor_gb_per_s", bw_anchor);
            row.add("ratio_to_anchor", bw / bw_anchor);
            ctx.rows.push_back(row);
        }
    }
    // Strided tiles, as GEMM and the tile store copy them: a block of rows `width` bytes long out
    // of a pinned host matrix whose rows are 128 KiB (16384 doubles), into a packed device tile,
    // beside the contiguous copy of the same bytes. The model prices every copy at the contiguous
    // rate; on an H200 a plan re-reading 4 KiB-row tiles ran as if its copies did not overlap.
    {
        const std::size_t pitch = std::size_t(128) << 10;
        for (std::size_t width : {std::size_t(4) << 10, std::size_t(8) << 10, std::size_t(32) << 10, pitch}) {
            const std::size_t height = bytes / pitch;  // the whole buffer's rows, `width` bytes of each
            const std::size_t moved = width * height;
            for (bool to_device : {true, false}) {
                copy_2d_desc c;
                c.width_bytes = width;
                c.height = height;
                if (to_device) c.dst = d.get(), c.dst_pitch = width, c.src = pinned.get(), c.src_pitch = pitch;
                else c.dst = pinned.get(), c.dst_pitch = pitch, c.src = d.get(), c.src_pitch = width;
                const timing t = time_on_stream(ctx.native, [&] {
                    if (to_device) ctx.dev.copy_2d_to_device(ctx.st, c);
                    else ctx.dev.copy_2d_to_host(ctx.st, c);
                });
                const timing& anchor = to_device ? anchor_h2d : anchor_d2h;
                const double bw = double(moved) * 1e-9 / t.median_s, bw_anchor = gb / anchor.median_s;
                const std::string dir = to_device ? "h2d" : "d2h";
                print_row("copy", dir + " 2d rows of " + std::to_string(width >> 10) + " KiB (pitch 128 KiB)", bw, "GB/s",
                          bw_anchor, "cudaMemcpyAsync pinned");
                json_row row;
                row.add("kind", "copy_2d").add("direction", dir).add("host_memory", "pinned");
                row.add("row_bytes", double(width)).add("rows", double(height)).add("bytes", double(moved));
                row.add("median_ms", 1e3 * t.median_s).add("min_ms", 1e3 * t.min_s).add("reps", t.reps).add("gb_per_s", bw);
                row.add("anchor", "cudaMemcpyAsync pinned, contiguous").add("anchor_gb_per_s", bw_anchor);
                row.add("ratio_to_anchor", bw / bw_anchor);
                ctx.rows.push_back(row);
            }
        }
    }
    ctx.dev.unregister_host(registered.get());

    // Device to device: bytes copied per second (each byte is read once and written once).
    const std::size_t dbytes = std::size_t(ctx.quick ? 256 : 1024) << 20;
    device_buffer x = ctx.dev.allocate(dbytes), y = ctx.dev.allocate(dbytes);
    check(cudaMemsetAsync(x.get(), 1, dbytes, ctx.native), "cudaMemsetAsync");
    const timing anchor = time_on_stream(ctx.native, [&] {
        check(cudaMemcpyAsync(y.get(), x.get(), dbytes, cudaMemcpyDeviceToDevice, ctx.native),
              "cudaMemcpyAsync");
    });
    const timing t = time_on_stream(ctx.native, [&] { ctx.dev.copy_within(ctx.st, y.get(), x.get(), dbytes); });
    const double dgb = double(dbytes) * 1e-9;
    print_row("copy", "d2d copy_within " + std::to_string(dbytes >> 20) + " MiB", dgb / t.median_s,
              "GB/s", dgb / anchor.median_s, "cudaMemcpyAsync d2d");
    json_row row;
    row.add("kind", "copy").add("direction", "d2d").add("host_memory", "none");
    row.add("bytes", double(dbytes)).add("median_ms", 1e3 * t.median_s).add("min_ms", 1e3 * t.min_s);
    row.add("reps", t.reps).add("gb_per_s", dgb / t.median_s).add("note", "bytes copied; traffic is twice that");
    row.add("anchor", "cudaMemcpyAsync d2d").add("anchor_gb_per_s", dgb / anchor.median_s);
    row.add("ratio_to_anchor", anchor.median_s / t.median_s);
    ctx.rows.push_back(row);
}

// ---- Jacobi: one sweep of a square part; the anchor is a device copy of the same array.

template <class T>
void bench_jacobi(bench_context& ctx, index_t n) {
    const std::size_t elems = std::size_t(n) * std::size_t(n), bytes = elems * sizeof(T);
    device_buffer in = ctx.dev.allocate(bytes), out = ctx.dev.allocate(bytes);
    device_buffer residual = ctx.dev.allocate(sizeof(double));
    {
        std::vector<T> host(elems);
        fill_random(host.data(), elems, 11);
        ctx.dev.copy_to_device(ctx.st, in.get(), host.data(), bytes);
        ctx.st.synchronize();
    }
    jacobi_call j;
    j.type = dtype_of<T>();
    j.in = in.get(), j.out = out.get(), j.ld = n;
    j.row_begin = 1, j.row_end = n - 1, j.col_begin = 1, j.col_end = n - 1;
    for (bool with_residual : {false, true}) {
        j.residual = with_residual ? residual.as<double>() : nullptr;
        const timing t = time_on_stream(ctx.native, [&] { ctx.dev.jacobi_sweep(ctx.st, j); });
        const timing anchor = time_on_stream(ctx.native, [&] {
            check(cudaMemcpyAsync(out.get(), in.get(), bytes, cudaMemcpyDeviceToDevice, ctx.native),
                  "cudaMemcpyAsync");
        });
        // Traffic: every point read once and written once (neighbours come from caches).
        const double gbs = 2.0 * double(bytes) * 1e-9 / t.median_s;
        const double gbs_anchor = 2.0 * double(bytes) * 1e-9 / anchor.median_s;
        const std::string detail = std::string(to_string(j.type)) + " " + std::to_string(n) + "^2" +
                                   (with_residual ? " +residual" : "");
        print_row("jacobi", detail, gbs, "GB/s", gbs_anchor, "cudaMemcpyAsync d2d");
        json_row row;
        row.add("kind", "jacobi").add("dtype", std::string(to_string(j.type))).add("n", double(n));
        row.add("residual", with_residual ? "yes" : "no").add("median_ms", 1e3 * t.median_s);
        row.add("min_ms", 1e3 * t.min_s).add("reps", t.reps).add("gb_per_s", gbs);
        row.add("anchor", "cudaMemcpyAsync d2d (read+write)").add("anchor_gb_per_s", gbs_anchor);
        row.add("ratio_to_anchor", gbs / gbs_anchor);
        ctx.rows.push_back(row);
    }
}

int run(int argc, char** argv) {
    std::string out, git_hash;
    int gpu = 0;
    bool quick = false;
    if (const char* h = std::getenv("TILESTREAM_GIT_HASH")) git_hash = h;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--out") out = value();
        else if (a == "--git-hash") git_hash = value();
        else if (a == "--gpu") gpu = std::stoi(value());
        else if (a == "--quick") quick = true;
        else throw std::runtime_error("unknown argument " + a +
                                      " (usage: gpu_bench --out FILE [--git-hash H] [--gpu N] [--quick])");
    }
    if (out.empty()) throw std::runtime_error("usage: gpu_bench --out FILE [--git-hash H] [--gpu N] [--quick]");
    if (git_hash.empty()) git_hash = "unknown";

    const backends::cuda_discovery found = backends::discover_cuda();
    if (gpu < 0 || gpu >= int(found.gpus.size())) {
        std::fprintf(stderr, "gpu_bench: no CUDA GPU %d: %s\n", gpu, found.status.c_str());
        return 2;
    }
    const device_info& g = found.gpus[std::size_t(gpu)];
    const std::string device_text = g.name + " (cc " + std::to_string(g.cc_major) + "." +
                                    std::to_string(g.cc_minor) + ", " + std::to_string(g.threads) +
                                    " SMs, " + format_bytes(g.memory_bytes) + "); " + found.status;
    std::printf("gpu_bench on %s\n", device_text.c_str());

    auto dev = backends::make_cuda_device(gpu, 0, 1, std::nullopt);
    auto st = dev->create_stream();
    cudaStream_t native = cuda::native_stream(*st);
    check(cudaSetDevice(gpu), "cudaSetDevice");
    cublasHandle_t blas = nullptr;
    check(cublasCreate(&blas), "cublasCreate");
    check(cublasSetStream(blas, native), "cublasSetStream");
    check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    bench_context ctx{*dev, *st, native, blas, quick, {}};

    const index_t largest = quick ? 4096 : 8192;
    {
        // Inputs for the largest size; smaller products use their first n*n elements.
        const std::size_t elems = std::size_t(largest) * std::size_t(largest);
        std::vector<float> af(elems), bf(elems);
        fill_random(af.data(), elems, 1);
        fill_random(bf.data(), elems, 2);
        for (index_t n : {index_t(4096), index_t(8192)})
            if (n <= largest) bench_gemm<float>(ctx, n, af.data(), bf.data());
    }
    {
        const std::size_t elems = std::size_t(largest) * std::size_t(largest);
        std::vector<double> ad(elems), bd(elems);
        fill_random(ad.data(), elems, 3);
        fill_random(bd.data(), elems, 4);
        for (index_t n : {index_t(4096), index_t(8192)})
            if (n <= largest) bench_gemm<double>(ctx, n, ad.data(), bd.data());
    }
    {
        // Complex at 4096 (8mnk: four times the real flops).
        const index_t n = 4096;
        const std::size_t elems = std::size_t(n) * std::size_t(n);
        std::vector<std::complex<float>> ac(elems), bc(elems);
        fill_random(ac.data(), elems, 5);
        fill_random(bc.data(), elems, 6);
        bench_gemm<std::complex<float>>(ctx, n, ac.data(), bc.data());
        std::vector<std::complex<double>> az(elems), bz(elems);
        fill_random(az.data(), elems, 7);
        fill_random(bz.data(), elems, 8);
        bench_gemm<std::complex<double>>(ctx, n, az.data(), bz.data());
    }
    bench_copies(ctx);
    bench_jacobi<float>(ctx, quick ? 8192 : 16384);
    bench_jacobi<double>(ctx, quick ? 8192 : 16384);
    cublasDestroy(blas);

    std::ostringstream json;
    json << "{\"benchmark\": \"gpu\", \"git_hash\": \"" << json_escape(git_hash) << "\", \"machine\": \""
         << json_escape(machine_name()) << "\", \"device\": \"" << json_escape(device_text)
         << "\", \"date\": \"" << utc_date() << "\",\n \"results\": [\n";
    for (std::size_t i = 0; i < ctx.rows.size(); ++i)
        json << "  " << ctx.rows[i].str() << (i + 1 < ctx.rows.size() ? ",\n" : "\n");
    json << "]}\n";
    std::ofstream file(out);
    file << json.str();
    if (!file) throw std::runtime_error("cannot write " + out);
    std::printf("wrote %s\n", out.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpu_bench: %s\n", e.what());
        return 1;
    }
}
