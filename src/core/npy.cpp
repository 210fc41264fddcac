// Reading (memory-mapped) and atomic writing of NumPy .npy files holding 2-D <f4/<f8/<c8/<c16 arrays.
#include <tilestream/error.hpp>
#include <tilestream/npy.hpp>

#include "core/file_mappings.hpp"
#include "core/message_text.hpp"
#include "core/npy_write.hpp"
#include "core/output_files.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <csignal>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tilestream {

// .npy data is little-endian and we hand out pointers into the mapping without byte swapping.
static_assert(std::endian::native == std::endian::little,
              "tilestream's .npy reader and writer assume a little-endian host");

namespace {

constexpr char npy_magic[] = "\x93NUMPY";
constexpr std::size_t npy_magic_size = 6;
// Above this many characters a malformed header is cut short in error messages.
constexpr std::size_t header_quote_limit = 120;
// The longest header read_npy parses.
constexpr std::size_t max_header_bytes = std::size_t{1} << 16;

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw file_error(path + ": " + what);
}

std::string_view descr_of(dtype t) { return dtype_traits(t).npy_descr; }

/// "'<f4', '<f8', '<c8' and '<c16'": the descrs read_npy accepts.
std::string accepted_descrs() {
    std::string out;
    for (std::size_t i = 0; i < std::size(dtype_table); ++i) {
        if (i > 0) out.append(i + 1 == std::size(dtype_table) ? " and " : ", ");
        out.append("'").append(dtype_table[i].npy_descr).append("'");
    }
    return out;
}

std::string quote_header(std::string_view header) {
    while (!header.empty() && (header.back() == ' ' || header.back() == '\n'))
        header.remove_suffix(1);
    return detail::printable_text(header, header_quote_limit);
}

std::string shape_text(const std::vector<index_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    if (shape.size() == 1) s += ",";
    return s + ")";
}

std::string dims_text(const std::vector<index_t>& shape) {
    std::string s;
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
    return s;
}

/// Closes a file descriptor on scope exit.
class unique_fd {
public:
    explicit unique_fd(int fd) : fd_(fd) {}
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    ~unique_fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }
    int release() { return std::exchange(fd_, -1); }

private:
    int fd_;
};

/// What the header dictionary says.
struct npy_header {
    std::string descr;  // the dtype string, or the raw text of a non-string descr
    bool descr_is_string = false;
    bool fortran_order = false;
    std::vector<index_t> shape;
};

/// Parses the Python literal dictionary numpy writes, e.g.
/// {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
/// It accepts any key order, either quote character, any whitespace and trailing commas, which
/// covers every writer we know of, without being a general Python literal parser.
class header_parser {
public:
    header_parser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

    npy_header parse() {
        npy_header h;
        bool have_descr = false, have_order = false, have_shape = false;
        skip_space();
        expect('{', "expected '{' at the start of the header dictionary");
        for (;;) {
            skip_space();
            if (peek() == '}') {
                ++pos_;
                break;
            }
            const std::string key = parse_string("expected a quoted key");
            skip_space();
            expect(':', "expected ':' after key " + detail::quote_text(key));
            skip_space();
            if (key == "descr") {
                if (have_descr) malformed("duplicate key 'descr'");
                have_descr = true;
                if (peek() == '\'' || peek() == '"') {
                    h.descr = parse_string("expected a string for 'descr'");
                    h.descr_is_string = true;
                } else {
                    // A structured dtype is a list of tuples; keep its text for the error message.
                    h.descr = skip_value();
                }
            } else if (key == "fortran_order") {
                if (have_order) malformed("duplicate key 'fortran_order'");
                have_order = true;
                h.fortran_order = parse_bool();
            } else if (key == "shape") {
                if (have_shape) malformed("duplicate key 'shape'");
                have_shape = true;
                h.shape = parse_shape();
            } else {
                malformed("unexpected key " + detail::quote_text(key));
            }
            skip_space();
            if (peek() == ',') {
                ++pos_;
            } else if (peek() != '}') {
                malformed("expected ',' or '}' after the value of " + detail::quote_text(key));
            }
        }
        skip_space();
        if (pos_ != text_.size()) malformed("unexpected text after the closing '}'");
        if (!have_descr) malformed("no 'descr' key");
        if (!have_order) malformed("no 'fortran_order' key");
        if (!have_shape) malformed("no 'shape' key");
        return h;
    }

private:
    char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

