// Tests of .npy reading and writing: round trips, hand-made files of every version, and errors.
#include <algorithm>
#include <tilestream/error.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/npy.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <csignal>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/output_files.hpp"

namespace fs = std::filesystem;
using namespace tilestream;

namespace {

/// Each test gets its own empty directory, removed afterwards.
class npy_test : public ::testing::Test {
protected:
    void SetUp() override {
        static std::atomic<unsigned> counter{0};
        dir_ = fs::temp_directory_path() /
               ("tilestream_npy_" + std::to_string(::getpid()) + "_" +
                std::to_string(counter.fetch_add(1)) + "_" +
                std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
        fs::create_directories(dir_);
    }
    void TearDown() override {
        std::error_code ec;
        // Restore permissions first, in case a test made the directory read-only.
        fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(dir_, ec);
    }

    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    /// Every file name in the test directory.
    std::vector<std::string> listing() const {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(dir_))
            names.push_back(e.path().filename().string());
        return names;
    }

    fs::path dir_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f.good()) << "cannot write test file " << path;
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// A .npy file of format version `major` with the given header dictionary text; the header is
/// padded with spaces so that the data starts at a multiple of `align` (1 = no padding).
std::string npy_bytes(int major, const std::string& dict, const std::string& data,
                      std::size_t align = 64) {
    const std::size_t length_bytes = major == 1 ? 2 : 4;
    std::string header = dict;
    const std::size_t unpadded = 8 + length_bytes + header.size() + 1;
    header.append((align - unpadded % align) % align, ' ');
    header += '\n';
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    for (std::size_t i = 0; i < length_bytes; ++i)
        out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return out + header + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
    return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

/// Random values in +-[0.5, 1.5): non-zero, so a result of zeros cannot pass.
template <class T>
void fill_random(host_matrix_view<T> m, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> mag(0.5, 1.5);
    std::bernoulli_distribution neg(0.5);
    for (index_t i = 0; i < m.rows(); ++i)
        for (index_t j = 0; j < m.cols(); ++j)
            m(i, j) = static_cast<T>(neg(gen) ? -mag(gen) : mag(gen));
}

#define EXPECT_FILE_ERROR(statement, path, phrase)                                  \
    do {                                                                            \
        try {                                                                       \
            statement;                                                              \
            ADD_FAILURE() << "expected file_error containing '" << (phrase) << "'"; \
        } catch (const tilestream::file_error& e) {                                 \
            const std::string what = e.what();                                      \
            EXPECT_EQ(what.rfind(path, 0), 0u)                                      \
                << "message does not start with the path: " << what;                \
            EXPECT_NE(what.find(phrase), std::string::npos)                         \
                << "message lacks '" << (phrase) << "': " << what;                  \
        }                                                                           \
    } while (0)

}  // namespace

// ---- round trips ----

template <class T>
class npy_round_trip : public npy_test {};
using value_types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(npy_round_trip, value_types);

TYPED_TEST(npy_round_trip, WriteThenReadMatchesBitForBit) {
    using T = TypeParam;
    const std::pair<index_t, index_t> shapes[] = {{1, 1}, {7, 13}, {131, 3}, {3, 131}, {64, 64}};
    unsigned seed = 1;
    for (const auto l : {layout::row_major, layout::col_major}) {
        for (const auto& [r, c] : shapes) {
            SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(c) + " " +
                         std::string(to_string(l)));
            host_matrix<T> m(r, c, l);
            fill_random(m.view(), seed++);
            const std::string p = this->path("m.npy");
            write_npy<T>(p, m.view());

            const npy_array a = read_npy(p);
            EXPECT_EQ(a.type(), dtype_of<T>());
            EXPECT_EQ(a.rows(), r);
            EXPECT_EQ(a.cols(), c);
            EXPECT_EQ(a.layout(), l);
            EXPECT_EQ(a.path(), p);
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % alignof(T), 0u);
            // Packed on disk in the source's own layout: the bytes equal the source buffer.
            const auto v = a.template view<T>();
            EXPECT_EQ(v.ld(), l == layout::row_major ? c : r);
            double norm = 0;
            for (index_t i = 0; i < r; ++i)
                for (index_t j = 0; j < c; ++j) {
                    ASSERT_EQ(v(i, j), m(i, j)) << "at (" << i << ", " << j << ")";
                    norm += std::abs(static_cast<double>(m(i, j)));
                }
            EXPECT_GT(norm, 0.0);
            EXPECT_EQ(std::memcmp(a.data(), m.data(), static_cast<std::size_t>(r * c) * sizeof(T)),
                      0);
        }
    }
    EXPECT_EQ(this->listing(), std::vector<std::string>{"m.npy"})
        << "a temporary file was left behind";
}

