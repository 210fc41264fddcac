// GEMM on .npy files over ranks: rank 0 reads the headers and tells every rank; each rank reads
// and writes only its blocks with MPI-IO (MPI_Type_create_darray views), no rank-0 bottleneck.
#include "distributed/mpi_support.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/npy.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>
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

/// Broadcasts rank 0's error text (empty: none) and throws it on every rank as collective_error.
void agree(MPI_Comm comm, std::string message) {
    int len = int(message.size());
    check_mpi(MPI_Bcast(&len, 1, MPI_INT, 0, comm), "MPI_Bcast (error length)");
    if (len == 0) return;
    message.resize(std::size_t(len));
    check_mpi(MPI_Bcast(message.data(), len, MPI_CHAR, 0, comm), "MPI_Bcast (error text)");
    throw collective_error(message);
}

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
    agree(comm, message);
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
    void close() { check_mpi(MPI_File_close(&f_), "MPI_File_close"); }

private:
    MPI_File f_ = MPI_FILE_NULL;
    std::string path_;
};

/// This rank's blocks of a file into a column-major local array (lr x lc, leading dimension ld).
template <class T>
void read_blocks(const process_grid& grid, const std::string& path, const npy_header& h, index_t block, T* local,
                 index_t ld) {
    const index_t lr = local_count(h.rows, block, grid.my_row(), 0, grid.rows());
    const index_t lc = local_count(h.cols, block, grid.my_col(), 0, grid.cols());
    check_count(lr * lc, "npy_gemm: a rank's part of " + path);
    std::vector<T> buffer(std::size_t(std::max<index_t>(1, lr * lc)));
    const datatype view = block_view<T>(grid, h.rows, h.cols, block, h.order);
    mpi_file f(grid.comm(), path, MPI_MODE_RDONLY);
    check_mpi(MPI_File_set_view(f.get(), h.data_offset, mpi_type<T>(), view.get(), "native", MPI_INFO_NULL),
              "MPI_File_set_view");
    check_mpi(MPI_File_read_all(f.get(), buffer.data(), int(lr * lc), mpi_type<T>(), MPI_STATUS_IGNORE),
              "MPI_File_read_all");
    // The darray's local part is in the file's order: row-major for C order.
    for (index_t j = 0; j < lc; ++j)
        for (index_t i = 0; i < lr; ++i)
            local[i + j * ld] = h.order == layout::row_major ? buffer[std::size_t(i * lc + j)] : buffer[std::size_t(i + j * lr)];
}