    void skip_space() {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                       text_[pos_] == '\n' || text_[pos_] == '\r'))
            ++pos_;
    }

    [[noreturn]] void malformed(const std::string& why) const {
        fail(path_, "malformed header: " + why + " at byte " + std::to_string(pos_) +
                        " of the header: " + quote_header(text_));
    }

    void expect(char c, const std::string& why) {
        if (peek() != c) malformed(why);
        ++pos_;
    }

    std::string parse_string(const std::string& why) {
        const char quote = peek();
        if (quote != '\'' && quote != '"') malformed(why);
        ++pos_;
        std::string s;
        while (pos_ < text_.size() && text_[pos_] != quote) {
            if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
            s += text_[pos_++];
        }
        if (pos_ >= text_.size()) malformed("unterminated string");
        ++pos_;
        return s;
    }

    bool parse_bool() {
        const std::string_view rest = text_.substr(pos_);
        if (rest.starts_with("True")) {
            pos_ += 4;
            return true;
        }
        if (rest.starts_with("False")) {
            pos_ += 5;
            return false;
        }
        malformed("expected True or False for 'fortran_order'");
    }

    std::vector<index_t> parse_shape() {
        expect('(', "expected a tuple for 'shape'");
        std::vector<index_t> shape;
        for (;;) {
            skip_space();
            if (peek() == ')') {
                ++pos_;
                return shape;
            }
            if (peek() < '0' || peek() > '9')
                malformed("expected a non-negative integer in 'shape'");
            index_t v = 0;
            while (peek() >= '0' && peek() <= '9') {
                if (__builtin_mul_overflow(v, index_t{10}, &v) ||
                    __builtin_add_overflow(v, index_t{peek() - '0'}, &v))
                    malformed("a dimension in 'shape' does not fit in 64 bits");
                ++pos_;
            }
            // Python 2 numpy wrote long integers as 3L.
            if (peek() == 'L') ++pos_;
            shape.push_back(v);
            skip_space();
            if (peek() == ',') {
                ++pos_;
            } else if (peek() != ')') {
                malformed("expected ',' or ')' in 'shape'");
            }
        }
    }

    /// Skips a bracketed or bare value and returns its text.
    std::string skip_value() {
        const std::size_t start = pos_;
        int depth = 0;
        while (pos_ < text_.size()) {
            const char c = text_[pos_];
            if (c == '\'' || c == '"') {
                parse_string("");
                continue;
            }
            if (c == '[' || c == '(' || c == '{') ++depth;
            if (c == ']' || c == ')' || c == '}') {
                if (depth == 0) break;
                --depth;
            }
            if (c == ',' && depth == 0) break;
            ++pos_;
        }
        std::string_view v = text_.substr(start, pos_ - start);
        while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
        if (v.empty()) malformed("expected a value for 'descr'");
        return std::string(v);
    }

    std::string_view text_;
    const std::string& path_;
    std::size_t pos_ = 0;
};

// ---- SIGBUS guard of mapped files ----
// Reading a page of a mapping past the end of a file truncated since ends the process with
// SIGBUS. The handler below maps zero pages over the rest of a registered mapping, so the read
// resumes, and marks the mapping; npy_array::check_unchanged() then reports it. A read(2) copy
// would avoid the signal but double the memory of inputs and lose the zero-copy path.
constexpr int max_guarded_mappings = 256;
struct guarded_range {
    std::atomic<std::uintptr_t> begin{0}, end{0};
    std::atomic<bool> faulted{false};
    std::atomic<bool> writable{false};  // an npy_output's mapping: the run goes on writing into it
};
guarded_range guarded[max_guarded_mappings];
std::mutex guard_mutex;
struct sigaction previous_sigbus {};
std::uintptr_t page_size = 4096;  // set before the handler is installed (sysconf is not signal-safe)