TYPED_TEST(npy_round_trip, SectionWithLargerLeadingDimensionIsWrittenPacked) {
    using T = TypeParam;
    for (const auto l : {layout::row_major, layout::col_major}) {
        SCOPED_TRACE(std::string(to_string(l)));
        host_matrix<T> big(20, 30, l);
        fill_random(big.view(), 42);
        const auto sec = host_matrix_view<const T>(big.view()).section(3, 5, 7, 13);
        ASSERT_GT(sec.ld(), l == layout::row_major ? sec.cols() : sec.rows());
        const std::string p = this->path("sec.npy");
        write_npy<T>(p, sec);

        // Packed: nothing beyond 7*13 elements after a 64-byte aligned header.
        const auto size = fs::file_size(p);
        EXPECT_EQ(size % 64, (7 * 13 * sizeof(T)) % 64);
        EXPECT_EQ(size - 7 * 13 * sizeof(T), 128u);

        const npy_array a = read_npy(p);
        EXPECT_EQ(a.rows(), 7);
        EXPECT_EQ(a.cols(), 13);
        EXPECT_EQ(a.layout(), l);
        const auto v = a.template view<T>();
        for (index_t i = 0; i < 7; ++i)
            for (index_t j = 0; j < 13; ++j)
                ASSERT_EQ(v(i, j), sec(i, j)) << "at (" << i << ", " << j << ")";
    }
}

TYPED_TEST(npy_round_trip, LargeStridedSectionSpansSeveralWriteChunks) {
    // More than 1 MiB of strided lines, so the writer's gather buffer is flushed mid-way.
    using T = TypeParam;
    host_matrix<T> big(701, 513, layout::col_major);
    fill_random(big.view(), 77);
    const auto sec = host_matrix_view<const T>(big.view()).section(1, 2, 700, 511);
    const std::string p = this->path("large.npy");
    write_npy<T>(p, sec);
    const npy_array a = read_npy(p);
    ASSERT_EQ(a.rows(), 700);
    ASSERT_EQ(a.cols(), 511);
    const auto v = a.template view<T>();
    for (index_t j = 0; j < 511; ++j)
        for (index_t i = 0; i < 700; ++i)
            ASSERT_EQ(v(i, j), sec(i, j)) << "at (" << i << ", " << j << ")";
}

TYPED_TEST(npy_round_trip, EmptyMatricesRoundTrip) {
    using T = TypeParam;
    for (const auto l : {layout::row_major, layout::col_major}) {
        for (const auto& [r, c] : {std::pair<index_t, index_t>{0, 5}, {5, 0}, {0, 0}}) {
            host_matrix<T> m(r, c, l);
            const std::string p = this->path("empty.npy");
            write_npy<T>(p, m.view());
            EXPECT_EQ(fs::file_size(p), 128u);
            const npy_array a = read_npy(p);
            EXPECT_EQ(a.rows(), r);
            EXPECT_EQ(a.cols(), c);
            EXPECT_EQ(a.layout(), l);
            EXPECT_TRUE(a.template view<T>().empty());
        }
    }
}

TEST_F(npy_test, HeaderIsWhatNumpyWrites) {
    host_matrix<double> m(3, 4);
    fill_random(m.view(), 3);
    const std::string p = path("h.npy");
    write_npy<double>(p, m.view());
    const std::string bytes = read_bytes(p);
    ASSERT_GE(bytes.size(), 10u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const std::size_t header_len =
        static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    EXPECT_EQ((10 + header_len) % 64, 0u);
    EXPECT_EQ(bytes.size(), 10 + header_len + 3 * 4 * sizeof(double));
    const std::string header = bytes.substr(10, header_len);
    const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }";
    EXPECT_EQ(header.substr(0, dict.size()), dict);
    EXPECT_EQ(header.back(), '\n');
    EXPECT_EQ(header.find_first_not_of(' ', dict.size()), header.size() - 1);

    host_matrix<float> f(2, 5, layout::col_major);
    fill_random(f.view(), 4);
    write_npy<float>(p, f.view());
    EXPECT_NE(read_bytes(p).find("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 5), }"),
              std::string::npos);
}