std::string npy_header_text(dtype t, index_t rows, index_t cols) {
    std::string dict = std::string("{'descr': '") + (t == dtype::f32 ? "<f4" : "<f8") +
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

/// Writes this rank's blocks of the rows x cols matrix (C order) beside `path`, then rank 0
/// renames the file into place once every rank has written.
template <class T>
void write_blocks(const process_grid& grid, const std::string& path, index_t rows, index_t cols, index_t block,
                  const T* local, index_t ld) {
    const index_t lr = local_count(rows, block, grid.my_row(), 0, grid.rows());
    const index_t lc = local_count(cols, block, grid.my_col(), 0, grid.cols());
    std::vector<T> buffer(std::size_t(std::max<index_t>(1, lr * lc)));
    for (index_t i = 0; i < lr; ++i)
        for (index_t j = 0; j < lc; ++j) buffer[std::size_t(i * lc + j)] = local[i + j * ld];
    // The temporary name comes from rank 0 so every rank opens the same file.
    std::string tmp = path + ".partial-" + std::to_string(::getpid());
    int len = int(tmp.size());
    check_mpi(MPI_Bcast(&len, 1, MPI_INT, 0, grid.comm()), "MPI_Bcast (file name)");
    tmp.resize(std::size_t(len));
    check_mpi(MPI_Bcast(tmp.data(), len, MPI_CHAR, 0, grid.comm()), "MPI_Bcast (file name)");
    const std::string header = npy_header_text(dtype_of<T>(), rows, cols);
    {
        mpi_file f(grid.comm(), tmp, MPI_MODE_CREATE | MPI_MODE_WRONLY);
        if (grid.rank() == 0)
            check_mpi(MPI_File_write_at(f.get(), 0, header.data(), int(header.size()), MPI_CHAR, MPI_STATUS_IGNORE),
                      "MPI_File_write_at (npy header)");
        const datatype view = block_view<T>(grid, rows, cols, block, layout::row_major);
        check_mpi(MPI_File_set_view(f.get(), MPI_Offset(header.size()), mpi_type<T>(), view.get(), "native", MPI_INFO_NULL),
                  "MPI_File_set_view");
        check_mpi(MPI_File_write_all(f.get(), buffer.data(), int(lr * lc), mpi_type<T>(), MPI_STATUS_IGNORE),
                  "MPI_File_write_all");
        f.close();
    }
    check_mpi(MPI_Barrier(grid.comm()), "MPI_Barrier");
    std::string message;
    if (grid.rank() == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) {
        message = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
        std::remove(tmp.c_str());
    }
    agree(grid.comm(), message);
}

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
    const index_t bs = r.block;
    auto make = [&](index_t rows, index_t cols, int* desc) {
        const index_t lr = local_count(rows, bs, grid.my_row(), 0, grid.rows());
        const index_t lc = local_count(cols, bs, grid.my_col(), 0, grid.cols());
        const int d[9] = {1, 0, int(rows), int(cols), int(bs), int(bs), 0, 0, int(std::max<index_t>(1, lr))};
        std::memcpy(desc, d, sizeof d);
        return std::vector<T>(files ? std::size_t(std::max<index_t>(1, lr) * std::max<index_t>(1, lc)) : 0,
                              std::numeric_limits<T>::quiet_NaN());
    };
    int da[9], db[9], dc[9];
    auto a = make(ha.rows, ha.cols, da);
    auto b = make(hb.rows, hb.cols, db);
    auto c = make(res.m, res.n, dc);
    if (files) {
        read_blocks<T>(grid, r.a, ha, bs, a.data(), da[8]);
        read_blocks<T>(grid, r.b, hb, bs, b.data(), db[8]);
        if (hc) read_blocks<T>(grid, r.c, *hc, bs, c.data(), dc[8]);
    }
    res.report = pgemm<T>(lg, r.op_a, r.op_b, res.m, res.n, res.k, T(r.alpha), a.data(), 1, 1, da, b.data(), 1, 1, db,
                          T(r.beta), c.data(), 1, 1, dc, options);
    // Layer 0 writes; every layer learns whether it could (rank 0 is on layer 0).
    std::string message;
    if (files) {
        try {
            write_blocks<T>(grid, r.out, res.m, res.n, bs, c.data(), dc[8]);
        } catch (const collective_error& e) {
            message = e.what();
        }
    }
    if (lg.layers() > 1) agree(lg.comm(), message);
    else if (!message.empty()) throw collective_error(message);
    return res;
}

}  // namespace

std::pair<index_t, index_t> npy_shape(MPI_Comm comm, const std::string& path) {
    const npy_header h = read_header(comm, path);
    return {h.rows, h.cols};
}

dtype npy_dtype(MPI_Comm comm, const std::string& path) { return read_header(comm, path).type; }

npy_gemm_result npy_gemm(const layered_grid& grid, const npy_gemm_request& r, const pgemm_options& options) {
    if (r.block < 1) throw collective_error("npy_gemm: block must be at least 1, got " + std::to_string(r.block));
    const npy_header ha = read_header(grid.comm(), r.a);
    const npy_header hb = read_header(grid.comm(), r.b);
    std::optional<npy_header> hc;
    if (!r.c.empty()) hc = read_header(grid.comm(), r.c);
    else if (r.beta != 0) throw collective_error("gemm: --beta is not 0 but no --c file was given");
    auto name = [](dtype t) { return std::string(to_string(t)); };
    if (ha.type != hb.type || (hc && hc->type != ha.type))
        throw collective_error("gemm: dtypes differ: " + r.a + " is " + name(ha.type) + ", " + r.b + " is " + name(hb.type) +
                               (hc ? ", " + r.c + " is " + name(hc->type) : std::string()));
    try {
        return visit_real_dtype(ha.type, "gemm over MPI ranks", [&]<class T>() {
            return npy_gemm_typed<T>(grid, r, ha, hb, hc ? &*hc : nullptr, options);
        });
    } catch (const dimension_mismatch& e) {
        throw collective_error(e.what());  // every rank read the same headers
    }
}

}  // namespace tilestream::distributed
