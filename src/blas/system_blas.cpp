// Opening the real BLAS libraries by path and telling their code and tilestream's apart by address.
#include "system_blas.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

#ifndef TILESTREAM_SYSTEM_BLAS_PATH
#error "TILESTREAM_SYSTEM_BLAS_PATH (the system BLAS found at build time) must be defined by the build"
#endif
#ifndef TILESTREAM_SYSTEM_LAPACK_PATH
#error "TILESTREAM_SYSTEM_LAPACK_PATH (the system LAPACK found at build time, or empty) must be defined by the build"
#endif

namespace tilestream::blas {

namespace {

const void* object_base(const void* address) {
    Dl_info info{};
    return dladdr(address, &info) ? info.dli_fbase : nullptr;
}

// dlsym on the handle searches that library and its dependencies only, never the global scope, so
// the drop-in (preloaded first) is not found; a symbol resolving into it anyway is refused.
void* symbol_of(void* handle, const char* name, const void* self) {
    void* s = dlsym(handle, name);
    if (s == nullptr || object_base(s) == object_base(self)) return nullptr;
    return s;
}

blas_library entries_of(void* handle, std::string path, const void* self) {
    blas_library e;
    e.path = std::move(path);
    for (int r = 0; r < routine_count; ++r) e.entry[r] = symbol_of(handle, routine_names[r], self);
    // A BLAS without ?gemm3m (netlib's) answers those calls with its ?gemm.
    for (int r = 0; r < routine_count; ++r)
        if (!e.entry[r]) e.entry[r] = e.entry[int(stand_in(routine(r)))];
    return e;
}

// The file the first entry of `e` lives in (the library that actually answers the calls).
std::string file_of(const blas_library& e) {
    for (const void* entry : e.entry) {
        Dl_info info{};
        if (entry && dladdr(entry, &info) && info.dli_fname) return info.dli_fname;
    }
    return e.path;
}

struct phdr_search {
    const link_map* map;
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> code;
};

int collect_code(dl_phdr_info* info, std::size_t, void* data) {
    auto* s = static_cast<phdr_search*>(data);
    if (info->dlpi_addr != s->map->l_addr || info->dlpi_name == nullptr ||
        std::strcmp(info->dlpi_name, s->map->l_name) != 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& p = info->dlpi_phdr[i];
        if (p.p_type == PT_LOAD && (p.p_flags & PF_X))
            s->code.emplace_back(info->dlpi_addr + p.p_vaddr, info->dlpi_addr + p.p_vaddr + p.p_memsz);
    }
    return 1;
}

}  // namespace

void real_blas::add_code_of(void* handle, const blas_library* target) {
    link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return;
    phdr_search search{map, {}};
    dl_iterate_phdr(collect_code, &search);
    for (const auto& [begin, end] : search.code) {
        const int n = range_count_.load(std::memory_order_relaxed);
        if (n == max_ranges) return;
        ranges_[n] = {begin, end, target};
        range_count_.store(n + 1, std::memory_order_release);
    }
}

real_blas::real_blas(const std::string& requested, const void* self, std::vector<std::string>& problems)
    : self_(self) {
    auto open = [&](const std::string& path) -> void* {
        void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) {
            const char* why = dlerror();
            problems.push_back("cannot open the system BLAS '" + path + "': " + (why ? why : "dlopen failed"));
        } else if (object_base(dlsym(h, "dgemm_")) == object_base(self)) {
            problems.push_back("TILESTREAM_BLAS_LIB '" + path + "' is the tilestream BLAS drop-in itself");
            h = nullptr;
        }
        return h;
    };
    std::string path = requested;
    void* system_handle = path.empty() ? nullptr : open(path);
    if (system_handle == nullptr && path != TILESTREAM_SYSTEM_BLAS_PATH) {
        path = TILESTREAM_SYSTEM_BLAS_PATH;
        system_handle = open(path);
    }
    if (system_handle) {
        system_ = entries_of(system_handle, path, self);
        add_code_of(system_handle, &system_);
    }
    // The LAPACK rows come from the system LAPACK, opened by add_lapack on the first LAPACK call.
    for (int r = 0; r < routine_count; ++r)
        if (is_lapack(routine(r))) system_.entry[r] = nullptr;
    system_handle_ = system_handle;
    system_.path = file_of(system_);
    std::string missing;
    for (int r = 0; r < routine_count; ++r)
        if (!system_.entry[r] && !is_lapack(routine(r)))
            missing += std::string(missing.empty() ? "" : ", ") + routine_names[r];
    if (!missing.empty())
        problems.push_back("the system BLAS lacks " + missing +
                           ": such calls run on tilestream at any size (fallbacks on the BLAS it links)");
}

bool real_blas::add_lapack(const std::string& requested, std::vector<std::string>& problems) {
    bool ran = false;
    std::call_once(lapack_once_, [&] {
        ran = true;
        std::string path = requested.empty() ? std::string(TILESTREAM_SYSTEM_LAPACK_PATH) : requested;
        void* handle = nullptr;
        for (int attempt = 0; attempt < 2 && !handle; ++attempt) {
            if (path.empty()) break;
            handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!handle) {
                const char* why = dlerror();
                problems.push_back("cannot open the system LAPACK '" + path + "': " + (why ? why : "dlopen failed"));
            } else if (object_base(dlsym(handle, "dpotrf_")) == object_base(self_)) {
                problems.push_back("TILESTREAM_LAPACK_LIB '" + path + "' is the tilestream drop-in itself");
                handle = nullptr;
            }
            if (!handle) path = path == TILESTREAM_SYSTEM_LAPACK_PATH ? std::string() : TILESTREAM_SYSTEM_LAPACK_PATH;
        }
        // Each LAPACK row from the LAPACK, else from the system BLAS (OpenBLAS's carries LAPACK).
        std::string missing;
        for (int r = 0; r < routine_count; ++r) {
            if (!is_lapack(routine(r))) continue;
            void* e = handle ? symbol_of(handle, routine_names[r], self_) : nullptr;
            if (!e && system_handle_) e = symbol_of(system_handle_, routine_names[r], self_);
            if (!e) missing += std::string(missing.empty() ? "" : ", ") + routine_names[r];
            if (e && system_.lapack_path.empty()) {
                Dl_info info{};
                system_.lapack_path = dladdr(e, &info) && info.dli_fname ? info.dli_fname : path;
            }
            system_.entry[r] = e;
        }
        if (!missing.empty())
            problems.push_back("neither the system LAPACK nor the system BLAS has " + missing +
                               ": such calls run on tilestream at any size (fallbacks on the LAPACK it links)");
    });
    return ran;
}

void real_blas::add_tilestream(const char* path, std::vector<std::string>& problems) {
    void* handle = path && *path ? dlopen(path, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
    if (!handle) {
        problems.push_back("cannot find the BLAS libtilestream links (dlopen of libtilestream failed)");
        return;
    }
    tilestream_ = entries_of(handle, path, self_);
    tilestream_.path = file_of(tilestream_);
    add_code_of(handle, &tilestream_);
    // That BLAS's own code too, should it call a GEMM entry through the PLT (its LAPACK may).
    if (void* blas = dlopen(tilestream_.path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) add_code_of(blas, &tilestream_);
}

const blas_library* real_blas::internal_target(const void* caller) const {
    const auto address = reinterpret_cast<std::uintptr_t>(caller);
    const int n = range_count_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i)
        if (address >= ranges_[i].begin && address < ranges_[i].end) return ranges_[i].target;
    return nullptr;
}

}  // namespace tilestream::blas