void on_sigbus(int sig, siginfo_t* info, void* context) {
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (auto& g : guarded) {
        const std::uintptr_t b = g.begin.load(std::memory_order_acquire), e = g.end.load(std::memory_order_acquire);
        if (b == 0 || addr < b || addr >= e) continue;
        const std::uintptr_t from = addr & ~(page_size - 1);
        // mmap is a plain system call here; MAP_FIXED replaces the file pages in place.
        const int prot = g.writable.load(std::memory_order_acquire) ? PROT_READ | PROT_WRITE : PROT_READ;
        if (::mmap(reinterpret_cast<void*>(from), e - from, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
            MAP_FAILED) {
            g.faulted.store(true, std::memory_order_release);
            return;
        }
    }
    // Not one of ours: whatever handled SIGBUS before, or the default action (the faulting
    // access runs again on return and ends the process as it would have without us).
    if ((previous_sigbus.sa_flags & SA_SIGINFO) && previous_sigbus.sa_sigaction != nullptr)
        previous_sigbus.sa_sigaction(sig, info, context);
    else if (previous_sigbus.sa_handler != SIG_DFL && previous_sigbus.sa_handler != SIG_IGN)
        previous_sigbus.sa_handler(sig);
    else
        ::signal(SIGBUS, SIG_DFL);
}

/// Registers [base, base + size) with the guard; returns the slot, or -1 (then unguarded).
/// `writable`: pages replaced after a truncation may be written (an output's mapping).
int guard_mapping(const void* base, std::size_t size, bool writable = false) {
    static std::once_flag once;
    std::call_once(once, [] {
        page_size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
        struct sigaction ours {};
        ours.sa_sigaction = on_sigbus;
        ours.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&ours.sa_mask);
        ::sigaction(SIGBUS, &ours, &previous_sigbus);
    });
    std::lock_guard lock(guard_mutex);
    for (int i = 0; i < max_guarded_mappings; ++i) {
        if (guarded[i].begin.load() != 0) continue;
        guarded[i].faulted.store(false);
        guarded[i].writable.store(writable);
        guarded[i].end.store(reinterpret_cast<std::uintptr_t>(base) + size, std::memory_order_release);
        guarded[i].begin.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
        return i;
    }
    return -1;
}

std::uint32_t read_le(const unsigned char* p, int bytes) {
    std::uint32_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

/// Forgets a guarded mapping (before it is unmapped); -1 is ignored.
void unguard_mapping(int slot) {
    if (slot < 0) return;
    std::lock_guard lock(guard_mutex);
    guarded[slot].begin.store(0);
    guarded[slot].end.store(0);
}

bool guard_faulted(int slot) { return slot >= 0 && guarded[slot].faulted.load(std::memory_order_acquire); }

}  // namespace

namespace detail {

bool in_file_mapping(const void* p, std::size_t n) {
    if (p == nullptr || n == 0) return false;
    const auto b = reinterpret_cast<std::uintptr_t>(p), e = b + n;
    const std::lock_guard lock(guard_mutex);
    for (const auto& g : guarded) {
        const std::uintptr_t rb = g.begin.load(), re = g.end.load();
        if (rb != 0 && b < re && rb < e) return true;
    }
    return false;
}

/// A file as read_npy mapped it: the mapping, its guard slot, and the descriptor and status
/// that check_unchanged compares with.
struct npy_mapping {
    void* base = nullptr;
    std::size_t size = 0;
    int slot = -1;
    int fd = -1;
    struct stat at_open {};
    npy_mapping() = default;
    npy_mapping(const npy_mapping&) = delete;
    npy_mapping& operator=(const npy_mapping&) = delete;
    ~npy_mapping() {
        unguard_mapping(slot);
        if (base) ::munmap(base, size);
        if (fd >= 0) ::close(fd);
    }
    bool faulted() const { return guard_faulted(slot); }
    /// Why the file is no longer what was mapped, or empty.
    std::string change() const {
        if (faulted()) return "was truncated while tilestream read it";
        struct stat now {};
        if (::fstat(fd, &now) != 0) return {};
        if (now.st_size < at_open.st_size)
            return "was truncated while tilestream read it (" + std::to_string(at_open.st_size) + " -> " +
                   std::to_string(now.st_size) + " bytes)";
        if (now.st_size != at_open.st_size)
            return "changed size while tilestream read it (" + std::to_string(at_open.st_size) + " -> " +
                   std::to_string(now.st_size) + " bytes)";
        if (now.st_mtim.tv_sec != at_open.st_mtim.tv_sec || now.st_mtim.tv_nsec != at_open.st_mtim.tv_nsec)
            return "was modified while tilestream read it";
        return {};
    }
};
}  // namespace detail

void npy_array::check_unchanged() const {
    if (!mapping_) return;
    const std::string why = mapping_->change();
    if (!why.empty()) fail(path_, why + "; results computed from it are discarded");
}

