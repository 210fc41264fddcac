// PNG images: the file decodes (signature, chunk CRCs, zlib stream, scanlines) to the pixels
// written; a rendered field has its colour map, colour bar and labels; failures name the path.
#include "test_support.hpp"

#include <tilestream/image.hpp>
#include <tilestream/jacobi.hpp>

#include <cstring>
#include <fstream>
#include <iterator>

#include <dlfcn.h>
#include <zlib.h>

namespace tilestream {
namespace {

using testing::temp_dir;

// The test target links zlib only through libtilestream (a private dependency), so the two zlib
// functions the decoder needs are looked up in the loaded library instead of linked directly.
struct zlib_api {
    decltype(&::uncompress) uncompress_fn = nullptr;
    decltype(&::crc32) crc32_fn = nullptr;
    zlib_api() {
        uncompress_fn = reinterpret_cast<decltype(&::uncompress)>(dlsym(RTLD_DEFAULT, "uncompress"));
        crc32_fn = reinterpret_cast<decltype(&::crc32)>(dlsym(RTLD_DEFAULT, "crc32"));
    }
};

std::uint32_t be32(const std::string& s, std::size_t at) {
    return (std::uint32_t(std::uint8_t(s[at])) << 24) | (std::uint32_t(std::uint8_t(s[at + 1])) << 16) |
           (std::uint32_t(std::uint8_t(s[at + 2])) << 8) | std::uint32_t(std::uint8_t(s[at + 3]));
}

/// Decodes an 8-bit RGB, non-interlaced PNG with filter type 0 on every line (what write_png
/// writes), checking every chunk's CRC. Failures are reported through gtest.
rgb_image decode_png(const std::string& path) {
    static const zlib_api z;
    if (!z.uncompress_fn || !z.crc32_fn) {
        ADD_FAILURE() << "zlib functions not found in the process";
        return {};
    }
    std::ifstream in(path, std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (file.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) != 0) {
        ADD_FAILURE() << path << ": no PNG signature";
        return {};
    }
    rgb_image img;
    std::string idat;
    bool ended = false;
    for (std::size_t at = 8; at + 12 <= file.size() && !ended;) {
        const std::uint32_t len = be32(file, at);
        const std::string type = file.substr(at + 4, 4);
        if (at + 12 + len > file.size()) {
            ADD_FAILURE() << path << ": chunk " << type << " runs past the end";
            return {};
        }
        const auto* bytes = reinterpret_cast<const Bytef*>(file.data() + at + 4);
        const uLong crc = z.crc32_fn(z.crc32_fn(0L, Z_NULL, 0), bytes, 4 + len);
        EXPECT_EQ(crc, be32(file, at + 8 + len)) << "CRC of chunk " << type;
        const std::string data = file.substr(at + 8, len);
        if (type == "IHDR") {
            EXPECT_EQ(len, 13u);
            img.width = int(be32(data, 0));
            img.height = int(be32(data, 4));
            EXPECT_EQ(data[8], 8) << "bit depth";
            EXPECT_EQ(data[9], 2) << "colour type RGB";
            EXPECT_EQ(data.substr(10), std::string(3, '\0'));
        } else if (type == "IDAT") {
            idat += data;
        } else if (type == "IEND") {
            EXPECT_EQ(len, 0u);
            ended = true;
            EXPECT_EQ(at + 12, file.size()) << "bytes after IEND";
        }
        at += 12 + len;
    }
    EXPECT_TRUE(ended) << "no IEND";
    const std::size_t row = 3 * std::size_t(img.width);
    std::string raw((row + 1) * std::size_t(img.height), '\0');
    uLongf raw_len = raw.size();
    EXPECT_EQ(z.uncompress_fn(reinterpret_cast<Bytef*>(raw.data()), &raw_len,
                              reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
              Z_OK);
    EXPECT_EQ(raw_len, raw.size());
    img.pixels.resize(row * std::size_t(img.height));
    for (int y = 0; y < img.height; ++y) {
        EXPECT_EQ(raw[std::size_t(y) * (row + 1)], 0) << "filter type of line " << y;
        std::memcpy(&img.pixels[std::size_t(y) * row], &raw[std::size_t(y) * (row + 1) + 1], row);
    }
    return img;
}

std::array<std::uint8_t, 3> pixel(const rgb_image& img, int x, int y) {
    const auto* p = img.at(x, y);
    return {p[0], p[1], p[2]};
}

TEST(png, WrittenPixelsDecodeBack) {
    temp_dir dir;
    rgb_image img(37, 11, {1, 2, 3});
    for (int y = 0; y < 11; ++y)
        for (int x = 0; x < 37; ++x) {
            auto* p = img.at(x, y);
            p[0] = std::uint8_t(7 * x + y), p[1] = std::uint8_t(x * y), p[2] = std::uint8_t(255 - x);
        }
    write_png(dir.file("a.png"), img);
    const auto back = decode_png(dir.file("a.png"));
    EXPECT_EQ(back.width, 37);
    EXPECT_EQ(back.height, 11);
    EXPECT_EQ(back.pixels, img.pixels);
    EXPECT_EQ(dir.entries(), 1u);
}

TEST(png, ViridisEndsAndMiddle) {
    EXPECT_EQ(viridis(0.0), (std::array<std::uint8_t, 3>{68, 1, 84}));
    EXPECT_EQ(viridis(1.0), (std::array<std::uint8_t, 3>{253, 231, 37}));
    EXPECT_EQ(viridis(-3.0), viridis(0.0));
    EXPECT_EQ(viridis(7.0), viridis(1.0));
    EXPECT_EQ(viridis(128.0 / 255.0), (std::array<std::uint8_t, 3>{33, 145, 140}));
}

TEST(png, FieldImageHasColourMapBarAndLabels) {
    temp_dir dir;
    // A ramp from -1 (left) to 2 (right) over 300 x 40 points: drawn at 300 x 40 pixels.
    host_matrix<double> f(40, 300);
    for (index_t i = 0; i < 40; ++i)
        for (index_t j = 0; j < 300; ++j) f(i, j) = -1.0 + 3.0 * double(j) / 299.0;
    write_field_png<double>(dir.file("f.png"), host_matrix_view<const double>(f.view()));
    const auto img = decode_png(dir.file("f.png"));
    ASSERT_GT(img.width, 300 + 20 + 2 * 10);
    ASSERT_GE(img.height, 40 + 2 * 10);
    EXPECT_EQ(pixel(img, 10, 10), viridis(0.0));     // first point: the minimum
    EXPECT_EQ(pixel(img, 309, 49), viridis(1.0));    // last point: the maximum
    EXPECT_EQ(pixel(img, 0, 0), (std::array<std::uint8_t, 3>{255, 255, 255}));  // margin
    // The colour bar right of the field: framed, maximum at the top, minimum at the bottom.
    const int bar_x = 10 + 300 + 12;
    const int bottom = img.height - 10 - 1;
    EXPECT_EQ(pixel(img, bar_x, 20), (std::array<std::uint8_t, 3>{0, 0, 0}));
    EXPECT_EQ(pixel(img, bar_x + 10, 11), viridis(1.0 - 1.0 / double(bottom - 10)));
    EXPECT_EQ(pixel(img, bar_x + 10, bottom - 1), viridis(1.0 / double(bottom - 10)));
    // Labels: some black text pixels right of the bar, near its top and near its bottom.
    const auto black_in = [&](int y0, int y1) {
        int n = 0;
        for (int y = y0; y < y1; ++y)
            for (int x = bar_x + 20; x < img.width; ++x) n += pixel(img, x, y) == std::array<std::uint8_t, 3>{0, 0, 0};
        return n;
    };
    EXPECT_GT(black_in(10, 24), 20);
    EXPECT_GT(black_in(bottom - 14, bottom + 1), 20);
}

TEST(png, SmallFieldsAreEnlargedAndLargeOnesShrunk) {
    host_matrix<float> small(3, 3);
    fill_jacobi_start<float>(small.view());
    const auto a = render_field<float>(host_matrix_view<const float>(small.view()));
    EXPECT_GE(a.width, 255);  // 3 points enlarged 85 times
    host_matrix<float> big(2000, 3000);
    fill_jacobi_start<float>(big.view());
    const auto b = render_field<float>(host_matrix_view<const float>(big.view()));
    EXPECT_LE(b.width, 1024 + 200);
    EXPECT_LE(b.height, 1024 + 20);
}

TEST(png, UnwritablePathIsNamed) {
    temp_dir dir;
    const std::string path = dir.file("no/such/dir/x.png");
    try {
        write_png(path, rgb_image(4, 4));
        FAIL() << "wrote into a missing directory";
    } catch (const file_error& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    EXPECT_EQ(dir.entries(), 0u);
}

}  // namespace
}  // namespace tilestream
