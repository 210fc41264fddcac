// The MPI environment, owned communicators and process grids, with every MPI call checked.
#include <tilestream/distributed.hpp>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace tilestream::distributed {

void check_mpi(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    int rank = -1, initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    throw mpi_error(std::string(call) + " failed on rank " + std::to_string(rank) + ": " +
                    (len > 0 ? std::string(text, std::size_t(len)) : "error " + std::to_string(rc)));
}

void agree_on_errors(MPI_Comm comm, const std::string& mine, bool input) {
    int rank = 0, size = 1;
    check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    const int first = mine.empty() ? size : rank;
    int lowest = size;
    check_mpi(MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (agreeing on errors)");
    if (lowest == size) return;
    std::string text = mine;
    int len = int(text.size());
    check_mpi(MPI_Bcast(&len, 1, MPI_INT, lowest, comm), "MPI_Bcast (error length)");
    text.resize(std::size_t(len));
    check_mpi(MPI_Bcast(text.data(), len, MPI_CHAR, lowest, comm), "MPI_Bcast (error text)");
    if (lowest != 0) text = "rank " + std::to_string(lowest) + ": " + text;
    if (input) throw collective_error(text);
    throw collective_failure(text);
}

bool launched_with_ranks() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
        if (const char* s = std::getenv(v); s && std::atoi(s) > 1) return true;
    return false;
}

environment::environment(int* argc, char*** argv) {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) {
        int provided = 0;
        check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        initialized_here_ = true;
    }
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

// Present when LeakSanitizer is linked in (ASan builds), null otherwise.
extern "C" void __lsan_do_leak_check() __attribute__((weak));

environment::~environment() {
    if (!initialized_here_) return;
    // Leaks are checked before MPI_Finalize: OpenMPI unloads its plugins there, and what they keep
    // would then show under "<unknown module>", where no suppression can name it (tests/mpi/mpi_lsan.supp).
    if (&__lsan_do_leak_check != nullptr) __lsan_do_leak_check();
    MPI_Finalize();  // nothing to report to from a destructor
}

