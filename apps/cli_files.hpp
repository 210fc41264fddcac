// The files one command reads and writes: named and checked before any work (outputs resolved as
// cp resolves them, their extension against their format, no output naming an input or another
// output), written to temporaries (devices and FIFOs at the end, in place), then the report on
// standard output, then every output renamed into place at once: a run ends with all its outputs
// new, or (a failure, a signal) none of them.
#pragma once

#include "core/output_files.hpp"

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tilestream::cli {

/// What an output option writes; an output named with the extension of another of these is refused.
enum class file_format { npy, json, svg, png };

/// Ends the command with `code` and no message (standard output was a closed pipe: exit 141 after
/// the temporaries are gone, as a process killed by SIGPIPE).
class quiet_exit {
public:
    explicit quiet_exit(int code) : code_(code) {}
    int code() const { return code_; }

private:
    int code_;
};

class run_files {
public:
    run_files() = default;
    run_files(const run_files&) = delete;
    run_files& operator=(const run_files&) = delete;
    ~run_files();

    /// An input named by `label` ("--a"), to compare outputs with.
    void input(const std::string& label, const std::string& path);
    /// An output named by `label` ("--out"): resolved (file_error when it cannot be written),
    /// refused (invalid_argument naming both options) when its extension names another format or
    /// it is an input (except `may_update`, the input it may replace: gemm --c C.npy --out C.npy) or
    /// another output (two character devices such as /dev/null excepted).
    void output(const std::string& label, const std::string& path, file_format format,
                const std::string& may_update = "");
    bool has(const std::string& label) const { return outputs_.count(label) > 0; }
    /// Whether the output is written where it is (a device, a FIFO, /dev/stdout).
    bool in_place(const std::string& label) const;

    /// Creates the output's temporary now (for reserving its size before the work); not for
    /// in_place outputs.
    detail::output_file& open(const std::string& label);
    /// Writes the output through `writer`: now into its temporary (opened if not yet), or, for an
    /// in_place output, at commit() before the report, so that nothing reaches a device or pipe
    /// while an output can still fail.
    void write(const std::string& label, std::function<void(detail::output_file&)> writer);
    void write(const std::string& label, const std::string& bytes);
    /// A finished file from elsewhere (npy_output::finish()), committed with the others.
    void adopt(detail::output_file& file);

    /// The report (the result lines or JSON) is written here; it is held in memory and printed by
    /// commit() once the outputs written in place succeeded, so a failed run prints no result. It
    /// goes to standard output, or to standard error when an output is standard output (a pipe or
    /// file that the report would corrupt).
    std::FILE* report();
    /// Writes the in_place outputs, prints the report (a full device fails the run: exit 3; a
    /// closed pipe ends it quietly: quiet_exit(141)), then renames every output into place together.
    void commit();

private:
    struct output_entry {
        detail::output_target target;
        std::unique_ptr<detail::output_file> file;
        std::function<void(detail::output_file&)> deferred;
    };
    output_entry& entry(const std::string& label);
    struct input_entry {
        std::string path;
        detail::file_identity id;
    };
    std::map<std::string, input_entry> inputs_;
    std::map<std::string, output_entry> outputs_;
    std::vector<std::string> order_;
    std::vector<detail::output_file*> adopted_;
    bool report_to_stderr_ = false;
    std::FILE* report_ = nullptr;  // an open_memstream over report_text_
    char* report_text_ = nullptr;
    std::size_t report_size_ = 0;
};

/// Flushes standard output: throws runtime_failure when it could not be written (a full device),
/// quiet_exit(141) when it is a closed pipe.
void flush_standard_output();

}  // namespace tilestream::cli
