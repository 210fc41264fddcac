// PNG images of fields: the viridis colour map, a colour bar with labels in a built-in 5x7 font,
// and an RGB PNG writer (zlib's compress2 and crc32) that renames a finished file into place.
#include <tilestream/error.hpp>
#include <tilestream/image.hpp>

#include <tilestream/trace.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

namespace tilestream {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw file_error("cannot write PNG image '" + path + "': " + what);
}

void put_u32(std::string& s, std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xff);
}

void put_chunk(std::string& out, const char type[4], const std::string& data) {
    put_u32(out, static_cast<std::uint32_t>(data.size()));
    const std::size_t start = out.size();
    out.append(type, 4);
    out += data;
    const auto* bytes = reinterpret_cast<const Bytef*>(out.data() + start);
    // crc32 takes a uInt length: feed it in pieces (IDAT can exceed 4 GiB in principle).
    uLong crc = crc32(0L, Z_NULL, 0);
    for (std::size_t done = 0, n = out.size() - start; done < n;) {
        const std::size_t piece = std::min<std::size_t>(n - done, 1u << 30);
        crc = crc32(crc, bytes + done, static_cast<uInt>(piece));
        done += piece;
    }
    put_u32(out, static_cast<std::uint32_t>(crc));
}

// Viridis (matplotlib's, CC0) sampled at entries 0, 16, ..., 240 and 255 of its 256; linear in between.
constexpr std::uint8_t viridis_table[17][3] = {
    {68, 1, 84},    {72, 24, 106},  {71, 45, 123},  {66, 64, 134},  {59, 82, 139},   {51, 99, 141},
    {44, 114, 142}, {38, 130, 142}, {33, 145, 140}, {31, 160, 136}, {40, 174, 128},  {63, 188, 115},
    {94, 201, 98},  {132, 212, 75}, {173, 220, 48}, {216, 226, 25}, {253, 231, 37}};

// A 5x7 bitmap font for numbers: each glyph is 7 rows of 5 bits, the high bit on the left.
struct glyph {
    char ch;
    std::uint8_t rows[7];
};
constexpr glyph font[] = {
    {'0', {0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e}}, {'1', {0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e}},
    {'2', {0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f}}, {'3', {0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e}},
    {'4', {0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02}}, {'5', {0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e}},
    {'6', {0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e}}, {'7', {0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e}}, {'9', {0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c}}, {'-', {0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1f, 0x04, 0x04, 0x00}}, {'e', {0x00, 0x00, 0x0e, 0x11, 0x1f, 0x10, 0x0e}},
    {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}}, {'a', {0x00, 0x00, 0x0e, 0x01, 0x0f, 0x11, 0x0f}},
    {'i', {0x04, 0x00, 0x0c, 0x04, 0x04, 0x04, 0x0e}}, {'f', {0x06, 0x09, 0x08, 0x1c, 0x08, 0x08, 0x08}},
    {' ', {0, 0, 0, 0, 0, 0, 0}},
};
constexpr int font_scale = 2;
constexpr int glyph_advance = 6 * font_scale;
constexpr int glyph_height = 7 * font_scale;

const glyph& glyph_of(char c) {
    for (const glyph& g : font)
        if (g.ch == c) return g;
    static constexpr glyph box{'?', {0x1f, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1f}};
    return box;
}

void draw_text(rgb_image& img, int x, int y, std::string_view text, std::array<std::uint8_t, 3> colour) {
    for (char c : text) {
        const glyph& g = glyph_of(c);
        for (int r = 0; r < 7; ++r)
            for (int col = 0; col < 5; ++col) {
                if (!(g.rows[r] & (0x10 >> col))) continue;
                for (int dy = 0; dy < font_scale; ++dy)
                    for (int dx = 0; dx < font_scale; ++dx) {
                        const int px = x + col * font_scale + dx, py = y + r * font_scale + dy;
                        if (px >= 0 && py >= 0 && px < img.width && py < img.height)
                            std::copy(colour.begin(), colour.end(), img.at(px, py));
                    }
            }
        x += glyph_advance;
    }
}

std::string label(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

}  // namespace

rgb_image::rgb_image(int w, int h, std::array<std::uint8_t, 3> fill) : width(w), height(h) {
    if (w < 1 || h < 1 || std::size_t(w) * std::size_t(h) > (std::size_t(1) << 31))
        throw invalid_argument("rgb_image: bad size " + std::to_string(w) + "x" + std::to_string(h));
    pixels.resize(3 * std::size_t(w) * std::size_t(h));
    for (std::size_t i = 0; i < pixels.size(); i += 3) std::copy(fill.begin(), fill.end(), &pixels[i]);
}

std::array<std::uint8_t, 3> viridis(double t) {
    if (!(t > 0)) t = 0;  // NaN too
    if (t > 1) t = 1;
    const double pos = t * 255.0;
    int k = std::min(15, static_cast<int>(pos / 16.0));
    const double lo = 16.0 * k, hi = k == 15 ? 255.0 : 16.0 * (k + 1);
    const double f = (pos - lo) / (hi - lo);
    std::array<std::uint8_t, 3> c{};
    for (int i = 0; i < 3; ++i)
        c[i] = static_cast<std::uint8_t>(
            std::lround(viridis_table[k][i] + f * (viridis_table[k + 1][i] - viridis_table[k][i])));
    return c;
}

