// Shared test helpers: opening a device by spec (skipping GPU specs without a GPU), running the
// CLI, temporary directories.
#pragma once

#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>

namespace tilestream::testing {

/// The test program is built with ASan or TSan (and so are the library and the tool it runs): a
/// test sizes its work or skips what the sanitizers' runtimes cannot do.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif

/// True when the spec names a CUDA device and none is present, or an OpenCL device in a build
/// without the OpenCL backend; sets `reason`. Where
/// OpenCL is compiled, a missing OpenCL device fails the test (CI runs them on PoCL).
inline bool gpu_missing(const std::string& spec, std::string& reason) {
    if (spec.find("opencl") != std::string::npos) {
#if !defined(TILESTREAM_HAVE_OPENCL)
        reason = "the OpenCL backend is not compiled into this build";
        return true;
#else
        return false;
#endif
    }
    if (spec.rfind("cuda", 0) != 0) return false;
    const auto& inv = inventory();
    if (!inv.gpus.empty()) return false;
    reason = "no CUDA GPU: " + inv.cuda_status;
    return true;
}

#define TILESTREAM_SKIP_WITHOUT_GPU(spec)                          \
    do {                                                           \
        std::string why_;                                          \
        if (::tilestream::testing::gpu_missing((spec), why_))      \
            GTEST_SKIP() << why_;                                  \
    } while (0)

/// Result of running the command-line tool.
struct cli_result {
    int exit_code = -1;
    std::string out;  // stdout and stderr together
};

/// The CLI's tests run on the CPU unless they name devices (or TILESTREAM_DEVICES does): the
/// default, every GPU present, would turn a GPU machine's `make test` into GPU runs that these
/// tests do not expect (the reference kernel, zero-copy plans).
inline std::string cli_env() { return "export TILESTREAM_DEVICES=\"${TILESTREAM_DEVICES:-cpu}\"; "; }

inline cli_result run_cli(const std::string& args) {
    const std::string cmd = cli_env() + std::string(TILESTREAM_CLI_PATH) + " " + args + " 2>&1";
    cli_result r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf{};
    std::size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

/// Output (stdout and stderr) of a shell command line.
inline std::string run_cli_raw(const std::string& command) {
    std::string out;
    FILE* p = popen((cli_env() + command + " 2>&1").c_str(), "r");
    if (!p) return out;
    std::array<char, 4096> buf{};
    std::size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    pclose(p);
    return out;
}

/// The whole contents of a file ("" when it cannot be read), and a file written with `text`.
inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}
inline void write_file(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

/// A fresh directory removed at the end of the test.
class temp_dir {
public:
    temp_dir() {
        std::random_device rd;
        path_ = std::filesystem::temp_directory_path() /
                ("tilestream-test-" + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(path_);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    const std::filesystem::path& path() const { return path_; }
    /// Number of entries in the directory (to prove no partial or temporary file remains).
    std::size_t entries() const {
        std::size_t n = 0;
        for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path_)) ++n;
        return n;
    }

private:
    std::filesystem::path path_;
};

}  // namespace tilestream::testing
