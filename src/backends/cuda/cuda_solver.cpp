// cuSOLVER for Cholesky's diagonal tiles on CUDA devices, opened on first use: the library and what
// it needs (cuSPARSE, nvJitLink) are about 400 MB that runs without a potrf should not load. Only
// cusolverDn.h's types and declarations are used at build time; the functions come from dlsym.
#include "backends/cuda/cublas_values.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_device.hpp"

#include <tilestream/error.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <type_traits>

namespace tilestream::cuda {

namespace {

struct cusolver_api {
    std::string problem;  ///< why it could not be opened ("" when it was)
    decltype(&cusolverDnCreate) create = nullptr;
    decltype(&cusolverDnDestroy) destroy = nullptr;
    decltype(&cusolverDnSetStream) set_stream = nullptr;
    decltype(&cusolverDnSpotrf_bufferSize) s_size = nullptr;
    decltype(&cusolverDnDpotrf_bufferSize) d_size = nullptr;
    decltype(&cusolverDnCpotrf_bufferSize) c_size = nullptr;
    decltype(&cusolverDnZpotrf_bufferSize) z_size = nullptr;
    decltype(&cusolverDnSpotrf) s_potrf = nullptr;
    decltype(&cusolverDnDpotrf) d_potrf = nullptr;
    decltype(&cusolverDnCpotrf) c_potrf = nullptr;
    decltype(&cusolverDnZpotrf) z_potrf = nullptr;
};

const cusolver_api& api() {
    static const cusolver_api a = [] {
        cusolver_api r;
        // The soname of the toolkit built against first (CUDA 13 ships cuSOLVER 12), then others.
        void* h = nullptr;
        std::string tried;
        for (const char* name : {"libcusolver.so.12", "libcusolver.so.11", "libcusolver.so"}) {
            h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (h != nullptr) break;
            const char* why = dlerror();
            tried += std::string(tried.empty() ? "" : "; ") + (why ? why : name);
        }
        if (h == nullptr) {
            r.problem = "cannot open cuSOLVER (" + tried + ")";
            return r;
        }
        const auto get = [&](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
            if (fn == nullptr && r.problem.empty()) r.problem = std::string("cuSOLVER has no ") + name;
        };
        get(r.create, "cusolverDnCreate");
        get(r.destroy, "cusolverDnDestroy");
        get(r.set_stream, "cusolverDnSetStream");
        get(r.s_size, "cusolverDnSpotrf_bufferSize");
        get(r.d_size, "cusolverDnDpotrf_bufferSize");
        get(r.c_size, "cusolverDnCpotrf_bufferSize");
        get(r.z_size, "cusolverDnZpotrf_bufferSize");
        get(r.s_potrf, "cusolverDnSpotrf");
        get(r.d_potrf, "cusolverDnDpotrf");
        get(r.c_potrf, "cusolverDnCpotrf");
        get(r.z_potrf, "cusolverDnZpotrf");
        return r;  // the library stays open for the process
    }();
    return a;
}

const cusolver_api& usable_api(const std::string& device_id) {
    const cusolver_api& a = api();
    if (!a.problem.empty()) throw device_error(device_id + ": " + a.problem);
    return a;
}

}  // namespace

bool cusolver_available() { return api().problem.empty(); }

void destroy_cusolver_handle(cusolverDnHandle_t h) noexcept {
    if (h != nullptr && api().destroy != nullptr) (void)api().destroy(h);
}

cusolverDnHandle_t cuda_stream::solver() {
    if (solver_ == nullptr) {
        const cusolver_api& a = usable_api(gpu().id());
        cusolverDnHandle_t h = nullptr;
        check(a.create(&h), "cusolverDnCreate", gpu().id());
        const cusolverStatus_t bound = a.set_stream(h, native());
        if (bound != CUSOLVER_STATUS_SUCCESS) {
            (void)a.destroy(h);
            throw_cusolver_error("cusolverDnSetStream", gpu().id(), bound);
        }
        solver_ = h;
    }
    return solver_;
}

void run_cusolver_potrf(cuda_stream& cs, const ::tilestream::detail::engine::column_major_tile& r, dtype type,
                        const std::string& id) {
    const cusolver_api& a = usable_api(id);
    visit_dtype(type, [&]<class T>() {
        using C = cu_t<T>;
        constexpr dtype t = dtype_of<T>();
        cusolverDnHandle_t h = cs.solver();
        C* c = static_cast<C*>(r.c);
        const int n = int(r.n), ldc = int(r.ldc);
        const cublasFillMode_t ul = fill_of(r.uplo_);
        int lwork = 0;
        const auto size_fn = [&] {
            if constexpr (t == dtype::f32) return a.s_size;
            else if constexpr (t == dtype::f64) return a.d_size;
            else if constexpr (t == dtype::c32) return a.c_size;
            else return a.z_size;
        }();
        const auto potrf_fn = [&] {
            if constexpr (t == dtype::f32) return a.s_potrf;
            else if constexpr (t == dtype::f64) return a.d_potrf;
            else if constexpr (t == dtype::c32) return a.c_potrf;
            else return a.z_potrf;
        }();
        check(size_fn(h, ul, n, c, ldc, &lwork), "cusolverDn?potrf_bufferSize", id);
        C* work = static_cast<C*>(cs.solver_workspace(std::max<std::size_t>(std::size_t(std::max(lwork, 0)), 1) * sizeof(C)));
        check(potrf_fn(h, ul, n, c, ldc, work, lwork, cs.solver_info_device()), "cusolverDn?potrf", id);
    });
}

}  // namespace tilestream::cuda