std::string encode_png(const rgb_image& img, const std::string& path) {
    if (img.width < 1 || img.height < 1 || img.pixels.size() != 3 * std::size_t(img.width) * std::size_t(img.height))
        throw invalid_argument("write_png: '" + path + "': the image is " + std::to_string(img.width) + "x" +
                               std::to_string(img.height) + " with " + std::to_string(img.pixels.size()) +
                               " bytes of pixels");
    // Scanlines, each after a filter-type byte (0: none).
    const std::size_t row = 3 * std::size_t(img.width);
    std::string raw;
    raw.reserve((row + 1) * std::size_t(img.height));
    for (int y = 0; y < img.height; ++y) {
        raw += '\0';
        raw.append(reinterpret_cast<const char*>(img.at(0, y)), row);
    }
    uLongf zsize = compressBound(static_cast<uLong>(raw.size()));
    std::string z(zsize, '\0');
    const int rc = compress2(reinterpret_cast<Bytef*>(z.data()), &zsize,
                             reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()), 6);
    if (rc != Z_OK) fail(path, "zlib compress2 failed with code " + std::to_string(rc));
    z.resize(zsize);

    std::string ihdr;
    put_u32(ihdr, static_cast<std::uint32_t>(img.width));
    put_u32(ihdr, static_cast<std::uint32_t>(img.height));
    ihdr += '\x08';  // bit depth
    ihdr += '\x02';  // colour type: RGB
    ihdr += std::string(3, '\0');  // deflate, adaptive filtering, no interlace

    std::string png("\x89PNG\r\n\x1a\n", 8);
    put_chunk(png, "IHDR", ihdr);
    put_chunk(png, "IDAT", z);
    put_chunk(png, "IEND", "");
    return png;
}

void write_png(const std::string& path, const rgb_image& image) {
    // A temporary beside `path` renamed over it (readers never see a partial image), or a device
    // or FIFO written in place.
    write_text_file_atomically(path, encode_png(image, path));
}

template <class T>
rgb_image render_field(host_matrix_view<const T> field, const field_image_options& opt) {
    const index_t ny = field.rows(), nx = field.cols();
    if (ny < 1 || nx < 1) throw invalid_argument("render_field: the field is empty");
    if (opt.max_side < 16 || opt.min_side < 1 || opt.min_side > opt.max_side)
        throw invalid_argument("render_field: need 16 <= max_side and 1 <= min_side <= max_side");

    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (index_t i = 0; i < ny; ++i)
        for (index_t j = 0; j < nx; ++j) {
            const double v = field(i, j);
            if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
        }
    const bool any = lo <= hi;
    const auto colour_of = [&](double v) -> std::array<std::uint8_t, 3> {
        if (!std::isfinite(v)) return {128, 128, 128};
        return viridis(hi > lo ? (v - lo) / (hi - lo) : 0.5);
    };

    // Field pixels: each the average of a shrink x shrink box, or a point drawn grow x grow.
    const index_t longer = std::max(nx, ny);
    const index_t shrink = longer > opt.max_side ? (longer + opt.max_side - 1) / opt.max_side : 1;
    const index_t grow = longer < opt.min_side ? std::max<index_t>(1, opt.min_side / longer) : 1;
    const int w = static_cast<int>((nx + shrink - 1) / shrink * grow);
    const int h = static_cast<int>((ny + shrink - 1) / shrink * grow);

    constexpr int margin = 10, gap = 12, bar_w = 20, text_gap = 6;
    const std::string top = any ? label(hi) : "nan", bottom = any ? label(lo) : "nan";
    const int text_w = glyph_advance * int(std::max(top.size(), bottom.size()));
    const int content_h = std::max(h, 3 * glyph_height + 8);
    const int bar_x = margin + w + gap;
    rgb_image img(bar_x + bar_w + text_gap + text_w + margin, content_h + 2 * margin);

    for (int py = 0; py < h / int(grow); ++py) {
        for (int px = 0; px < w / int(grow); ++px) {
            double sum = 0;
            index_t count = 0;
            bool bad = false;
            for (index_t i = py * shrink; i < std::min<index_t>((py + 1) * shrink, ny); ++i)
                for (index_t j = px * shrink; j < std::min<index_t>((px + 1) * shrink, nx); ++j) {
                    const double v = field(i, j);
                    if (std::isfinite(v)) sum += v, ++count;
                    else bad = true;
                }
            const auto c = colour_of(count > 0 && !bad ? sum / double(count)
                                                       : std::numeric_limits<double>::quiet_NaN());
            for (int dy = 0; dy < int(grow); ++dy)
                for (int dx = 0; dx < int(grow); ++dx)
                    std::copy(c.begin(), c.end(), img.at(margin + px * int(grow) + dx, margin + py * int(grow) + dy));
        }
    }
    // The colour bar: maximum at the top, in a black frame.
    for (int y = 0; y < content_h; ++y) {
        const double t = content_h > 1 ? 1.0 - double(y) / double(content_h - 1) : 0.5;
        const auto c = viridis(t);
        for (int x = 0; x < bar_w; ++x) {
            const bool frame = x == 0 || x == bar_w - 1 || y == 0 || y == content_h - 1;
            const std::array<std::uint8_t, 3> k = frame ? std::array<std::uint8_t, 3>{0, 0, 0} : c;
            std::copy(k.begin(), k.end(), img.at(bar_x + x, margin + y));
        }
    }
    const int text_x = bar_x + bar_w + text_gap;
    draw_text(img, text_x, margin, top, {0, 0, 0});
    draw_text(img, text_x, margin + content_h - glyph_height, bottom, {0, 0, 0});
    return img;
}

template <class T>
void write_field_png(const std::string& path, host_matrix_view<const T> field, const field_image_options& opt) {
    write_png(path, render_field<T>(field, opt));
}

template rgb_image render_field<float>(host_matrix_view<const float>, const field_image_options&);
template rgb_image render_field<double>(host_matrix_view<const double>, const field_image_options&);
template void write_field_png<float>(const std::string&, host_matrix_view<const float>, const field_image_options&);
template void write_field_png<double>(const std::string&, host_matrix_view<const double>, const field_image_options&);

}  // namespace tilestream