void npy_array::release_resident() const {
    // A read-only private mapping holds no private changes: dropping its pages loses nothing.
    if (mapping_) ::madvise(mapping_->base, mapping_->size, MADV_DONTNEED);
}

npy_array read_npy(const std::string& path) {
    npy_array a = read_npy_stack(path);
    if (a.ndim() > 2) {
        std::vector<index_t> shape = a.leading_shape();
        shape.push_back(a.rows());
        shape.push_back(a.cols());
        fail(path, "unsupported shape " + shape_text(shape) + ": tilestream reads 1-D and 2-D arrays here (stacks of "
                   "matrices, 3 or more dimensions, are read by gemm in one process)");
    }
    return a;
}

index_t npy_array::count() const {
    index_t n = 1;
    for (index_t d : lead_) n *= d;
    return n;
}

npy_array read_npy_stack(const std::string& path) {
    if (path.empty()) throw file_error("read_npy: empty file name");

    // O_NONBLOCK so that a FIFO given by mistake is rejected below instead of blocking open().
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd.get() < 0) fail(path, "cannot open: " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat: " + errno_text(errno));
    if (S_ISDIR(st.st_mode)) fail(path, "cannot read: " + errno_text(EISDIR));
    // mmap needs a file whose size is known; pipes and devices are not .npy files we can map.
    if (!S_ISREG(st.st_mode)) fail(path, "cannot read: not a regular file");

    const auto file_size = static_cast<std::size_t>(st.st_size);
    if (file_size < npy_magic_size)
        fail(path, "not a .npy file (bad magic; the file has only " + std::to_string(file_size) +
                       " bytes)");

    // The whole file is mapped so that the header and data come from one consistent view;
    // the file is never empty here, so mmap never sees a zero length.
    void* base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (base == MAP_FAILED) {
        const int err = errno;
        fail(path, "cannot map " + std::to_string(file_size) + " bytes: " + errno_text(err));
    }
    auto watch = std::make_shared<detail::npy_mapping>();
    watch->base = base;
    watch->size = file_size;
    watch->at_open = st;
    watch->slot = guard_mapping(base, file_size);
    // The descriptor stays open so that check_unchanged can see the file's size and time later.
    watch->fd = fd.release();
    std::shared_ptr<void> mapping(watch, base);
    // A truncation while the header is read shows as zeros; report it as what it is.
    const auto truncated_now = [&] {
        if (watch->faulted()) fail(path, "was truncated while tilestream read it");
    };

    const auto* bytes = static_cast<const unsigned char*>(base);
    if (std::memcmp(bytes, npy_magic, npy_magic_size) != 0)
        fail(path, "not a .npy file (bad magic)");
    if (file_size < 8)
        fail(path, "truncated header: the file ends at byte " + std::to_string(file_size) +
                       ", before the format version");
    const int major = bytes[6], minor = bytes[7];
    if (major < 1 || major > 3 || minor != 0)
        fail(path, "unsupported .npy format version " + std::to_string(major) + "." +
                       std::to_string(minor) + " (tilestream reads 1.0, 2.0 and 3.0)");
    // Version 1 stores the header length in 2 bytes, versions 2 and 3 in 4.
    const std::size_t length_bytes = major == 1 ? 2 : 4;
    const std::size_t header_start = 8 + length_bytes;
    if (file_size < header_start)
        fail(path, "truncated header: the file ends at byte " + std::to_string(file_size) +
                       ", inside the " + std::to_string(header_start) + "-byte preamble");
    const std::size_t header_len = read_le(bytes + 8, static_cast<int>(length_bytes));
    if (header_len > file_size - header_start)
        fail(path, "truncated header: the preamble announces " + std::to_string(header_len) +
                       " header bytes but only " + std::to_string(file_size - header_start) +
                       " follow");
    // numpy refuses headers over 10000 bytes unless told otherwise; a 2-D <f4/<f8 header is under
    // 200. A huge one is not parsed (its text would be copied into messages and the descr).
    if (header_len > max_header_bytes)
        fail(path, "header of " + std::to_string(header_len) + " bytes: more than the " +
                       std::to_string(max_header_bytes) + " tilestream reads (a 2-D '<f4' or '<f8' array needs "
                       "under 200; numpy itself refuses headers over 10000 bytes by default)");
    const std::size_t data_offset = header_start + header_len;

    // Version 3 headers are UTF-8, 1 and 2 latin-1; the keys and values we accept are ASCII
    // in both, and any other text can only appear inside a descr we reject.
    const std::string_view header_text(reinterpret_cast<const char*>(bytes + header_start),
                                       header_len);
    npy_header h;
    try {
        h = header_parser(header_text, path).parse();
    } catch (const file_error&) {
        truncated_now();
        throw;
    }
    truncated_now();

    dtype type = dtype::f32;
    if (!h.descr_is_string || !dtype_from_npy_descr(h.descr, type))
        fail(path, "unsupported dtype " +
                       (h.descr_is_string ? detail::quote_text(h.descr) : detail::printable_text(h.descr)) +
                       " (tilestream reads " + accepted_descrs() + ")");

    if (h.shape.empty())
        fail(path, "unsupported shape " + shape_text(h.shape) + ": tilestream reads 1-D and 2-D arrays, and stacks "
                   "of matrices (3 or more dimensions) for gemm");
    const std::size_t nd = h.shape.size();
    if (nd > 2 && h.fortran_order)
        fail(path, "a Fortran-ordered array of shape " + shape_text(h.shape) + ": tilestream reads stacks of matrices "
                   "(3 or more dimensions) in C order, where each matrix is contiguous; save it with "
                   "np.save(path, np.ascontiguousarray(a))");
    const index_t rows = nd == 1 ? h.shape[0] : h.shape[nd - 2];
    const index_t cols = nd == 1 ? 1 : h.shape[nd - 1];

    index_t data_bytes = 0;
    try {
        index_t elements = checked_mul(rows, cols, "shape");
        for (std::size_t d = 0; d + 2 < nd; ++d) elements = checked_mul(elements, h.shape[d], "shape");
        data_bytes = checked_mul(elements, static_cast<index_t>(size_of(type)), "shape");
    } catch (const size_overflow&) {
        fail(path, "shape " + shape_text(h.shape) + " " + h.descr + " needs more than 2^63 bytes");
    }
    const std::size_t available = file_size - data_offset;
    if (static_cast<std::uint64_t>(data_bytes) > available)
        fail(path, "truncated: header says " + dims_text(h.shape) + " " + h.descr + " (" +
                       std::to_string(data_bytes) + " bytes of data) but only " +
                       std::to_string(available) + " bytes follow the header");

    npy_array a;
    const unsigned char* data = bytes + data_offset;
    if (data_offset % size_of(type) == 0) {
        a.storage_ = std::move(mapping);
        a.mapping_ = std::move(watch);
        a.data_ = data;
    } else {
        // numpy aligns data to 64 bytes, but a hand-made header may not; a misaligned float
        // pointer is undefined behaviour, so such files are copied into aligned memory.
        std::shared_ptr<void> buffer(
            detail::aligned_host_alloc(static_cast<std::size_t>(data_bytes)),
            detail::aligned_free{});
        std::memcpy(buffer.get(), data, static_cast<std::size_t>(data_bytes));
        truncated_now();
        a.data_ = buffer.get();
        a.storage_ = std::move(buffer);
    }
    a.type_ = type;
    a.rows_ = rows;
    a.cols_ = cols;
    a.layout_ = h.fortran_order ? layout::col_major : layout::row_major;
    a.ndim_ = static_cast<int>(h.shape.size());
    if (nd > 2) a.lead_.assign(h.shape.begin(), h.shape.end() - 2);
    a.path_ = path;
    return a;
}