TEST_F(npy_test, OverwritesAnExistingFile) {
    const std::string p = path("o.npy");
    host_matrix<double> a(4, 4);
    fill_random(a.view(), 5);
    write_npy<double>(p, a.view());
    host_matrix<float> b(2, 3);
    fill_random(b.view(), 6);
    write_npy<float>(p, b.view());
    const npy_array r = read_npy(p);
    EXPECT_EQ(r.type(), dtype::f32);
    EXPECT_EQ(r.rows(), 2);
    EXPECT_EQ(r.view<float>()(1, 2), b(1, 2));
    EXPECT_EQ(listing(), std::vector<std::string>{"o.npy"});
}

TEST_F(npy_test, MappingOutlivesTheFileAndMoves) {
    const std::string p = path("m.npy");
    host_matrix<double> m(5, 6);
    fill_random(m.view(), 7);
    write_npy<double>(p, m.view());
    npy_array a = read_npy(p);
    fs::remove(p);
    npy_array b = std::move(a);
    EXPECT_EQ(b.view<double>()(4, 5), m(4, 5));
}

// ---- hand-made files ----

TEST_F(npy_test, ReadsFormatVersions1To3) {
    const std::vector<double> d = {1.5, -2.25, 3.0, 4.0, -5.5, 6.125};
    for (int major = 1; major <= 3; ++major) {
        SCOPED_TRACE("version " + std::to_string(major));
        const std::string p = path("v" + std::to_string(major) + ".npy");
        write_bytes(p,
                    npy_bytes(major, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
                              raw(d)));
        const npy_array a = read_npy(p);
        ASSERT_EQ(a.type(), dtype::f64);
        ASSERT_EQ(a.rows(), 2);
        ASSERT_EQ(a.cols(), 3);
        EXPECT_EQ(a.layout(), layout::row_major);
        const auto v = a.view<double>();
        EXPECT_EQ(v(0, 0), 1.5);
        EXPECT_EQ(v(0, 2), 3.0);
        EXPECT_EQ(v(1, 0), 4.0);
        EXPECT_EQ(v(1, 2), 6.125);
    }
}

TEST_F(npy_test, ReadsVersion3Utf8HeaderWithFortranOrder) {
    // Version 3 exists for UTF-8 headers; the bytes of the preamble are otherwise identical.
    const std::vector<float> d = {1, 2, 3, 4, 5, 6};
    const std::string p = path("v3.npy");
    write_bytes(p, npy_bytes(3, "{\"shape\": (2, 3), \"fortran_order\": True, \"descr\": \"<f4\"}",
                             raw(d)));
    const npy_array a = read_npy(p);
    ASSERT_EQ(a.type(), dtype::f32);
    EXPECT_EQ(a.layout(), layout::col_major);
    const auto v = a.view<float>();
    EXPECT_EQ(v(0, 0), 1.f);
    EXPECT_EQ(v(1, 0), 2.f);
    EXPECT_EQ(v(0, 1), 3.f);
    EXPECT_EQ(v(1, 2), 6.f);
}

TEST_F(npy_test, ToleratesWhitespaceKeyOrderAndTrailingCommas) {
    const std::vector<float> d = {1, 2, 3, 4, 5, 6};
    const std::string dicts[] = {
        "{'fortran_order':False,'shape':(3,2),'descr':'<f4'}",
        "{ 'shape' : ( 3 , 2 , ) ,\t'descr' : '<f4' , 'fortran_order' : False , }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 2L), }",
    };
    for (const auto& dict : dicts) {
        SCOPED_TRACE(dict);
        const std::string p = path("ws.npy");
        write_bytes(p, npy_bytes(1, dict, raw(d)));
        const npy_array a = read_npy(p);
        EXPECT_EQ(a.rows(), 3);
        EXPECT_EQ(a.cols(), 2);
        EXPECT_EQ(a.layout(), layout::row_major);
        EXPECT_EQ(a.view<float>()(2, 1), 6.f);
    }
}

