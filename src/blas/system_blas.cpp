// Opening the real BLAS libraries by path and telling their code and tilestream's apart by address.
#include "system_blas.hpp"

#include <tilestream/types.hpp>

#include <dlfcn.h>
#include <link.h>

#include <cstring>

#ifndef TILESTREAM_SYSTEM_BLAS_PATH
#error "TILESTREAM_SYSTEM_BLAS_PATH (the system BLAS found at build time) must be defined by the build"
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

gemm_entries entries_of(void* handle, std::string path, const void* self) {
    gemm_entries e;
    e.path = std::move(path);
    e.sgemm = reinterpret_cast<sgemm_fn>(symbol_of(handle, "sgemm_", self));
    e.dgemm = reinterpret_cast<dgemm_fn>(symbol_of(handle, "dgemm_", self));
    e.cblas_sgemm = reinterpret_cast<cblas_sgemm_fn>(symbol_of(handle, "cblas_sgemm", self));
    e.cblas_dgemm = reinterpret_cast<cblas_dgemm_fn>(symbol_of(handle, "cblas_dgemm", self));
    return e;
}

// The file the first GEMM entry of `e` lives in (the library that actually answers the calls).
std::string file_of(const gemm_entries& e) {
    const void* entry = e.cblas_dgemm   ? reinterpret_cast<const void*>(e.cblas_dgemm)
                        : e.dgemm       ? reinterpret_cast<const void*>(e.dgemm)
                                        : nullptr;
    Dl_info info{};
    if (entry && dladdr(entry, &info) && info.dli_fname) return info.dli_fname;
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

void real_blas::add_code_of(void* handle, const gemm_entries* target) {
    link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return;
    phdr_search search{map, {}};
    dl_iterate_phdr(collect_code, &search);
    for (const auto& [begin, end] : search.code) ranges_.push_back({begin, end, target});
}

real_blas::real_blas(const std::string& requested, const void* self, std::vector<std::string>& problems) {
    // libtilestream, already loaded as the drop-in's dependency, found from one of its functions.
    Dl_info info{};
    void* tilestream_handle = nullptr;
    if (dladdr(reinterpret_cast<const void*>(&tilestream::parse_bytes), &info) && info.dli_fname)
        tilestream_handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (tilestream_handle) {
        tilestream_ = entries_of(tilestream_handle, info.dli_fname, self);
        tilestream_.path = file_of(tilestream_);
        add_code_of(tilestream_handle, &tilestream_);
        // That BLAS's own code too, should it call a GEMM entry through the PLT (its LAPACK may).
        if (void* blas = dlopen(tilestream_.path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) add_code_of(blas, &tilestream_);
    } else {
        problems.push_back("cannot find libtilestream's BLAS (dladdr/dlopen failed)");
    }

    auto open = [&](const std::string& path) -> void* {
        void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) {
            const char* why = dlerror();
            problems.push_back("cannot open the system BLAS '" + path + "': " + (why ? why : "dlopen failed"));
        } else if (object_base(reinterpret_cast<const void*>(dlsym(h, "dgemm_"))) == object_base(self)) {
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
    // A system BLAS without CBLAS (or none at all) leaves those entries to the one tilestream links.
    if (!system_.sgemm) system_.sgemm = tilestream_.sgemm;
    if (!system_.dgemm) system_.dgemm = tilestream_.dgemm;
    if (!system_.cblas_sgemm) system_.cblas_sgemm = tilestream_.cblas_sgemm;
    if (!system_.cblas_dgemm) system_.cblas_dgemm = tilestream_.cblas_dgemm;
    system_.path = file_of(system_);
    if (!system_.sgemm || !system_.dgemm || !system_.cblas_sgemm || !system_.cblas_dgemm)
        problems.push_back("no real BLAS provides every GEMM entry (sgemm_, dgemm_, cblas_sgemm, cblas_dgemm); "
                           "calls to a missing one run on tilestream at any size");
}

const gemm_entries* real_blas::internal_target(const void* caller) const {
    const auto address = reinterpret_cast<std::uintptr_t>(caller);
    for (const auto& r : ranges_)
        if (address >= r.begin && address < r.end) return r.target;
    return nullptr;
}

}  // namespace tilestream::blas