template <class T>
host_matrix_view<const T> npy_array::view() const {
    if (dtype_of<T>() != type_)
        throw invalid_argument(path_ + ": view<" + std::string(to_string(dtype_of<T>())) +
                               "> of a file holding " + std::string(to_string(type_)) + " ('" +
                               std::string(descr_of(type_)) + "')");
    return host_matrix_view<const T>(static_cast<const T*>(data_), rows_, cols_, layout_);
}

template <class T>
host_batch_view<const T> npy_array::stack_view() const {
    return host_batch_view<const T>::strided(view<T>(), rows_ * cols_, count());
}

template host_batch_view<const float> npy_array::stack_view<float>() const;
template host_batch_view<const double> npy_array::stack_view<double>() const;
template host_batch_view<const std::complex<float>> npy_array::stack_view<std::complex<float>>() const;
template host_batch_view<const std::complex<double>> npy_array::stack_view<std::complex<double>>() const;
template host_matrix_view<const float> npy_array::view<float>() const;
template host_matrix_view<const double> npy_array::view<double>() const;
template host_matrix_view<const std::complex<float>> npy_array::view<std::complex<float>>() const;
template host_matrix_view<const std::complex<double>> npy_array::view<std::complex<double>>() const;

namespace {

std::string npy_preamble(std::string_view descr, bool fortran_order, const std::vector<index_t>& shape) {
    std::string dims;
    for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
    if (shape.size() == 1) dims += ",";
    std::string dict = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': " + (fortran_order ? "True" : "False") + ", 'shape': (" + dims + "), }";
    // numpy pads with spaces and a final newline so that the data starts on a 64-byte boundary.
    const auto padded = [&](std::size_t length_bytes) {
        const std::size_t unpadded = npy_magic_size + 2 + length_bytes + dict.size() + 1;
        return dict.size() + 1 + (64 - unpadded % 64) % 64;
    };
    std::size_t length_bytes = 2;
    std::size_t header_len = padded(2);
    if (header_len > 0xffff) {
        length_bytes = 4;
        header_len = padded(4);
    }
    std::string pre(npy_magic, npy_magic_size);
    pre += static_cast<char>(length_bytes == 2 ? 1 : 2);
    pre += '\0';
    for (std::size_t i = 0; i < length_bytes; ++i)
        pre += static_cast<char>((header_len >> (8 * i)) & 0xff);
    pre += dict;
    pre.append(header_len - dict.size() - 1, ' ');
    pre += '\n';
    return pre;
}

std::string npy_preamble(dtype type, bool fortran_order, const std::vector<index_t>& shape) {
    return npy_preamble(descr_of(type), fortran_order, shape);
}

std::string npy_preamble(dtype type, bool fortran_order, index_t rows, index_t cols) {
    return npy_preamble(type, fortran_order, std::vector<index_t>{rows, cols});
}

}  // namespace

