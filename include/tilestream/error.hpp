// Typed exceptions: each names the operation and the operands that were wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace tilestream {

/// Base of every error tilestream throws.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A value or option that is not acceptable (bad usage).
class invalid_argument : public error {
public:
    using error::error;
};

/// Operands whose shapes do not fit together: "gemm: inner dimensions differ: ...".
class dimension_mismatch : public invalid_argument {
public:
    using invalid_argument::invalid_argument;
};

/// A size computation that does not fit in 64 bits, or a negative extent.
class size_overflow : public invalid_argument {
public:
    using invalid_argument::invalid_argument;
};

/// An allocation beyond a device's byte budget, or a problem that fits no budget.
class out_of_budget : public error {
public:
    using error::error;
};

/// A file that cannot be read or written, or whose contents are malformed.
class file_error : public error {
public:
    using error::error;
};

/// A device or backend call that failed (CUDA, cuBLAS, threads...).
class device_error : public error {
public:
    using error::error;
};

/// A run stopped because its caller asked it to (gemm_run_options::cancel, jacobi_options::cancel).
class cancelled : public error {
public:
    using error::error;
};

/// Use of a backend that was not compiled into this build.
class not_compiled : public error {
public:
    explicit not_compiled(const std::string& backend)
        : error("the " + backend + " backend was not compiled into this build of tilestream") {}
};

}  // namespace tilestream
