// The subcommands of the tilestream tool, each in its own file; main() dispatches to them.
#pragma once

#include <string>

namespace tilestream::cli {

/// Each returns the process exit code and throws tilestream errors for main() to report.
int cmd_jacobi(int argc, char** argv);
int cmd_scale(int argc, char** argv);
/// `scale jacobi` (strong and weak scaling of the Jacobi solver).
int cmd_scale_jacobi(int argc, char** argv);
int cmd_timeline(int argc, char** argv);
/// Whether `gemm`/`jacobi` runs over MPI ranks: started by mpirun with more than one rank, or
/// given --grid or --layers (cmd_distributed.cpp; a build without MPI says so).
bool wants_ranks(int argc, char** argv);
int cmd_distributed(const std::string& cmd, int argc, char** argv);
/// The Level 3 commands (symm, hemm, syrk, herk, syr2k, her2k, trmm, trsm; cmd_blas3.cpp).
bool is_blas3_command(const std::string& cmd);
int cmd_blas3(const std::string& cmd, int argc, char** argv);
/// The factorizations and their solves (potrf, posv, getrf, gesv; cmd_factor.cpp).
bool is_factor_command(const std::string& cmd);
int cmd_factor(const std::string& cmd, int argc, char** argv);
/// "tilestream 0.1.0 (git abcdef123456)": the version and the commit built (version.cpp).
std::string version_text();
/// "on" -> true, "off" -> false; otherwise invalid_argument naming --name (cmd_jacobi.cpp).
bool parse_on_off(const std::string& name, const std::string& v);
/// Takes back the OPENBLAS_NUM_THREADS=1 set before OpenBLAS loaded under an address-space limit
/// (openblas_workers.cpp), so processes the tool starts do not inherit it.
void restore_openblas_environment();

}  // namespace tilestream::cli