void check_output_path(const std::string& path) { (void)detail::resolve_output(path); }

namespace detail {

template <class T>
void write_npy_to(output_file& out, host_matrix_view<const T> m) {
    const dtype type = dtype_of<T>();
    const bool col_major = m.layout() == layout::col_major;
    // Total size is checked up front so that a view whose size overflows fails before any I/O.
    checked_bytes(m.rows(), m.cols(), type, "write_npy");
    const std::string pre = npy_preamble(type, col_major, m.rows(), m.cols());
    out.write(pre.data(), pre.size());
    if (m.empty()) return;
    // Lines are rows (C order) or columns (Fortran order); each is contiguous in memory.
    const index_t lines = col_major ? m.cols() : m.rows();
    const index_t line_len = col_major ? m.rows() : m.cols();
    const std::size_t line_bytes = static_cast<std::size_t>(line_len) * sizeof(T);
    if (m.ld() == line_len) {
        out.write(m.data(), static_cast<std::size_t>(lines) * line_bytes);
        return;
    }
    // Gather strided lines into ~1 MiB chunks so that narrow sections do not become one system
    // call per line.
    constexpr std::size_t chunk_bytes = std::size_t{1} << 20;
    std::vector<char> chunk;
    chunk.reserve(std::max(chunk_bytes, line_bytes));
    for (index_t l = 0; l < lines; ++l) {
        if (chunk.size() + line_bytes > chunk.capacity()) {
            out.write(chunk.data(), chunk.size());
            chunk.clear();
        }
        const auto* src = reinterpret_cast<const char*>(m.data() + l * m.ld());
        chunk.insert(chunk.end(), src, src + line_bytes);
    }
    out.write(chunk.data(), chunk.size());
}

template void write_npy_to<float>(output_file&, host_matrix_view<const float>);
template void write_npy_to<double>(output_file&, host_matrix_view<const double>);
template void write_npy_to<std::complex<float>>(output_file&, host_matrix_view<const std::complex<float>>);
template void write_npy_to<std::complex<double>>(output_file&, host_matrix_view<const std::complex<double>>);

template <class T>
void write_npy_stack_to(output_file& out, const std::vector<index_t>& lead, host_batch_view<const T> s) {
    const dtype type = dtype_of<T>();
    std::vector<index_t> shape = lead;
    shape.push_back(s.rows());
    shape.push_back(s.cols());
    index_t count = 1;
    for (index_t d : lead) count = checked_mul(count, d, "write_npy_stack");
    if (count != s.count())
        throw invalid_argument("write_npy_stack: the leading shape holds " + std::to_string(count) +
                               " matrices, the stack " + std::to_string(s.count()));
    checked_bytes(checked_mul(count, s.rows(), "write_npy_stack"), s.cols(), type, "write_npy_stack");
    const std::string pre = npy_preamble(type, false, shape);
    out.write(pre.data(), pre.size());
    if (count == 0 || s.rows() == 0 || s.cols() == 0) return;
    // Row-major matrices one after another: one write; anything else goes row by row through a
    // chunk of about 1 MiB.
    if (s.is_strided() && s.layout() == layout::row_major && s.ld() == s.cols() && s.stride() == s.rows() * s.cols()) {
        out.write(s.data(0), static_cast<std::size_t>(count * s.rows() * s.cols()) * sizeof(T));
        return;
    }
    constexpr std::size_t chunk_elements = (std::size_t{1} << 20) / sizeof(T);
    std::vector<T> chunk;
    chunk.reserve(std::max<std::size_t>(chunk_elements, std::size_t(s.cols())));
    for (index_t i = 0; i < count; ++i) {
        const host_matrix_view<const T> m = s[i];
        for (index_t r = 0; r < m.rows(); ++r) {
            if (chunk.size() + std::size_t(m.cols()) > chunk.capacity()) {
                out.write(chunk.data(), chunk.size() * sizeof(T));
                chunk.clear();
            }
            for (index_t c = 0; c < m.cols(); ++c) chunk.push_back(m(r, c));
        }
    }
    out.write(chunk.data(), chunk.size() * sizeof(T));
}

template void write_npy_stack_to<float>(output_file&, const std::vector<index_t>&, host_batch_view<const float>);
template void write_npy_stack_to<double>(output_file&, const std::vector<index_t>&, host_batch_view<const double>);
template void write_npy_stack_to<std::complex<float>>(output_file&, const std::vector<index_t>&,
                                                      host_batch_view<const std::complex<float>>);
template void write_npy_stack_to<std::complex<double>>(output_file&, const std::vector<index_t>&,
                                                       host_batch_view<const std::complex<double>>);

void write_npy_indices_to(output_file& out, std::span<const index_t> v) {
    static_assert(sizeof(index_t) == 8 && std::endian::native == std::endian::little, "'<i8' is a little-endian int64");
    const std::string pre = npy_preamble("<i8", false, std::vector<index_t>{index_t(v.size())});
    out.write(pre.data(), pre.size());
    if (!v.empty()) out.write(v.data(), v.size() * sizeof(index_t));
}

std::size_t npy_file_bytes(dtype type, index_t rows, index_t cols, tilestream::layout lay) {
    const std::size_t data = checked_bytes(rows, cols, type, "npy file");
    return npy_preamble(type, lay == layout::col_major, rows, cols).size() + data;
}

}  // namespace detail