TEST_F(npy_test, OneDimensionalArrayReadsAsColumn) {
    const std::vector<double> d = {1, 2, 3, 4};
    const std::string p = path("vec.npy");
    write_bytes(p,
                npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", raw(d)));
    const npy_array a = read_npy(p);
    EXPECT_EQ(a.rows(), 4);
    EXPECT_EQ(a.cols(), 1);
    EXPECT_EQ(a.view<double>()(3, 0), 4.0);

    write_bytes(p, npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }", ""));
    const npy_array e = read_npy(p);
    EXPECT_EQ(e.rows(), 0);
    EXPECT_EQ(e.cols(), 1);
}

TEST_F(npy_test, MisalignedDataIsCopiedToAlignedMemory) {
    // A header padded to an odd length puts the data at an address no double may live at.
    const std::vector<double> d = {1.25, -7.5};
    const std::string p = path("odd.npy");
    write_bytes(
        p, npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2)}", raw(d), 1));
    const std::string bytes = read_bytes(p);
    ASSERT_NE((bytes.size() - 16) % 8, 0u) << "the test file should be misaligned";
    const npy_array a = read_npy(p);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % alignof(double), 0u);
    EXPECT_EQ(a.view<double>()(0, 1), -7.5);
}

// ---- errors ----

TEST_F(npy_test, BadMagicIsReported) {
    const std::string p = path("bad.npy");
    write_bytes(p, "PK\x03\x04 this is a zip file, not a .npy file");
    EXPECT_FILE_ERROR(read_npy(p), p, "not a .npy file (bad magic)");
    write_bytes(p, "");
    EXPECT_FILE_ERROR(read_npy(p), p, "not a .npy file (bad magic");
}

TEST_F(npy_test, UnsupportedVersionIsReported) {
    const std::string p = path("v4.npy");
    write_bytes(p, npy_bytes(4, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1), }",
                             raw(std::vector<double>{1})));
    EXPECT_FILE_ERROR(read_npy(p), p, "unsupported .npy format version 4.0");
}

TEST_F(npy_test, TruncatedHeaderIsReported) {
    const std::string p = path("th.npy");
    const std::string full =
        npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1), }",
                  raw(std::vector<double>{1}));
    write_bytes(p, full.substr(0, 9));
    EXPECT_FILE_ERROR(read_npy(p), p, "truncated header");
    write_bytes(p, full.substr(0, 40));
    EXPECT_FILE_ERROR(read_npy(p), p, "truncated header");
}

TEST_F(npy_test, TruncatedDataIsReported) {
    const std::string p = path("td.npy");
    write_bytes(p, npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (100, 100), }",
                             std::string(1234, '\0')));
    EXPECT_FILE_ERROR(
        read_npy(p), p,
        "truncated: header says 100x100 <f8 (80000 bytes of data) but only 1234 bytes "
        "follow the header");
}

TEST_F(npy_test, HugeShapeIsReportedNotOverflowed) {
    const std::string p = path("huge.npy");
    write_bytes(
        p, npy_bytes(
               1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
               ""));
    EXPECT_FILE_ERROR(read_npy(p), p, "needs more than 2^63 bytes");
    write_bytes(
        p, npy_bytes(
               1, "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999, 1), }",
               ""));
    EXPECT_FILE_ERROR(read_npy(p), p, "does not fit in 64 bits");
}

TEST_F(npy_test, HeadersLargerThanAnyArrayNeedsAreRefusedUnread) {
    // A valid header padded to 100 000 bytes (numpy itself stops at 10 000 by default).
    const std::string p = path("padded.npy");
    write_bytes(p, npy_bytes(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1), }" + std::string(100000, ' '),
                             std::string(8, '\0')));
    EXPECT_FILE_ERROR(read_npy(p), p, "more than the 65536 tilestream reads");
}

TEST_F(npy_test, UnsupportedDtypesAreReported) {
    const std::string p = path("dt.npy");
    for (const std::string descr : {"<i4", ">f8", ">f4", "<f2", "|O", ">c16", "<c32", "|u1"}) {
        SCOPED_TRACE(descr);
        write_bytes(
            p, npy_bytes(1, "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (2, 2), }",
                         std::string(64, '\0')));
        EXPECT_FILE_ERROR(read_npy(p), p,
                          "unsupported dtype '" + descr + "' (tilestream reads '<f4', '<f8', '<c8' and '<c16')");
    }
    write_bytes(
        p,
        npy_bytes(
            1, "{'descr': [('a', '<f8'), ('b', '<i4')], 'fortran_order': False, 'shape': (2,), }",
            std::string(64, '\0')));
    EXPECT_FILE_ERROR(read_npy(p), p, "unsupported dtype [('a', '<f8'), ('b', '<i4')]");
}

