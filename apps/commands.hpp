// The subcommands of the tilestream tool, each in its own file; main() dispatches to them.
#pragma once

namespace tilestream::cli {

/// Each returns the process exit code and throws tilestream errors for main() to report.
int cmd_jacobi(int argc, char** argv);

}  // namespace tilestream::cli