communicator::communicator(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {}

communicator& communicator::operator=(communicator&& o) noexcept {
    if (this != &o) {
        communicator tmp(std::move(*this));
        comm_ = o.comm_;
        owned_ = o.owned_;
        o.comm_ = MPI_COMM_NULL;
        o.owned_ = false;
    }
    return *this;
}

communicator::~communicator() {
    int finalized = 0;
    MPI_Finalized(&finalized);  // a communicator kept in a static outlives MPI_Finalize
    if (owned_ && comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

int communicator::rank() const {
    int r = 0;
    check_mpi(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank");
    return r;
}

int communicator::size() const {
    int s = 0;
    check_mpi(MPI_Comm_size(comm_, &s), "MPI_Comm_size");
    return s;
}

process_grid::process_grid(MPI_Comm comm, int rows, int cols) : comm_(comm), rows_(rows), cols_(cols) {
    int size = 0;
    check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    if (rows < 1 || cols < 1 || std::int64_t(rows) * cols != size)
        throw collective_error("--grid " + std::to_string(rows) + "x" + std::to_string(cols) + " has " +
                               std::to_string(std::int64_t(rows) * cols) + " processes but " + std::to_string(size) +
                               " ranks were started (mpirun -np " + std::to_string(size) + ")");
    my_row_ = rank_ / cols;
    my_col_ = rank_ % cols;
    split();
}

process_grid::process_grid(MPI_Comm comm, int rows, int cols, int my_row, int my_col)
    : comm_(comm), rows_(rows), cols_(cols), my_row_(my_row), my_col_(my_col) {
    check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    if (rows < 1 || cols < 1 || my_row < 0 || my_row >= rows || my_col < 0 || my_col >= cols)
        throw invalid_argument("process_grid: position (" + std::to_string(my_row) + ", " + std::to_string(my_col) +
                               ") is outside a " + std::to_string(rows) + "x" + std::to_string(cols) + " grid");
    split();
}

void process_grid::split() {
    MPI_Comm r = MPI_COMM_NULL, c = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, my_row_, my_col_, &r), "MPI_Comm_split (process rows)");
    row_ = communicator(r);
    check_mpi(MPI_Comm_split(comm_, my_col_, my_row_, &c), "MPI_Comm_split (process columns)");
    col_ = communicator(c);
    check_mpi(MPI_Comm_set_errhandler(r, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int size = 0;
    check_mpi(MPI_Comm_size(comm_, &size), "MPI_Comm_size");
    std::vector<int> positions(std::size_t(size) * 2);
    const int mine[2] = {my_row_, my_col_};
    check_mpi(MPI_Allgather(mine, 2, MPI_INT, positions.data(), 2, MPI_INT, comm_), "MPI_Allgather (grid positions)");
    ranks_.assign(std::size_t(rows_) * std::size_t(cols_), -1);
    for (int r = 0; r < size; ++r) {
        const int pr = positions[2 * std::size_t(r)], pc = positions[2 * std::size_t(r) + 1];
        if (pr < 0 || pr >= rows_ || pc < 0 || pc >= cols_ || ranks_[std::size_t(pr) * std::size_t(cols_) + std::size_t(pc)] != -1)
            throw invalid_argument("process_grid: rank " + std::to_string(r) + " claims position (" + std::to_string(pr) +
                                   ", " + std::to_string(pc) + "), outside the grid or taken");
        ranks_[std::size_t(pr) * std::size_t(cols_) + std::size_t(pc)] = r;
    }
}

layered_grid::layered_grid(MPI_Comm comm, int rows, int cols, int layers) : comm_(comm), layers_(layers) {
    int size = 0, rank = 0;
    check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    if (layers < 1) throw collective_error("--layers must be at least 1, got " + std::to_string(layers));
    if (layers == 1) {  // the grid over comm itself, as pgemm on a process_grid
        layer_ = std::make_unique<process_grid>(comm, rows, cols);
        fiber_ = communicator(MPI_COMM_SELF, false);
        return;
    }
    if (rows < 1 || cols < 1 || std::int64_t(rows) * cols * layers != size)
        throw collective_error("--grid " + std::to_string(rows) + "x" + std::to_string(cols) + " with --layers " +
                               std::to_string(layers) + " has " + std::to_string(std::int64_t(rows) * cols * layers) +
                               " processes but " + std::to_string(size) + " ranks were started (mpirun -np " +
                               std::to_string(size) + ")");
    const int per_layer = rows * cols;
    my_layer_ = rank / per_layer;
    MPI_Comm l = MPI_COMM_NULL, f = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm, my_layer_, rank % per_layer, &l), "MPI_Comm_split (layers)");
    layer_comm_ = communicator(l);
    check_mpi(MPI_Comm_set_errhandler(l, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_split(comm, rank % per_layer, my_layer_, &f), "MPI_Comm_split (fibers)");
    fiber_ = communicator(f);
    check_mpi(MPI_Comm_set_errhandler(f, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    layer_ = std::make_unique<process_grid>(l, rows, cols);
}

std::pair<int, int> parse_grid(std::string_view text) {
    const auto x = text.find('x');
    auto number = [&](std::string_view s) {
        int v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size() || v < 1)
            throw collective_error("--grid expects PxQ with positive P and Q (e.g. 2x2, 1x3), got '" +
                                   std::string(text) + "'");
        return v;
    };
    if (x == std::string_view::npos)
        throw collective_error("--grid expects PxQ (e.g. 2x2, 1x3), got '" + std::string(text) + "'");
    return {number(text.substr(0, x)), number(text.substr(x + 1))};
}

std::pair<int, int> square_grid(int ranks) {
    int p = int(std::sqrt(double(ranks)));
    while (p > 1 && ranks % p != 0) --p;
    return {p, ranks / p};
}

index_t local_count(index_t n, index_t nb, int iproc, int src, int nprocs) {
    const int mydist = (nprocs + iproc - src) % nprocs;
    const index_t nblocks = n / nb;
    index_t count = (nblocks / nprocs) * nb;
    const index_t extra = nblocks % nprocs;
    if (mydist < extra) count += nb;
    else if (mydist == extra) count += n % nb;
    return count;
}

}  // namespace tilestream::distributed