template <class T>
void write_npy_stack(const std::string& path, const std::vector<index_t>& lead, host_batch_view<const T> s) {
    if (path.empty()) throw file_error("write_npy_stack: empty file name");
    detail::output_file out(path);
    detail::write_npy_stack_to<T>(out, lead, s);
    out.commit();
}

template void write_npy_stack<float>(const std::string&, const std::vector<index_t>&, host_batch_view<const float>);
template void write_npy_stack<double>(const std::string&, const std::vector<index_t>&, host_batch_view<const double>);
template void write_npy_stack<std::complex<float>>(const std::string&, const std::vector<index_t>&,
                                                   host_batch_view<const std::complex<float>>);
template void write_npy_stack<std::complex<double>>(const std::string&, const std::vector<index_t>&,
                                                    host_batch_view<const std::complex<double>>);

template <class T>
void write_npy(const std::string& path, host_matrix_view<const T> m) {
    if (path.empty()) throw file_error("write_npy: empty file name");
    checked_bytes(m.rows(), m.cols(), dtype_of<T>(), "write_npy");
    detail::output_file out(path);
    detail::write_npy_to<T>(out, m);
    out.commit();
}

namespace detail {
struct npy_output_state {
    explicit npy_output_state(const output_target& target) : file(target) {}
    ~npy_output_state() { unmap(); }
    void unmap() {
        unguard_mapping(std::exchange(slot, -1));
        if (base) ::munmap(std::exchange(base, nullptr), size);
    }
    output_file file;
    std::string path;
    void* base = nullptr;
    int slot = -1;  // the SIGBUS guard of the mapping
    std::size_t size = 0, data_offset = 0;
    dtype type = dtype::f32;
    index_t rows = 0, cols = 0;
    tilestream::layout layout = layout::row_major;
};
}  // namespace detail

