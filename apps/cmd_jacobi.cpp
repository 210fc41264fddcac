// The `tilestream jacobi` command: the 2-D Laplace equation by Jacobi iterations on one or many
// devices, with optional bitwise check against one device, .npy and PNG output, and JSON.
#include "cli_args.hpp"
#include "cli_files.hpp"
#include "commands.hpp"
#include "core/json_text.hpp"
#include "core/npy_write.hpp"

#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>
#include <tilestream/image.hpp>
#include <tilestream/jacobi.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/report.hpp>
#include <tilestream/trace.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace tilestream::cli {
namespace {

constexpr int exit_check_failed = 1;

void declare_jacobi_options(args& a) {
    declare_device_options(a);
    a.integer_option("nx", "grid columns, boundary included (default 1024)")
        .integer_option("ny", "grid rows, boundary included (default 1024)")
        .text("init", "starting field (ny x nx; its boundary stays fixed) instead of the default: "
                      "sin(2 pi i/(ny-1)) on columns 0 and nx-1, 0 elsewhere", "FILE.npy")
        .text("dtype", "field type: f32 (default, or the --init file's) or f64", "f32|f64")
        .integer_option("iters", "most iterations (default 1000)")
        .number_option("tol", "stop when the residual norm is below X (default 0: never)")
        .integer_option("check-every", "residual every K iterations, read one check later (default 10)")
        .text("devices", "e.g. cpu, cpu:4, cuda:0,cuda:1 (default auto: every GPU present, else the CPU; or TILESTREAM_DEVICES)", "SPEC")
        .text("decomp", "rows | cols | tiles | tiles:PxQ | auto (default auto: least halo bytes)", "D")
        .text("overlap", "strips and halos first, interior meanwhile (default on)", "on|off")
        .text("out", "write the final field", "FIELD.npy")
        .text("image", "write the final field colour-mapped, with a colour bar", "FIELD.png")
        .text("trace", "write a Chrome trace of every copy and sweep (Perfetto, chrome://tracing)", "run.json")
        .text("timeline", "draw the sweeps and halo copies per device and stream role (SVG)", "run.svg")
        .flag_option("check", "rerun the same iterations on the first device alone and compare bit for bit; exit 1 "
                              "unless identical. Costs one more solve on one device (about the run's time times the "
                              "number of devices); the output gives its seconds")
        .flag_option("explain", "print the plan (parts, devices, halo bytes) before running (stderr)")
        .flag_option("json", "print one JSON object")
        .flag_option("quiet", "no progress lines on long runs");
}

/// Prints a progress line to stderr at most every two seconds, so only long runs show any.
class progress_printer {
public:
    void operator()(const jacobi_progress& p) {
        if (p.seconds < next_) return;
        next_ = p.seconds + 2.0;
        std::fprintf(stderr, "jacobi: iteration %lld of %lld, residual %.4e (%.1f s)\n",
                     (long long)p.iteration, (long long)p.iterations, p.residual, p.seconds);
    }

private:
    double next_ = 2.0;
};

template <class T>
int run_jacobi_command(const args& a, const jacobi_problem& pb, jacobi_options opt,
                       const std::optional<npy_array>& init, run_files& files) {
    // The field (and its start, for --check) lives in host memory: say so before allocating.
    const std::size_t field_bytes = checked_bytes(pb.ny, pb.nx, pb.type, "jacobi: field");
    check_host_memory(field_bytes * (a.flag("check") ? 2 : 1),
                      "jacobi: the " + std::to_string(pb.ny) + "x" + std::to_string(pb.nx) + " field");
    const open_options oo = device_options(a);
    context_options co;
    co.memory_budget = oo.memory_budget;
    co.cpu_threads = oo.cpu_threads;
    context ctx(cli::devices_of(a), co);
    check_budgets(ctx.devices());
    const bool json = a.flag("json");
    if (!json && !a.flag("quiet")) opt.progress = progress_printer{};
    trace_recorder recorder;
    if (files.has("--trace") || files.has("--timeline")) opt.trace = &recorder;
    const jacobi_plan plan = ctx.plan_jacobi(pb, opt);
    std::FILE* out = files.report();
    // The plan before the run, on stderr as gemm's (the result, printed at the end, is stdout's).
    if (a.flag("explain") && !json) std::fputs(plan.explain().c_str(), stderr);
    // The outputs' sizes are known: reserved on disk now, so a full disk is an error before the work.
    if (files.has("--out") && !files.in_place("--out"))
        as_runtime_failure([&] { files.open("--out").reserve(detail::npy_file_bytes(pb.type, pb.ny, pb.nx, layout::row_major)); });

    host_matrix<T> field(pb.ny, pb.nx);
    if (init) {
        const auto copy = [&]<class S>() {
            const auto v = init->template view<S>();
            for (index_t i = 0; i < pb.ny; ++i)
                for (index_t j = 0; j < pb.nx; ++j) field(i, j) = static_cast<T>(v(i, j));
        };
        visit_real_dtype(init->type(), "jacobi --init", copy);
        as_runtime_failure([&] { init->check_unchanged(); });
    } else {
        fill_jacobi_start<T>(field.view());
    }
    std::optional<host_matrix<T>> start;
    if (a.flag("check")) {
        start.emplace(pb.ny, pb.nx);
        std::memcpy(start->data(), field.data(), sizeof(T) * std::size_t(field.size()));
    }

    const jacobi_report rep = ctx.jacobi<T>(pb, field.view(), opt);

    // --check: the same number of iterations on the first device alone, compared bit for bit.
    std::optional<bool> check_ok;
    std::string check_text;
    double check_seconds = 0;
    if (start) {
        jacobi_options one = opt;
        one.decomposition = {jacobi_split::rows, 0, 0};
        one.iters = rep.iterations;
        one.tol = 0;
        one.progress = nullptr;
        one.trace = nullptr;
        const auto t0 = std::chrono::steady_clock::now();
        const jacobi_plan single = plan_jacobi(pb, std::vector<device*>{ctx.devices().front()}, one);
        run_jacobi<T>(single, start->view());
        check_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        index_t differ = 0, first_i = -1, first_j = -1;
        for (index_t i = 0; i < pb.ny; ++i)
            for (index_t j = 0; j < pb.nx; ++j)
                if (std::memcmp(&field(i, j), &(*start)(i, j), sizeof(T)) != 0) {
                    if (differ++ == 0) first_i = i, first_j = j;
                }
        check_ok = differ == 0;
        char cost[64];
        std::snprintf(cost, sizeof cost, " (the rerun took %.3f s)", check_seconds);
        if (differ == 0) {
            check_text = "final field bitwise identical to a single-device run on " + ctx.devices().front()->id() + cost + ": OK";
        } else {
            char buf[160];
            std::snprintf(buf, sizeof buf, "first at row %lld, column %lld: %.17g here, %.17g alone",
                          (long long)first_i, (long long)first_j, double(field(first_i, first_j)),
                          double((*start)(first_i, first_j)));
            check_text = std::to_string(differ) + " points differ from a single-device run on " +
                         ctx.devices().front()->id() + " (" + buf + ")" + cost + ": FAILED";
        }
    }

    const auto out_path = a.get("out");
    const auto image_path = a.get("image");
    const bool ok = !check_ok || *check_ok;
    // Written to temporaries now (devices and FIFOs at the commit), renamed into place together
    // after the report; a failed check writes none of them.
    if (ok) {
        const host_matrix_view<const T> f(field.view());
        if (out_path) files.write("--out", [f](detail::output_file& o) { detail::write_npy_to<T>(o, f); });
        if (image_path) files.write("--image", encode_png(render_field<T>(f), *image_path));
        if (files.has("--trace")) files.write("--trace", recorder.chrome_json());
        if (files.has("--timeline"))
            files.write("--timeline", timeline_svg(recorder.spans(), "jacobi " + std::to_string(pb.ny) + "x" +
                                                                         std::to_string(pb.nx) + " " +
                                                                         to_string(plan.decomposition()) + " on " +
                                                                         ctx.device_names()));
    }
    const char* written[] = {"out", "image", "trace", "timeline"};

    const std::string& ids = ctx.device_names();
    const std::string decomp = to_string(plan.decomposition());
    if (json) {
        detail::json o = {{"nx", pb.nx}, {"ny", pb.ny}, {"dtype", std::string(to_string(pb.type))}, {"devices", ids},
                          {"decomp", decomp}, {"planner_choice", plan.planner_chose()}, {"overlap", opt.overlap},
                          {"iterations", rep.iterations}, {"seconds", rep.seconds},
                          {"total_seconds", rep.total_seconds}, {"glups", rep.glups}, {"gbps", rep.gbps},
                          {"residual", rep.residual}, {"converged", rep.converged},
                          {"converged_at", rep.converged_at}, {"check_every", opt.check_every}, {"tol", opt.tol},
                          {"halo_bytes_per_iteration", plan.halo_bytes_per_iteration()},
                          {"halo_bytes", rep.halo_bytes}};
        if (check_ok) o["check_passed"] = *check_ok, o["check_seconds"] = check_seconds;
        if (ok && out_path) o["out"] = *out_path;
        if (ok && image_path) o["image"] = *image_path;
        detail::json list = detail::json::array();
        if (ok)
            for (const char* w : written)
                if (a.has(w)) list.push_back(*a.get(w));
        o["files_written"] = list;
        std::fprintf(out, "%s\n", detail::json_line(o).c_str());
    } else {
        std::fprintf(out, "jacobi %lldx%lld %s on %s: %s%s, overlap %s\n", (long long)pb.nx, (long long)pb.ny,
                     std::string(to_string(pb.type)).c_str(), ids.c_str(), decomp.c_str(),
                     plan.planner_chose() ? " (planner's choice)" : "", opt.overlap ? "on" : "off");
        std::fprintf(out, "%lld iterations in %.4f s (%.4f s with copies): %.3f GLUP/s, %.2f GB/s; residual %.6e\n",
                     (long long)rep.iterations, rep.seconds, rep.total_seconds, rep.glups, rep.gbps, rep.residual);
        if (rep.converged)
            std::fprintf(out, "converged: the residual of iteration %lld was below %g\n", (long long)rep.converged_at,
                         opt.tol);
        if (check_ok) std::fprintf(out, "check: %s\n", check_text.c_str());
        for (const char* w : written)
            if (a.has(w)) std::fprintf(out, ok ? "wrote %s\n" : "not written (the check failed): %s\n", a.get(w)->c_str());
    }
    files.commit();
    return ok ? 0 : exit_check_failed;
}

}  // namespace

