// Operands on disk (issue 14 part 4): the CLI multiplies .npy files larger than the memory it is
// given. A (2.1 GiB of f32) is mapped and read tile by tile through a 64 MiB device budget, C is
// written through a mapped temporary renamed into place, and the process's peak resident memory
// (VmHWM, reported as peak_rss_bytes) stays far below the operands' size.
#include "test_support.hpp"

#include <tilestream/npy.hpp>
#include <tilestream/verify.hpp>

#include "core/file_mappings.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>

namespace tilestream {
namespace {

using testing::run_cli;
using testing::temp_dir;

/// A value in [-1, 1) for element (i, j) of operand `which`: the test recomputes any element
/// without reading the files back.
float element(std::uint64_t which, std::uint64_t i, std::uint64_t j) {
    std::uint64_t z = (which << 58) ^ (i << 24) ^ j;
    z += 0x9e3779b97f4a7c15ULL;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return float(double(z >> 40) * 0x1p-23 - 1.0);
}

/// Writes a rows x cols f32 operand through npy_output in blocks of rows, dropping written pages
/// as it goes, so that the test itself does not hold the file in memory either.
void write_operand(const std::string& path, std::uint64_t which, index_t rows, index_t cols) {
    npy_output out(path, dtype::f32, rows, cols, layout::row_major);
    const auto v = out.view<float>();
    for (index_t i = 0; i < rows; ++i) {
        for (index_t j = 0; j < cols; ++j) v(i, j) = element(which, std::uint64_t(i), std::uint64_t(j));
        if (i % 65536 == 65535) out.release_resident();
    }
    out.commit();
}

std::size_t json_number(const std::string& text, const std::string& key) {
    const auto at = text.find("\"" + key + "\": ");
    if (at == std::string::npos) return 0;
    return std::size_t(std::stod(text.substr(at + key.size() + 4)));
}

// Mapped files are known as such, so pinning for devices (CLI and context alike) skips them.
TEST(npy_mapping, MappedFilesAreKnownAndWrittenThroughTheMapping) {
    temp_dir dir;
    host_matrix<double> m(37, 5, layout::col_major);
    fill_random(m.view(), 3);
    EXPECT_FALSE(detail::in_file_mapping(m.data(), sizeof(double) * 37 * 5));
    {
        npy_output out(dir.file("o.npy"), dtype::f64, 37, 5, layout::col_major);
        const auto v = out.view<double>();
        EXPECT_TRUE(detail::in_file_mapping(v.data(), sizeof(double)));
        EXPECT_THROW((void)out.view<float>(), tilestream::invalid_argument);
        for (index_t i = 0; i < 37; ++i)
            for (index_t j = 0; j < 5; ++j) v(i, j) = m(i, j);
        out.release_resident();  // written pages survive: the page cache keeps them
        EXPECT_EQ(dir.entries(), 1u) << "the temporary";
        out.commit();
        EXPECT_FALSE(detail::in_file_mapping(v.data(), sizeof(double)));
    }
    {
        npy_output dropped(dir.file("dropped.npy"), dtype::f32, 4, 4, layout::row_major);
    }  // not committed: removed
    EXPECT_EQ(dir.entries(), 1u);
    const auto in = read_npy(dir.file("o.npy"));
    ASSERT_EQ(in.layout(), layout::col_major);
    const auto v = in.view<double>();
    EXPECT_TRUE(detail::in_file_mapping(v.data() + 3, sizeof(double)));
    in.release_resident();
    for (index_t i = 0; i < 37; ++i)
        for (index_t j = 0; j < 5; ++j) ASSERT_EQ(v(i, j), m(i, j)) << i << "," << j;
}

TEST(cli_disk, OperandsLargerThanTheBudgetStreamThroughMappedFiles) {
#if defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "2 GiB of operands: not in the TSan subset";
#endif
    // m large, k and n small: 2.1 GiB of A, a 77 MB C, little arithmetic (10 GFLOP).
    const index_t m = 2'150'003, k = 263, n = 9;
    const auto t0 = std::chrono::steady_clock::now();
    temp_dir dir;
    write_operand(dir.file("a.npy"), 0, m, k);
    write_operand(dir.file("b.npy"), 1, k, n);
    write_operand(dir.file("c0.npy"), 2, m, n);
    const std::size_t a_bytes = std::filesystem::file_size(dir.file("a.npy"));
    ASSERT_GT(a_bytes, std::size_t{2100} << 20);

    auto r = run_cli("gemm --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + " --c " + dir.file("c0.npy") +
                     " --alpha 2 --beta 0.5 --memory-budget 64MiB --quiet --json --out " + dir.file("c.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::size_t peak = json_number(r.out, "peak_rss_bytes");
    ASSERT_GT(peak, 0u) << r.out;
    // The same devices and budget on a problem of a few KiB: libraries, device probes, rate probe.
    auto small = run_cli("gemm --m 64 --n 9 --k 263 --memory-budget 64MiB --quiet --json");
    ASSERT_EQ(small.exit_code, 0) << small.out;
    const std::size_t baseline = json_number(small.out, "peak_rss_bytes");
    // Beyond that: the budget (64 MiB), staging and a few pages of the mappings between trims;
    // without the trimming the peak exceeds A's 2.1 GiB.
#if defined(__SANITIZE_ADDRESS__)
    const std::size_t slack = std::size_t{512} << 20;  // ASan's quarantine keeps freed blocks resident
#else
    const std::size_t slack = std::size_t{256} << 20;
#endif
    EXPECT_LT(peak, baseline + slack)
        << "peak resident memory " << peak << " bytes (a tiny run: " << baseline << ") for " << a_bytes
        << " bytes of A\n" << r.out;
    EXPECT_LT(peak, a_bytes / 4);
    EXPECT_EQ(dir.entries(), 4u) << "c.npy and the inputs, no temporary left";

    // C against a float64 reference on 2000 rows spread over C, and no NaN anywhere.
    const auto c_file = read_npy(dir.file("c.npy"));
    ASSERT_EQ(c_file.rows(), m);
    ASSERT_EQ(c_file.cols(), n);
    const auto c = c_file.view<float>();
    index_t nonfinite = 0;
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) nonfinite += !std::isfinite(c(i, j));
    EXPECT_EQ(nonfinite, 0);
    double worst = 0;
    for (index_t s = 0; s < 2000; ++s) {
        const index_t i = s == 1999 ? m - 1 : s * (m / 1999) + s % 7;
        for (index_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (index_t p = 0; p < k; ++p) {
                const double t = double(element(0, std::uint64_t(i), std::uint64_t(p))) *
                                 double(element(1, std::uint64_t(p), std::uint64_t(j)));
                ref += t;
                mag += std::fabs(t);
            }
            const double c0 = element(2, std::uint64_t(i), std::uint64_t(j));
            ref = 2 * ref + 0.5 * c0;
            mag = 2 * mag + 0.5 * std::fabs(c0);
            worst = std::max(worst, std::fabs(double(c(i, j)) - ref) / mag);
        }
    }
    // f32 accumulation over k = 263: a few ulps of the magnitude sum.
    EXPECT_LT(worst, 64 * 0x1p-24) << "worst error relative to the magnitude sum";
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ operands on disk ] %zu bytes of A, peak resident %zu bytes (a tiny run: %zu), %.1f s in all\n",
                a_bytes, peak, baseline, secs);
}

}  // namespace
}  // namespace tilestream
