// The memory of large results (result_memory.hpp): a numpy memory handler whose large buffers are
// 2 MiB-aligned anonymous mappings with transparent huge pages asked for (madvise; a no-op where
// the kernel has them off), the last one freed kept for the next large result. Measured on the
// 2-core EPYC VM (under load): faulting in 164 MB of 4 KiB pages cost 47-72 ms of system time, of
// huge pages 14 ms; a kept buffer costs none. Small requests go to malloc, as numpy's own do.
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tilestream_numpy_api
#define NO_IMPORT_ARRAY
#include "result_memory.hpp"

#include <numpy/arrayobject.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <map>
#include <mutex>

namespace tilestream::python {
namespace {

constexpr std::size_t huge_page = std::size_t(2) << 20;

struct result_memory {
    std::mutex mutex;
    std::map<void*, std::size_t> live;  ///< mapped buffers in use, and their lengths
    void* kept = nullptr;               ///< the last buffer freed, for the next large result
    std::size_t kept_len = 0;
    /// The largest buffer kept: an eighth of physical memory, at most 1 GiB.
    std::size_t keep_limit = [] {
        const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        const std::size_t physical = pages > 0 && size > 0 ? std::size_t(pages) * std::size_t(size) : 0;
        return std::min<std::size_t>(std::size_t(1) << 30, physical / 8);
    }();
};
// Never destroyed: arrays may be freed during interpreter exit, after static destructors.
result_memory& memory() {
    static result_memory* m = new result_memory;
    return *m;
}

/// len (a multiple of huge_page) bytes on a huge-page boundary, or nullptr.
void* map_aligned(std::size_t len) {
    void* p = mmap(nullptr, len + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t aligned = (start + huge_page - 1) & ~std::uintptr_t(huge_page - 1);
    const std::size_t head = aligned - start, tail = huge_page - head;
    if (head > 0) munmap(p, head);
    if (tail > 0) munmap(reinterpret_cast<void*>(aligned + len), tail);
    madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);  // a hint: refused is fine
    return reinterpret_cast<void*>(aligned);
}

void* large_malloc(std::size_t size) {
    const std::size_t len = (std::max<std::size_t>(size, 1) + huge_page - 1) & ~(huge_page - 1);
    result_memory& m = memory();
    {
        const std::lock_guard lock(m.mutex);
        // The kept buffer when it holds the request without wasting more than half of itself.
        if (m.kept != nullptr && m.kept_len >= len && m.kept_len <= 2 * len) {
            void* p = m.kept;
            m.live.emplace(p, m.kept_len);
            m.kept = nullptr;
            m.kept_len = 0;
            return p;
        }
    }
    void* p = map_aligned(len);
    if (p == nullptr) return nullptr;
    const std::lock_guard lock(m.mutex);
    m.live.emplace(p, len);
    return p;
}

/// The mapping's length when p is one of ours (0 otherwise).
std::size_t large_length(void* p) {
    result_memory& m = memory();
    const std::lock_guard lock(m.mutex);
    const auto it = m.live.find(p);
    return it == m.live.end() ? 0 : it->second;
}

/// Frees p when it is ours (kept for the next result, the older kept one unmapped); false otherwise.
bool large_free(void* p) {
    result_memory& m = memory();
    void* drop = nullptr;
    std::size_t drop_len = 0;
    {
        const std::lock_guard lock(m.mutex);
        const auto it = m.live.find(p);
        if (it == m.live.end()) return false;
        const std::size_t len = it->second;
        m.live.erase(it);
        if (len <= m.keep_limit) {
            drop = m.kept;
            drop_len = m.kept_len;
            m.kept = p;
            m.kept_len = len;
        } else {
            drop = p;
            drop_len = len;
        }
    }
    if (drop != nullptr) munmap(drop, drop_len);
    return true;
}

void* handler_malloc(void*, std::size_t size) {
    return size >= large_result_bytes ? large_malloc(size) : std::malloc(size);
}

void* handler_calloc(void*, std::size_t count, std::size_t size) {
    if (size != 0 && count > SIZE_MAX / size) return nullptr;
    const std::size_t bytes = count * size;
    if (bytes < large_result_bytes) return std::calloc(count, size);
    void* p = large_malloc(bytes);
    if (p != nullptr) std::memset(p, 0, bytes);  // a kept buffer holds an old result
    return p;
}

void handler_free(void*, void* p, std::size_t) {
    if (p != nullptr && !large_free(p)) std::free(p);
}

void* handler_realloc(void* ctx, void* p, std::size_t size) {
    if (p == nullptr) return handler_malloc(ctx, size);
    const std::size_t old = large_length(p);
    if (old == 0 && size < large_result_bytes) return std::realloc(p, size);
    void* q = handler_malloc(ctx, size);
    if (q == nullptr) return nullptr;
    std::memcpy(q, p, std::min(old != 0 ? old : malloc_usable_size(p), size));
    handler_free(ctx, p, 0);
    return q;
}

#if defined(NPY_1_22_API_VERSION) && NPY_API_VERSION >= NPY_1_22_API_VERSION
#define TILESTREAM_NUMPY_HANDLERS 1
PyDataMem_Handler handler = {"tilestream_result", 1,
                             {nullptr, handler_malloc, handler_calloc, handler_realloc, handler_free}};

/// The handler's capsule (made once, never freed: arrays keep a reference to it), or nullptr
/// when this numpy has no handlers.
PyObject* handler_capsule() {
    static PyObject* capsule = PyArray_GetNDArrayCFeatureVersion() >= NPY_1_22_API_VERSION
                                   ? PyCapsule_New(&handler, "mem_handler", nullptr)
                                   : nullptr;
    if (capsule == nullptr) PyErr_Clear();
    return capsule;
}
#endif

}  // namespace

PyObject* empty_result(int nd, const npy_intp* dims, int type_num) {
#ifdef TILESTREAM_NUMPY_HANDLERS
    PyArray_Descr* descr = PyArray_DescrFromType(type_num);
    if (descr == nullptr) return nullptr;
    double bytes = double(descr->elsize);
    Py_DECREF(descr);
    for (int d = 0; d < nd; ++d) bytes *= double(dims[d]);
    PyObject* capsule = bytes >= double(large_result_bytes) ? handler_capsule() : nullptr;
    if (capsule != nullptr) {
        // The handler is the current context's while the array is made; the array keeps it.
        PyObject* old = PyDataMem_SetHandler(capsule);
        if (old == nullptr) return nullptr;
        PyObject* result = PyArray_EMPTY(nd, const_cast<npy_intp*>(dims), type_num, 0);
        PyObject* back = PyDataMem_SetHandler(old);
        Py_DECREF(old);
        if (back == nullptr) {
            Py_XDECREF(result);
            return nullptr;
        }
        Py_DECREF(back);
        return result;
    }
#endif
    return PyArray_EMPTY(nd, const_cast<npy_intp*>(dims), type_num, 0);
}

std::size_t kept_result_bytes() {
    result_memory& m = memory();
    const std::lock_guard lock(m.mutex);
    return m.kept_len;
}

void release_kept_result() {
    result_memory& m = memory();
    void* drop = nullptr;
    std::size_t len = 0;
    {
        const std::lock_guard lock(m.mutex);
        std::swap(drop, m.kept);
        std::swap(len, m.kept_len);
    }
    if (drop != nullptr) munmap(drop, len);
}

void result_memory_fork_prepare() { memory().mutex.lock(); }
void result_memory_fork_after() { memory().mutex.unlock(); }

}  // namespace tilestream::python
