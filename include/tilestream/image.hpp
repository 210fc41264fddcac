// Pictures of fields: an 8-bit RGB image, PNG files, and a field rendered with the viridis colour
// map beside a colour bar labelled with its minimum and maximum.
#pragma once

#include <tilestream/matrix.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tilestream {

/// Pixels row after row from the top, three bytes (R, G, B) each.
struct rgb_image {
    int width = 0;
    int height = 0;
    std::vector<std::uint8_t> pixels;

    rgb_image() = default;
    /// A width x height image filled with one colour; throws invalid_argument on a bad size.
    rgb_image(int w, int h, std::array<std::uint8_t, 3> fill = {255, 255, 255});
    std::uint8_t* at(int x, int y) { return &pixels[3 * (std::size_t(y) * std::size_t(width) + std::size_t(x))]; }
    const std::uint8_t* at(int x, int y) const {
        return &pixels[3 * (std::size_t(y) * std::size_t(width) + std::size_t(x))];
    }
};

/// Writes an 8-bit RGB PNG (deflate through zlib). Written to a temporary file beside `path` and
/// renamed into place; throws file_error naming the path when it cannot be written.
void write_png(const std::string& path, const rgb_image& image);
/// The bytes of that PNG file (`path` only names it in errors).
std::string encode_png(const rgb_image& image, const std::string& path = "image");

/// The viridis colour map at t in [0, 1] (clamped; NaN gives the low end).
std::array<std::uint8_t, 3> viridis(double t);

struct field_image_options {
    int max_side = 1024;  ///< a larger field is shrunk (box average) until its longer side fits
    int min_side = 256;   ///< a smaller field is enlarged (whole pixels) to reach about this
};

/// The field colour-mapped from its smallest to its largest finite value (row 0 at the top; NaN
/// and infinities grey), with a colour bar on the right labelled with the maximum at the top and
/// the minimum at the bottom.
template <class T>
rgb_image render_field(host_matrix_view<const T> field, const field_image_options& opt = {});

/// render_field written as a PNG.
template <class T>
void write_field_png(const std::string& path, host_matrix_view<const T> field,
                     const field_image_options& opt = {});

}  // namespace tilestream