TEST_F(npy_test, ShapesOtherThan1DOr2DAreReported) {
    const std::string p = path("sh.npy");
    write_bytes(p, npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), }",
                             std::string(24 * 8, '\0')));
    EXPECT_FILE_ERROR(read_npy(p), p, "unsupported shape (2, 3, 4)");
    write_bytes(p, npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                             std::string(8, '\0')));
    EXPECT_FILE_ERROR(read_npy(p), p, "unsupported shape ()");
}

TEST_F(npy_test, MalformedHeadersAreReported) {
    const std::string p = path("mh.npy");
    const std::string d(64, '\0');
    const std::pair<std::string, std::string> cases[] = {
        {"{'descr': '<f8', 'shape': (2, 2), }", "no 'fortran_order' key"},
        {"{'descr': '<f8', 'fortran_order': false, 'shape': (2, 2), }", "expected True or False"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, -2), }",
         "expected a non-negative integer"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), 'extra': 1}",
         "unexpected key 'extra'"},
        {"{'descr': '<f8' 'fortran_order': False, 'shape': (2, 2)}", "expected ',' or '}'"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2)", "expected ',' or '}'"},
        {"['descr', '<f8']", "expected '{'"},
    };
    for (const auto& [dict, phrase] : cases) {
        SCOPED_TRACE(dict);
        write_bytes(p, npy_bytes(1, dict, d));
        EXPECT_FILE_ERROR(read_npy(p), p, "malformed header: " + phrase);
    }
}

TEST_F(npy_test, MissingFileIsReported) {
    const std::string p = path("does_not_exist.npy");
    EXPECT_FILE_ERROR(read_npy(p), p, "cannot open: No such file or directory");
}

TEST_F(npy_test, DirectoryIsReported) {
    const std::string p = path("sub");
    fs::create_directory(p);
    EXPECT_FILE_ERROR(read_npy(p), p, "cannot read: Is a directory");
}

TEST_F(npy_test, ViewOfTheWrongTypeNamesBothTypes) {
    const std::string p = path("f.npy");
    host_matrix<float> m(2, 2);
    fill_random(m.view(), 9);
    write_npy<float>(p, m.view());
    const npy_array a = read_npy(p);
    try {
        (void)a.view<double>();
        ADD_FAILURE() << "expected invalid_argument";
    } catch (const tilestream::invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(p), std::string::npos) << what;
        EXPECT_NE(what.find("f64"), std::string::npos) << what;
        EXPECT_NE(what.find("f32"), std::string::npos) << what;
    }
}

TEST_F(npy_test, WriteIntoMissingDirectoryLeavesNothing) {
    const std::string p = path("no_such_dir/out.npy");
    host_matrix<double> m(3, 3);
    fill_random(m.view(), 10);
    EXPECT_FILE_ERROR(write_npy<double>(p, m.view()), p, "No such file or directory");
    EXPECT_TRUE(listing().empty());
}

TEST_F(npy_test, FailedRenameRemovesTheTemporary) {
    // A directory is refused before anything is written.
    const std::string dir_target = path("dir");
    fs::create_directory(dir_target);
    host_matrix<float> m(3, 3);
    fill_random(m.view(), 11);
    EXPECT_FILE_ERROR(write_npy<float>(dir_target, m.view()), dir_target, "it is a directory");
    // A directory that appears at the target while the temporary is written: rename() fails and
    // the temporary goes.
    static std::string target;
    target = path("target");
    detail::output_file_write_hook = [](const std::string&) { fs::create_directory(target); };
    EXPECT_FILE_ERROR(write_npy<float>(target, m.view()), target, "cannot rename");
    detail::output_file_write_hook = nullptr;
    auto names = listing();
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"dir", "target"}));
    EXPECT_TRUE(fs::is_empty(target));
}

TEST_F(npy_test, WriteIntoReadOnlyDirectoryLeavesNothing) {
    // root ignores directory permissions, so the case cannot be produced there.
    if (::geteuid() == 0)
        GTEST_SKIP() << "running as root: a read-only directory is still writable";
    const std::string sub = path("ro");
    fs::create_directory(sub);
    fs::permissions(sub, fs::perms::owner_read | fs::perms::owner_exec);
    const std::string p = sub + "/out.npy";
    host_matrix<double> m(2, 2);
    fill_random(m.view(), 12);
    EXPECT_FILE_ERROR(write_npy<double>(p, m.view()), p, "Permission denied");
    fs::permissions(sub, fs::perms::owner_all);
    EXPECT_TRUE(fs::is_empty(sub));
}