bool parse_on_off(const std::string& name, const std::string& v) {
    if (v == "on") return true;
    if (v == "off") return false;
    throw invalid_argument("--" + name + " expects on or off, got '" + v + "'");
}

int cmd_jacobi(int argc, char** argv) {
    args a("jacobi", "2-D Laplace equation by Jacobi iterations across devices.");
    declare_jacobi_options(a);
    if (!a.parse(argc, argv, 2)) return 0;
    // Every file named, before any work (--out may update --init in place).
    run_files files;
    if (auto p = a.get("init")) files.input("--init", *p);
    if (auto p = a.get("out")) files.output("--out", *p, file_format::npy, "--init");
    if (auto p = a.get("image")) files.output("--image", *p, file_format::png);
    if (auto p = a.get("trace")) files.output("--trace", *p, file_format::json);
    if (auto p = a.get("timeline")) files.output("--timeline", *p, file_format::svg);
    const index_t big = std::numeric_limits<index_t>::max();
    jacobi_problem pb;
    std::optional<npy_array> init;
    if (auto path = a.get("init")) {
        init = read_npy(*path);
        if (init->ndim() == 1)
            throw invalid_argument("jacobi: --init " + *path + " is a 1-D array (shape (" + std::to_string(init->rows()) +
                                   ",)); the starting field is 2-D, ny x nx");
        pb.ny = init->rows();
        pb.nx = init->cols();
        for (const char* dim : {"nx", "ny"}) {
            const index_t want = dim[1] == 'x' ? pb.nx : pb.ny;
            if (a.has(dim) && a.integer(dim, 0, 0, big) != want)
                throw invalid_argument("jacobi: --" + std::string(dim) + " " + *a.get(dim) + " but " + *path +
                                       " is " + std::to_string(pb.ny) + " rows x " + std::to_string(pb.nx) +
                                       " columns (ny x nx)");
        }
        pb.type = a.has("dtype") ? parse_dtype(*a.get("dtype")) : init->type();
    } else {
        pb.nx = a.integer("nx", 1024, 0, big);
        pb.ny = a.integer("ny", 1024, 0, big);
        pb.type = parse_dtype(a.get_or("dtype", "f32"));
    }
    jacobi_options opt;
    opt.iters = a.integer("iters", 1000, 0, big);
    opt.check_every = a.integer("check-every", 10, 1, big);
    opt.tol = a.real("tol", 0.0);
    if (!(opt.tol >= 0) || !std::isfinite(opt.tol))
        throw invalid_argument("--tol must be a finite number >= 0, got '" + *a.get("tol") + "'");
    opt.overlap = parse_on_off("overlap", a.get_or("overlap", "on"));
    opt.decomposition = parse_jacobi_decomposition(a.get_or("decomp", "auto"));
    return visit_real_dtype(pb.type, "jacobi", [&]<class T>() { return run_jacobi_command<T>(a, pb, opt, init, files); });
}

}  // namespace tilestream::cli