npy_output::npy_output(const std::string& path, dtype type, index_t rows, index_t cols, tilestream::layout lay) {
    if (path.empty()) throw file_error("npy_output: empty file name");
    const std::size_t data_bytes = checked_bytes(rows, cols, type, "npy_output " + path);
    const detail::output_target target = detail::resolve_output(path);
    if (target.kind == detail::output_kind::in_place)
        fail(path, "cannot be written through a memory mapping: it is a device or FIFO (write the result with "
                   "write_npy instead)");
    const std::string pre = npy_preamble(type, lay == layout::col_major, rows, cols);
    auto st = std::make_unique<detail::npy_output_state>(target);
    st->path = path;
    st->type = type;
    st->rows = rows;
    st->cols = cols;
    st->layout = lay;
    st->data_offset = pre.size();
    st->size = pre.size() + data_bytes;
    st->file.reserve(st->size);
    st->file.write(pre.data(), pre.size());
    void* base = ::mmap(nullptr, st->size, PROT_READ | PROT_WRITE, MAP_SHARED, st->file.fd(), 0);
    if (base == MAP_FAILED) {
        const int err = errno;
        fail(path, "cannot map the temporary '" + st->file.name() + "' (" + std::to_string(st->size) +
                       " bytes): " + errno_text(err));
    }
    st->base = base;
    // Truncating the temporary under the mapping would end the process with SIGBUS: the guard
    // puts memory in its place and finish() reports it.
    st->slot = guard_mapping(base, st->size, true);
    s_ = std::move(st);
}

npy_output::npy_output(npy_output&&) noexcept = default;
npy_output& npy_output::operator=(npy_output&&) noexcept = default;
npy_output::~npy_output() = default;

template <class T>
host_matrix_view<T> npy_output::view() const {
    if (dtype_of<T>() != s_->type)
        throw invalid_argument(s_->path + ": view<" + std::string(to_string(dtype_of<T>())) + "> of an output of " +
                               std::string(to_string(s_->type)));
    return host_matrix_view<T>(reinterpret_cast<T*>(static_cast<char*>(s_->base) + s_->data_offset), s_->rows,
                               s_->cols, s_->layout);
}

template host_matrix_view<float> npy_output::view<float>() const;
template host_matrix_view<double> npy_output::view<double>() const;
template host_matrix_view<std::complex<float>> npy_output::view<std::complex<float>>() const;
template host_matrix_view<std::complex<double>> npy_output::view<std::complex<double>>() const;

void npy_output::release_resident() const {
    // For a shared file mapping the page cache keeps what was written (dirty pages are written
    // back later); only this process's page table entries go.
    if (s_ && s_->base) ::madvise(s_->base, s_->size, MADV_DONTNEED);
}

void npy_output::check_intact() const {
    if (!s_ || !s_->base) return;
    struct stat st {};
    if (guard_faulted(s_->slot) || (::fstat(s_->file.fd(), &st) == 0 && std::size_t(st.st_size) < s_->size))
        fail(s_->path, "the temporary '" + s_->file.name() + "' was truncated while the result was written to it");
}

detail::output_file& npy_output::finish() {
    if (!s_) throw file_error("npy_output: finish after a move or a commit");
    if (s_->base) {
        check_intact();
        if (::msync(s_->base, s_->size, MS_SYNC) != 0) {
            const int err = errno;
            fail(s_->path, "cannot write '" + s_->file.name() + "': " + errno_text(err));
        }
        s_->unmap();
    }
    s_->file.close();
    return s_->file;
}

void npy_output::commit() {
    detail::output_file& f = finish();
    f.commit();
    s_.reset();
}

template void write_npy<float>(const std::string&, host_matrix_view<const float>);
template void write_npy<double>(const std::string&, host_matrix_view<const double>);
template void write_npy<std::complex<float>>(const std::string&, host_matrix_view<const std::complex<float>>);
template void write_npy<std::complex<double>>(const std::string&, host_matrix_view<const std::complex<double>>);

}  // namespace tilestream
