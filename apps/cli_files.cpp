// The files of one command run: checked before the work, committed together after it.
#include "cli_files.hpp"

#include "cli_args.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <new>

#include <stdio.h>

#include <sys/stat.h>

namespace tilestream::cli {
namespace {

const char* format_name(file_format f) {
    switch (f) {
        case file_format::npy: return "npy";
        case file_format::json: return "json";
        case file_format::svg: return "svg";
        case file_format::png: return "png";
    }
    return "?";
}

const char* format_text(file_format f) {
    switch (f) {
        case file_format::npy: return "a .npy array";
        case file_format::json: return "a Chrome trace (JSON)";
        case file_format::svg: return "an SVG picture";
        case file_format::png: return "a PNG image";
    }
    return "?";
}

/// The extension of the file name (lower case, without the dot), or "".
std::string extension(const std::string& path) {
    const std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
    const auto dot = base.find_last_of('.');
    if (dot == std::string::npos || dot == 0) return {};
    std::string e = base.substr(dot + 1);
    std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return e;
}

}  // namespace

run_files::~run_files() {
    if (report_) std::fclose(report_);
    std::free(report_text_);
}

void run_files::input(const std::string& label, const std::string& path) {
    inputs_[label] = {path, detail::identify(path)};
    for (const auto& [other, out] : outputs_)
        if (detail::identify(out.target).same_file(inputs_[label].id))
            throw invalid_argument(other + " " + out.target.given + " and " + label + " " + path +
                                   " name the same file: an output may not overwrite an input");
}

void run_files::output(const std::string& label, const std::string& path, file_format format,
                       const std::string& may_update) {
    const std::string ext = extension(path);
    for (file_format f : {file_format::npy, file_format::json, file_format::svg, file_format::png})
        if (f != format && ext == format_name(f))
            throw invalid_argument(label + " " + path + ": writes " + format_text(format) + ", but the name ends in ." +
                                   ext + ", which is " + format_text(f) + "; name it ." + format_name(format));
    output_entry e;
    e.target = detail::resolve_output(path);
    const detail::file_identity id = detail::identify(e.target);
    for (const auto& [in_label, in] : inputs_)
        if (in_label != may_update && id.same_file(in.id))
            throw invalid_argument(label + " " + path + " and " + in_label + " " + in.path +
                                   " name the same file: an output may not "
                                   "overwrite an input" +
                                   (may_update.empty() ? std::string() : " (only " + may_update + " may be updated in place)"));
    for (const auto& [other, out] : outputs_)
        if (id.same_file(detail::identify(out.target)) && !(id.exists && S_ISCHR(id.mode)))
            throw invalid_argument(label + " " + path + " and " + other + " " + out.target.given +
                                   " name the same file: each output needs its own");
    if (e.target.kind == detail::output_kind::in_place) {
        const detail::file_identity out = detail::identify_descriptor(1);
        if (out.exists && out.same_file(id) && !S_ISCHR(id.mode)) report_to_stderr_ = true;
    }
    outputs_[label] = std::move(e);
    order_.push_back(label);
}

run_files::output_entry& run_files::entry(const std::string& label) {
    const auto it = outputs_.find(label);
    if (it == outputs_.end()) throw error("internal: output " + label + " was not declared");
    return it->second;
}

bool run_files::in_place(const std::string& label) const {
    const auto it = outputs_.find(label);
    return it != outputs_.end() && it->second.target.kind == detail::output_kind::in_place;
}

detail::output_file& run_files::open(const std::string& label) {
    output_entry& e = entry(label);
    if (e.target.kind == detail::output_kind::in_place) throw error("internal: " + label + " is written in place");
    if (!e.file) as_runtime_failure([&] { e.file = std::make_unique<detail::output_file>(e.target); });
    return *e.file;
}

void run_files::write(const std::string& label, std::function<void(detail::output_file&)> writer) {
    output_entry& e = entry(label);
    if (e.target.kind == detail::output_kind::in_place) {
        e.deferred = std::move(writer);
        return;
    }
    detail::output_file& f = open(label);
    as_runtime_failure([&] { writer(f); });
}

void run_files::write(const std::string& label, const std::string& bytes) {
    write(label, [bytes](detail::output_file& f) { f.write(bytes.data(), bytes.size()); });
}

void run_files::adopt(detail::output_file& file) { adopted_.push_back(&file); }

std::FILE* run_files::report() {
    if (!report_) report_ = ::open_memstream(&report_text_, &report_size_);
    if (!report_) throw std::bad_alloc();
    return report_;
}

void flush_standard_output() {
    errno = 0;
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return;
    const int err = errno;
    if (err == EPIPE) throw quiet_exit(128 + SIGPIPE);
    throw runtime_failure(std::string("cannot write standard output: ") +
                          (err ? std::strerror(err) : "an earlier write failed"));
}

void run_files::commit() {
    std::vector<detail::output_file*> all;
    for (const std::string& label : order_) {
        output_entry& e = outputs_.at(label);
        if (e.deferred) {
            as_runtime_failure([&] {
                e.file = std::make_unique<detail::output_file>(e.target);
                e.deferred(*e.file);
                e.file->close();
            });
        }
        if (e.file) all.push_back(e.file.get());
    }
    for (detail::output_file* f : adopted_) all.push_back(f);
    if (report_) {
        if (std::fflush(report_) != 0) throw std::bad_alloc();
        std::FILE* to = report_to_stderr_ ? stderr : stdout;
        std::fwrite(report_text_, 1, report_size_, to);
    }
    std::fflush(stderr);
    flush_standard_output();
    as_runtime_failure([&] { detail::commit_together(all); });
}

}  // namespace tilestream::cli
