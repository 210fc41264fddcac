// The parts of cli::args that use CLI11. CLI11 2.1 is header-only and compiles its whole parser into
// every file that includes it (8 s at -O2, 23 s under ASan+UBSan at -O1, for a file that only
// declares three options): here it is compiled once for the tool.
#include "cli_args.hpp"

#include <CLI/CLI.hpp>

namespace tilestream::cli {

args::args(const std::string& command, const std::string& description)
    : command_(command), app_(std::make_unique<CLI::App>(description, "tilestream " + command)) {
    app_->get_formatter()->column_width(36);
    app_->get_formatter()->label("REQUIRED", "");
    app_->allow_extras(false);
    app_->positionals_at_end(false);
}

args::~args() = default;

args& args::flag_option(const std::string& name, const std::string& help) {
    app_->add_flag("--" + name, help)->disable_flag_override()->each([this, name](const std::string&) { flags_.insert(name); });
    known_.push_back("--" + name);
    flag_names_.insert(name);
    return *this;
}

args& args::positionals(const std::string& name, const std::string& help) {
    app_->add_option(name, positional_, help)->expected(0, 1 << 20);
    return *this;
}

args& args::footer(const std::string& text) {
    app_->footer(text);
    return *this;
}

bool args::parse(int argc, char** argv, int first) {
    std::vector<std::string> in;
    for (int i = argc - 1; i >= first; --i) {  // CLI11 takes them reversed
        const std::string arg = argv[i];
        const auto eq = arg.find('=');
        if (arg.rfind("--", 0) == 0 && eq != std::string::npos && flag_names_.count(arg.substr(2, eq - 2)))
            throw invalid_argument("option " + arg.substr(0, eq) + " takes no value");
        in.push_back(arg);
    }
    try {
        app_->parse(in);
    } catch (const CLI::CallForHelp&) {
        std::cout << app_->help();
        return false;
    } catch (const CLI::ExtrasError&) {
        const auto rest = app_->remaining();
        const std::string what = rest.empty() ? std::string("?") : rest.front();
        if (what.rfind("--", 0) == 0) {
            const std::string name = what.substr(0, what.find('='));
            throw invalid_argument("unknown option " + name + did_you_mean(name, known_) + "; 'tilestream " + command_ +
                                   " --help' lists the options");
        }
        throw invalid_argument(command_ + ": unexpected argument '" + what + "'");
    } catch (const CLI::ParseError& e) {
        throw invalid_argument(e.what());
    }
    return true;
}

std::string args::help() const { return app_->help(); }

void args::add(const std::string& name, const std::string& help, const std::string& type,
               std::function<void(const std::string&)> store) {
    app_->add_option_function<std::string>("--" + name, std::move(store), help)
        ->type_name(type)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    known_.push_back("--" + name);
}

}  // namespace tilestream::cli