namespace {

TEST_F(npy_test, TruncatedWhileMappedReadsZerosAndIsReported) {
    // Without the guard, reading a page past the new end of the file ends the process (SIGBUS).
    const std::string p = path("shrinks.npy");
    host_matrix<double> m(300, 200);  // 480 000 bytes: many pages past the header
    fill_random(m.view(), 21);
    write_npy<double>(p, m.view());
    const npy_array a = read_npy(p);
    EXPECT_NO_THROW(a.check_unchanged());
    ASSERT_EQ(::truncate(p.c_str(), 128), 0);
    const auto v = a.view<double>();
    double sum_tail = 0;
    for (index_t i = 100; i < 300; ++i)
        for (index_t j = 0; j < 200; ++j) sum_tail += std::fabs(v(i, j));
    EXPECT_EQ(sum_tail, 0.0) << "pages past the truncation read as zeros";
    EXPECT_FILE_ERROR(a.check_unchanged(), p, "was truncated while tilestream read it");
}

TEST_F(npy_test, RewrittenFileIsReportedByCheckUnchanged) {
    const std::string p = path("grows.npy");
    host_matrix<float> m(17, 9);
    fill_random(m.view(), 22);
    write_npy<float>(p, m.view());
    const npy_array a = read_npy(p);
    std::ofstream(p, std::ios::app) << "more";
    EXPECT_FILE_ERROR(a.check_unchanged(), p, "changed size while tilestream read it");
}

TEST_F(npy_test, DescrWithEscapeCodesIsEscapedAndCut) {
    // Clear screen, set the window title, ring the bell, turn red; and a 1 MiB descr.
    const std::string p = path("hostile.npy");
    const std::string cases[] = {"\x1b[2J\x1b]0;title\x07\x1b[31m", std::string(1 << 20, 'A')};
    for (const std::string& descr : cases) {
        write_bytes(p, npy_bytes(2, "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (1, 1), }",
                                 std::string(8, '\0')));
        try {
            (void)read_npy(p);
            ADD_FAILURE() << "expected file_error";
        } catch (const file_error& e) {
            const std::string what = e.what();
            // The 1 MiB one is refused for its size before its text is looked at.
            EXPECT_TRUE(what.find("unsupported dtype") != std::string::npos ||
                        what.find("more than the 65536 tilestream reads") != std::string::npos)
                << what;
            EXPECT_EQ(what.find('\x1b'), std::string::npos) << "escape code echoed raw";
            EXPECT_EQ(what.find('\x07'), std::string::npos) << "bell echoed raw";
            EXPECT_LT(what.size(), 400u) << "message not cut";
        }
    }
}

TEST_F(npy_test, TerminatingSignalRemovesTheTemporary) {
    // A child writes a .npy and receives SIGTERM in the middle of the write.
    const std::string p = path("interrupted.npy");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        detail::output_file_write_hook = [](const std::string&) { ::raise(SIGTERM); };
        host_matrix<float> m(64, 64);
        fill_random(m.view(), 23);
        write_npy<float>(p, m.view());
        ::_exit(0);  // not reached: SIGTERM ends the child
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child should die of the signal, status " << status;
    EXPECT_EQ(WTERMSIG(status), SIGTERM);
    EXPECT_TRUE(listing().empty()) << "left behind: " << (listing().empty() ? "" : listing().front());
}

TEST_F(npy_test, OutputPathsAreCheckedUpFront) {
    EXPECT_FILE_ERROR(check_output_path(path("missing/out.npy")), path("missing/out.npy"),
                      "No such file or directory");
    fs::create_directory(path("sub"));
    EXPECT_FILE_ERROR(check_output_path(path("sub")), path("sub"), "it is a directory");
    write_bytes(path("plain"), "x");
    EXPECT_FILE_ERROR(check_output_path(path("plain/out.npy")), path("plain/out.npy"), "is not a directory");
    EXPECT_NO_THROW(check_output_path(path("fine.npy")));
    EXPECT_TRUE(!fs::exists(path("fine.npy"))) << "the check must not create the file";
}

}  // namespace
