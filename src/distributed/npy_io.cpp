// GEMM on .npy files over ranks: rank 0 reads the headers and tells every rank; each rank reads
// and writes only its blocks with MPI-IO (MPI_Type_create_darray views), no rank-0 bottleneck.
#include "distributed/mpi_support.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/npy.hpp>

#include "core/output_files.hpp"
#include "distributed/npy_blocks.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <fstream>
#include <limits>
#include <optional>
#include <vector>

namespace tilestream::distributed {
namespace {

/// What rank 0 learned from a header, broadcast as plain integers.
struct npy_header {
    dtype type = dtype::f32;
    index_t rows = 0, cols = 0;
    layout order = layout::row_major;
    index_t data_offset = 0;
};

npy_header read_header(MPI_Comm comm, const std::string& path) {
    int rank = 0;
    check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    npy_header h;
    std::string message;
    if (rank == 0) {
        try {
            const npy_array f = read_npy(path);  // validates the header (mapped, data not read)
            h.type = f.type();
            h.rows = f.rows();
            h.cols = f.cols();
            h.order = f.layout();
            unsigned char start[12] = {};
            std::ifstream in(path, std::ios::binary);
            in.read(reinterpret_cast<char*>(start), sizeof start);
            const index_t header_len = start[6] == 1 ? index_t(start[8]) | index_t(start[9]) << 8
                                                     : index_t(start[8]) | index_t(start[9]) << 8 |
                                                           index_t(start[10]) << 16 | index_t(start[11]) << 24;
            h.data_offset = (start[6] == 1 ? 10 : 12) + header_len;
            if (h.rows > INT_MAX || h.cols > INT_MAX)
                throw file_error(path + ": " + std::to_string(h.rows) + "x" + std::to_string(h.cols) +
                                 " is beyond MPI-IO's int extents");
        } catch (const std::exception& e) {
            message = e.what();
        }
    }
    agree_on_errors(comm, message, true);
    index_t v[5] = {index_t(h.type), h.rows, h.cols, index_t(h.order), h.data_offset};
    check_mpi(MPI_Bcast(v, 5, MPI_INT64_T, 0, comm), "MPI_Bcast (npy header)");
    return {dtype(v[0]), v[1], v[2], layout(v[3]), v[4]};
}

/// The view of this rank's blocks in a rows x cols file of T in `order`.
template <class T>
datatype block_view(const process_grid& grid, index_t rows, index_t cols, index_t block, layout order) {
    const int gsizes[2] = {int(rows), int(cols)};
    const int distribs[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_CYCLIC};
    const int dargs[2] = {int(block), int(block)};
    const int psizes[2] = {grid.rows(), grid.cols()};
    MPI_Datatype t = MPI_DATATYPE_NULL;
    check_mpi(MPI_Type_create_darray(grid.rows() * grid.cols(), grid.rank(), 2, gsizes, distribs, dargs, psizes,
                                     order == layout::row_major ? MPI_ORDER_C : MPI_ORDER_FORTRAN, mpi_type<T>(), &t),
              "MPI_Type_create_darray");
    return datatype(t);
}

class mpi_file {
public:
    mpi_file(MPI_Comm comm, const std::string& path, int mode) : path_(path) {
        const int rc = MPI_File_open(comm, path.c_str(), mode, MPI_INFO_NULL, &f_);
        if (rc != MPI_SUCCESS) {
            f_ = MPI_FILE_NULL;
            try {
                check_mpi(rc, "MPI_File_open");
            } catch (const mpi_error& e) {
                throw file_error(path + ": " + e.what());
            }
        }
        check_mpi(MPI_File_set_errhandler(f_, MPI_ERRORS_RETURN), "MPI_File_set_errhandler");
    }
    mpi_file(const mpi_file&) = delete;
    mpi_file& operator=(const mpi_file&) = delete;
    ~mpi_file() {
        if (f_ != MPI_FILE_NULL) MPI_File_close(&f_);
    }
    MPI_File get() const { return f_; }
    void close() {
        const int rc = MPI_File_close(&f_);
        f_ = MPI_FILE_NULL;
        check_mpi(rc, "MPI_File_close");
    }

private:
    MPI_File f_ = MPI_FILE_NULL;
    std::string path_;
};

/// Throws file_error when an MPI-IO transfer moved fewer than `count` elements (a short write on
/// a full file system may return MPI_SUCCESS).
void check_transferred(const MPI_Status& status, MPI_Datatype type, index_t count, const std::string& what) {
    int got = 0;
    check_mpi(MPI_Get_count(&status, type, &got), "MPI_Get_count");
    if (index_t(got) != count)
        throw file_error(what + ": " + std::to_string(got) + " of " + std::to_string(count) + " elements transferred");
}

/// What this rank's own view of an input says before any collective open: it can be opened for
/// reading and holds at least `bytes` (empty when so).
std::string local_input_problem(const std::string& path, std::size_t bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "cannot read " + path + ": " + std::strerror(errno);
    struct stat st {};
    const int rc = ::fstat(fd, &st);
    ::close(fd);
    if (rc != 0) return "cannot read " + path + ": " + std::strerror(errno);
    if (!S_ISREG(st.st_mode)) return path + " is not a regular file";
    if (std::size_t(st.st_size) < bytes)
        return path + " holds " + std::to_string(st.st_size) + " bytes, fewer than its header says (" +
               std::to_string(bytes) + ")";
    return {};
}

/// Test hook: TILESTREAM_TEST_FAIL_WRITE=R:how makes rank R fail once the output's temporary is
/// open on every rank: "error" (a write error on that rank alone), "kill" (SIGKILL), "term"
/// (SIGTERM), "pause" (sleeps 60 s, for a signal sent meanwhile). Returns the error to report.
std::string write_fault(int rank) {
    const char* v = std::getenv("TILESTREAM_TEST_FAIL_WRITE");
    if (!v) return {};
    const char* colon = std::strchr(v, ':');
    if (!colon || std::atoi(v) != rank) return {};
    const std::string how = colon + 1;
    if (how == "kill") ::raise(SIGKILL);
    if (how == "term") ::raise(SIGTERM);
    if (how == "pause") std::this_thread::sleep_for(std::chrono::seconds(60));
    return how == "error" ? "write failed on purpose (TILESTREAM_TEST_FAIL_WRITE)" : std::string();
}

/// This rank's blocks of a file into a column-major local array (lr x lc, leading dimension ld).
/// The ranks have agreed (read_inputs) that each can read the file.
template <class T>
void read_blocks(const process_grid& grid, const std::string& path, const npy_header& h, index_t block, T* local,
                 index_t ld) {
    const index_t lr = local_count(h.rows, block, grid.my_row(), 0, grid.rows());
    const index_t lc = local_count(h.cols, block, grid.my_col(), 0, grid.cols());
    check_count(lr * lc, "npy_gemm: a rank's part of " + path);
    std::vector<T> buffer(std::size_t(std::max<index_t>(1, lr * lc)));
    const datatype view = block_view<T>(grid, h.rows, h.cols, block, h.order);
    std::string problem;
    {
        mpi_file f(grid.comm(), path, MPI_MODE_RDONLY);
        try {
            check_mpi(MPI_File_set_view(f.get(), h.data_offset, mpi_type<T>(), view.get(), "native", MPI_INFO_NULL),
                      "MPI_File_set_view");
        } catch (const std::exception& e) {
            problem = path + ": " + e.what();
        }
        agree_on_errors(grid.comm(), problem, false);
        MPI_Status status{};
        try {
            check_mpi(MPI_File_read_all(f.get(), buffer.data(), int(lr * lc), mpi_type<T>(), &status), "MPI_File_read_all");
            check_transferred(status, mpi_type<T>(), lr * lc, "cannot read " + path);
        } catch (const std::exception& e) {
            problem = path + ": " + e.what();
        }
        agree_on_errors(grid.comm(), problem, false);
    }
    // The darray's local part is in the file's order: row-major for C order.
    for (index_t j = 0; j < lc; ++j)
        for (index_t i = 0; i < lr; ++i)
            local[i + j * ld] = h.order == layout::row_major ? buffer[std::size_t(i * lc + j)] : buffer[std::size_t(i + j * lr)];
}

std::string npy_header_text(dtype t, index_t rows, index_t cols) {
    std::string dict = std::string("{'descr': '") + std::string(dtype_traits(t).npy_descr) +
                       "', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " + std::to_string(cols) +
                       "), }";
    std::size_t total = 10 + dict.size() + 1;
    const std::size_t padded = (total + 63) / 64 * 64;
    dict.append(padded - total, ' ');
    dict.push_back('\n');
    std::string h = "\x93NUMPY";
    h.push_back(char(1));
    h.push_back(char(0));
    h.push_back(char(dict.size() & 0xff));
    h.push_back(char(dict.size() >> 8));
    return h + dict;
}

/// The output's temporary, registered for removal by a terminating signal on the ranks other than
/// rank 0 (rank 0's detail::output_file registers and removes it).
class temporary_registration {
public:
    explicit temporary_registration(const std::string& name) : slot_(detail::register_temporary(name)) {}
    temporary_registration(const temporary_registration&) = delete;
    temporary_registration& operator=(const temporary_registration&) = delete;
    ~temporary_registration() { detail::unregister_temporary(slot_); }

private:
    int slot_ = -1;
};

/// Global index of local index `l` of a block-cyclic dimension (source process 0).
index_t global_of(index_t l, index_t block, int me, int procs) {
    return (l / block) * block * procs + index_t(me) * block + l % block;
}

/// The in-place case (a device or FIFO, written as cp would): rank 0 gathers every rank's blocks,
/// puts them in C order and writes them through `out` in one stream.
template <class T>
void gather_and_write(const process_grid& grid, detail::output_file* out, const std::string& header, index_t rows,
                      index_t cols, index_t block, const std::vector<T>& buffer, index_t lr, index_t lc) {
    const MPI_Comm comm = grid.comm();
    std::string problem;
    std::vector<T> whole;
    if (grid.rank() == 0) {
        try {
            whole.resize(std::size_t(rows) * std::size_t(cols));
        } catch (const std::bad_alloc&) {
            problem = "cannot write " + out->target().given + ": gathering the " + std::to_string(rows) + "x" +
                      std::to_string(cols) + " result on rank 0 for a device or FIFO needs " +
                      std::to_string(std::size_t(rows) * std::size_t(cols) * sizeof(T)) +
                      " bytes of memory, which it does not have; name a regular file";
        }
    }
    agree_on_errors(comm, problem, false);
    if (grid.rank() == 0) {
        std::vector<T> theirs;
        for (int pr = 0; pr < grid.rows(); ++pr)
        for (int pc = 0; pc < grid.cols(); ++pc) {
            const int r = grid.rank_at(pr, pc);
            const index_t rr = local_count(rows, block, pr, 0, grid.rows());
            const index_t rc = local_count(cols, block, pc, 0, grid.cols());
            const T* src = buffer.data();
            if (r != 0) {
                theirs.resize(std::size_t(std::max<index_t>(1, rr * rc)));
                check_mpi(MPI_Recv(theirs.data(), int(rr * rc), mpi_type<T>(), r, 77, comm, MPI_STATUS_IGNORE),
                          "MPI_Recv (blocks for a device output)");
                src = theirs.data();
            }
            for (index_t i = 0; i < rr; ++i) {
                const index_t gi = global_of(i, block, pr, grid.rows());
                for (index_t j = 0; j < rc; ++j)
                    whole[std::size_t(gi) * std::size_t(cols) + std::size_t(global_of(j, block, pc, grid.cols()))] =
                        src[std::size_t(i * rc + j)];
            }
        }
        try {
            out->write(header.data(), header.size());
            out->write(whole.data(), whole.size() * sizeof(T));
        } catch (const std::exception& e) {
            problem = e.what();
        }
    } else {
        check_mpi(MPI_Send(buffer.data(), int(lr * lc), mpi_type<T>(), 0, 77, comm), "MPI_Send (blocks for a device output)");
    }
    agree_on_errors(comm, problem, false);
}

}  // namespace

template <class T>
void write_npy_blocks_to(const process_grid& grid, detail::output_file* out, index_t rows, index_t cols, index_t block,
                         const T* local, index_t ld) {
    const MPI_Comm comm = grid.comm();
    if ((grid.rank() == 0) != (out != nullptr))
        throw collective_error("internal: write_npy_blocks_to needs the output on rank 0 of the grid, and only there");
    const index_t lr = local_count(rows, block, grid.my_row(), 0, grid.rows());
    const index_t lc = local_count(cols, block, grid.my_col(), 0, grid.cols());
    std::vector<T> buffer(std::size_t(std::max<index_t>(1, lr * lc)));
    for (index_t i = 0; i < lr; ++i)
        for (index_t j = 0; j < lc; ++j) buffer[std::size_t(i * lc + j)] = local[i + j * ld];
    const std::string header = npy_header_text(dtype_of<T>(), rows, cols);
    const std::size_t total = header.size() + std::size_t(rows) * std::size_t(cols) * sizeof(T);
    int in_place = grid.rank() == 0 && out->in_place() ? 1 : 0;
    check_mpi(MPI_Bcast(&in_place, 1, MPI_INT, 0, comm), "MPI_Bcast (output kind)");
    if (in_place) {
        gather_and_write<T>(grid, out, header, rows, cols, block, buffer, lr, lc);
        return;
    }
    const std::string path = grid.rank() == 0 ? out->target().given : std::string();
    // Rank 0 reserves every byte of its temporary, so a full file system or a file size limit fails
    // here, before anything is written; the temporary's name goes to every rank.
    std::string tmp, problem;
    if (grid.rank() == 0) {
        tmp = out->name();
        try {
            out->reserve(total);
        } catch (const std::exception& e) {
            problem = e.what();
        }
    }
    int len = int(tmp.size());
    check_mpi(MPI_Bcast(&len, 1, MPI_INT, 0, comm), "MPI_Bcast (file name)");
    tmp.resize(std::size_t(len));
    check_mpi(MPI_Bcast(tmp.data(), len, MPI_CHAR, 0, comm), "MPI_Bcast (file name)");
    agree_on_errors(comm, problem, false);
    std::optional<temporary_registration> registered;
    if (grid.rank() != 0) registered.emplace(tmp);
    const std::string what = "cannot write " + (grid.rank() == 0 ? path : tmp);
    std::optional<mpi_file> f;
    try {
        f.emplace(comm, tmp, MPI_MODE_WRONLY);
    } catch (const std::exception& e) {
        problem = e.what();
    }
    agree_on_errors(comm, problem, false);  // (the file is closed on every rank as they unwind)
    try {
        if (grid.rank() == 0) {
            MPI_Status status{};
            check_mpi(MPI_File_write_at(f->get(), 0, header.data(), int(header.size()), MPI_CHAR, &status),
                      "MPI_File_write_at (npy header)");
            check_transferred(status, MPI_CHAR, index_t(header.size()), what + " (header)");
        }
        const datatype view = block_view<T>(grid, rows, cols, block, layout::row_major);
        check_mpi(MPI_File_set_view(f->get(), MPI_Offset(header.size()), mpi_type<T>(), view.get(), "native", MPI_INFO_NULL),
                  "MPI_File_set_view");
    } catch (const std::exception& e) {
        problem = std::string(e.what());
    }
    if (problem.empty()) problem = write_fault(grid.rank());
    agree_on_errors(comm, problem, false);
    try {
        MPI_Status status{};
        check_mpi(MPI_File_write_all(f->get(), buffer.data(), int(lr * lc), mpi_type<T>(), &status), "MPI_File_write_all");
        check_transferred(status, mpi_type<T>(), lr * lc, what);
    } catch (const std::exception& e) {
        problem = e.what();
    }
    agree_on_errors(comm, problem, false);
    try {
        check_mpi(MPI_File_sync(f->get()), "MPI_File_sync");
    } catch (const std::exception& e) {
        problem = what + ": " + e.what();
    }
    agree_on_errors(comm, problem, false);
    try {
        f->close();
    } catch (const std::exception& e) {
        problem = what + ": " + e.what();
    }
    agree_on_errors(comm, problem, false);
}

namespace {

template <class T>
npy_gemm_result npy_gemm_typed(const layered_grid& lg, const npy_gemm_request& r, const npy_header& ha,
                               const npy_header& hb, const npy_header* hc, const pgemm_options& options) {
    const process_grid& grid = lg.layer();
    const bool files = lg.my_layer() == 0;  // only layer 0 holds the matrices
    npy_gemm_result res;
    res.type = dtype_of<T>();
    const bool na = r.op_a == op::n, nb = r.op_b == op::n;
    res.m = na ? ha.rows : ha.cols;
    res.k = na ? ha.cols : ha.rows;
    res.n = nb ? hb.cols : hb.rows;
    validate_gemm(r.op_a, r.op_b, ha.rows, ha.cols, hb.rows, hb.cols, hc ? hc->rows : res.m, hc ? hc->cols : res.n);
    std::vector<std::string> inputs{r.a, r.b};
    if (hc) inputs.push_back(r.c);
    check_inputs_readable(lg.comm(), files ? inputs : std::vector<std::string>{});
    auto a = block_cyclic_matrix<T>::on(grid, ha.rows, ha.cols, r.block, files);
    auto b = block_cyclic_matrix<T>::on(grid, hb.rows, hb.cols, r.block, files);
    auto c = block_cyclic_matrix<T>::on(grid, res.m, res.n, r.block, files);
    if (files) {
        read_npy_blocks<T>(grid, r.a, a);
        read_npy_blocks<T>(grid, r.b, b);
        if (hc) read_npy_blocks<T>(grid, r.c, c);
    }
    res.report = pgemm<T>(lg, r.op_a, r.op_b, res.m, res.n, res.k, scalar_as<T>(r.alpha), a.data(), 1, 1, a.desc, b.data(), 1, 1,
                          b.desc, scalar_as<T>(r.beta), c.data(), 1, 1, c.desc, options);
    // Layer 0 writes; every layer learns whether it could (rank 0 is on layer 0).
    std::string message;
    if (files) {
        try {
            write_npy_blocks<T>(grid, r.out, c);
        } catch (const error& e) {
            if (lg.layers() == 1) throw;
            message = e.what();
        }
    }
    if (lg.layers() > 1) agree_on_errors(lg.comm(), message, false);
    return res;
}

}  // namespace

std::pair<index_t, index_t> npy_shape(MPI_Comm comm, const std::string& path) {
    const npy_header h = read_header(comm, path);
    return {h.rows, h.cols};
}

dtype npy_dtype(MPI_Comm comm, const std::string& path) { return read_header(comm, path).type; }

void check_inputs_readable(MPI_Comm comm, const std::vector<std::string>& paths) {
    std::string problem;
    for (const auto& p : paths)
        if (problem.empty()) problem = local_input_problem(p, 0);
    agree_on_errors(comm, problem, true);
}

template <class T>
block_cyclic_matrix<T> block_cyclic_matrix<T>::on(const process_grid& g, index_t rows, index_t cols, index_t block,
                                                  bool holds) {
    if (block < 1) throw collective_error("block must be at least 1, got " + std::to_string(block));
    if (rows > INT_MAX || cols > INT_MAX)
        throw collective_error(std::to_string(rows) + "x" + std::to_string(cols) + " is beyond ScaLAPACK's int extents");
    block_cyclic_matrix<T> m;
    m.rows = rows;
    m.cols = cols;
    m.block = block;
    m.local_rows = local_count(rows, block, g.my_row(), 0, g.rows());
    m.local_cols = local_count(cols, block, g.my_col(), 0, g.cols());
    const int d[9] = {1, 0, int(rows), int(cols), int(block), int(block), 0, 0, int(std::max<index_t>(1, m.local_rows))};
    std::memcpy(m.desc, d, sizeof d);
    if (holds)
        m.local.assign(std::size_t(std::max<index_t>(1, m.local_rows) * std::max<index_t>(1, m.local_cols)),
                       poison<T>());
    return m;
}

template <class T>
void read_npy_blocks(const process_grid& grid, const std::string& path, block_cyclic_matrix<T>& m) {
    const npy_header h = read_header(grid.comm(), path);
    if (h.type != dtype_of<T>() || h.rows != m.rows || h.cols != m.cols)
        throw collective_error(path + " holds " + std::to_string(h.rows) + "x" + std::to_string(h.cols) + " " +
                               std::string(to_string(h.type)) + ", expected " + std::to_string(m.rows) + "x" +
                               std::to_string(m.cols) + " " + std::string(to_string(dtype_of<T>())));
    std::string problem = local_input_problem(path, std::size_t(h.data_offset) + std::size_t(h.rows) * std::size_t(h.cols) * sizeof(T));
    agree_on_errors(grid.comm(), problem, true);
    read_blocks<T>(grid, path, h, m.block, m.data(), m.desc[8]);
}

template <class T>
void write_npy_blocks(const process_grid& grid, const std::string& path, const block_cyclic_matrix<T>& m) {
    std::optional<detail::output_file> out;
    std::string problem;
    if (grid.rank() == 0) {
        try {
            out.emplace(path);
        } catch (const std::exception& e) {
            problem = e.what();
        }
    }
    agree_on_errors(grid.comm(), problem, false);
    write_npy_blocks_to<T>(grid, out ? &*out : nullptr, m.rows, m.cols, m.block, m.data(), m.desc[8]);
    if (out) {
        try {
            out->commit();
        } catch (const std::exception& e) {
            problem = e.what();
        }
    }
    agree_on_errors(grid.comm(), problem, false);
}

#define TILESTREAM_NPY_BLOCKS(T)                                                                                \
    template struct block_cyclic_matrix<T>;                                                                    \
    template void read_npy_blocks<T>(const process_grid&, const std::string&, block_cyclic_matrix<T>&);          \
    template void write_npy_blocks<T>(const process_grid&, const std::string&, const block_cyclic_matrix<T>&); \
    template void write_npy_blocks_to<T>(const process_grid&, detail::output_file*, index_t, index_t, index_t, const T*, index_t);
TILESTREAM_NPY_BLOCKS(float)
TILESTREAM_NPY_BLOCKS(double)
TILESTREAM_NPY_BLOCKS(std::complex<float>)
TILESTREAM_NPY_BLOCKS(std::complex<double>)
#undef TILESTREAM_NPY_BLOCKS

npy_gemm_result npy_gemm(const layered_grid& grid, const npy_gemm_request& r, const pgemm_options& options) {
    if (r.block < 1) throw collective_error("npy_gemm: block must be at least 1, got " + std::to_string(r.block));
    const npy_header ha = read_header(grid.comm(), r.a);
    const npy_header hb = read_header(grid.comm(), r.b);
    std::optional<npy_header> hc;
    if (!r.c.empty()) hc = read_header(grid.comm(), r.c);
    else if (r.beta != scalar(0)) throw collective_error("gemm: --beta is not 0 but no --c file was given");
    auto name = [](dtype t) { return std::string(to_string(t)); };
    if (ha.type != hb.type || (hc && hc->type != ha.type))
        throw collective_error("gemm: dtypes differ: " + r.a + " is " + name(ha.type) + ", " + r.b + " is " + name(hb.type) +
                               (hc ? ", " + r.c + " is " + name(hc->type) : std::string()));
    try {
        return visit_dtype(ha.type, [&]<class T>() {
            return npy_gemm_typed<T>(grid, r, ha, hb, hc ? &*hc : nullptr, options);
        });
    } catch (const dimension_mismatch& e) {
        throw collective_error(e.what());  // every rank read the same headers
    }
}

}  // namespace tilestream::distributed
