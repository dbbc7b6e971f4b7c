// A tiny PNG writer (stored deflate blocks, Adler-32 here, CRC-32 from the format library) and a line plot
// of the training metrics, so xf-train draws its curves without zlib or Python.
#include <algorithm>
#include <cmath>
#include <limits>

#include "xf/error.h"
#include "xf/format/file_layout.h"  // xf::crc32, the PNG chunk checksum too
#include "xf/trainer/plot.h"

namespace xf::trainer {
namespace {

uint32_t adler32(const uint8_t* data, size_t size) {
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < size; ++i) {
    a = (a + data[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

void put_u32_be(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

void put_chunk(std::string& png, const char type[4], const std::string& data) {
  put_u32_be(png, static_cast<uint32_t>(data.size()));
  std::string typed = std::string(type, 4) + data;
  png += typed;
  put_u32_be(png, xf::crc32(typed.data(), typed.size()));
}

// 3x5 pixel glyphs for axis labels: digits, '.', '-'; each row is 3 bits, high bit left.
const uint8_t* glyph(char c) {
  static const uint8_t digits[10][5] = {
      {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
      {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}};
  static const uint8_t dot[5] = {0, 0, 0, 0, 2};
  static const uint8_t minus[5] = {0, 0, 7, 0, 0};
  if (c >= '0' && c <= '9') return digits[c - '0'];
  if (c == '.') return dot;
  if (c == '-') return minus;
  return nullptr;
}

// Short label for an axis value: integers as such, others with up to 3 significant digits.
std::string axis_label(double value) {
  char buffer[32];
  if (std::fabs(value - std::round(value)) < 1e-9 && std::fabs(value) < 1e9) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", value);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3g", value);
  }
  return buffer;
}

}  // namespace

std::string encode_png_rgb(int width, int height, const std::vector<uint8_t>& rgb) {
  if (width < 1 || height < 1 || rgb.size() != static_cast<size_t>(width) * height * 3) {
    throw Error("encode_png_rgb: image size does not match the pixel buffer");
  }
  // Scanlines, each prefixed by filter type 0 (none).
  std::vector<uint8_t> raw;
  raw.reserve(static_cast<size_t>(height) * (1 + 3 * width));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + static_cast<size_t>(y) * width * 3,
               rgb.begin() + static_cast<size_t>(y + 1) * width * 3);
  }
  // zlib stream: header (deflate, 32K window, no dictionary), stored blocks, Adler-32.
  std::string zlib = {'\x78', '\x01'};
  const size_t kMaxStored = 65535;
  for (size_t offset = 0; offset < raw.size() || offset == 0; offset += kMaxStored) {
    size_t length = std::min(kMaxStored, raw.size() - offset);
    bool last = offset + length >= raw.size();
    zlib.push_back(last ? 1 : 0);  // BFINAL, BTYPE=00 (stored)
    zlib.push_back(static_cast<char>(length & 0xFF));
    zlib.push_back(static_cast<char>(length >> 8));
    zlib.push_back(static_cast<char>(~length & 0xFF));
    zlib.push_back(static_cast<char>((~length >> 8) & 0xFF));
    zlib.append(reinterpret_cast<const char*>(raw.data()) + offset, length);
    if (last) break;
  }
  put_u32_be(zlib, adler32(raw.data(), raw.size()));

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string header;
  put_u32_be(header, static_cast<uint32_t>(width));
  put_u32_be(header, static_cast<uint32_t>(height));
  header += {8, 2, 0, 0, 0};  // 8-bit depth, truecolour RGB, deflate, filter 0, no interlace
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", zlib);
  put_chunk(png, "IEND", "");
  return png;
}

std::string render_line_plot_png(const std::vector<PlotSeries>& series, int width, int height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3, 255);
  auto set_pixel = [&](int x, int y, uint8_t r, uint8_t g, uint8_t b) {
    if (x < 0 || y < 0 || x >= width || y >= height) return;
    uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
    p[0] = r;
    p[1] = g;
    p[2] = b;
  };
  const int left = 70, right = width - 30, top = 20, bottom = height - 40;

  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = x_min, y_max = -x_min;
  for (const auto& s : series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      x_min = std::min(x_min, s.x[i]);
      x_max = std::max(x_max, s.x[i]);
      y_min = std::min(y_min, s.y[i]);
      y_max = std::max(y_max, s.y[i]);
    }
  }
  if (!(x_min <= x_max)) x_min = 0, x_max = 1, y_min = 0, y_max = 1;  // nothing to draw
  if (x_max == x_min) x_max = x_min + 1;
  if (y_max == y_min) y_max = y_min + 1;
  y_min = std::min(y_min, 0.0);  // losses: keep zero in view
  auto px = [&](double x) { return left + static_cast<int>((x - x_min) / (x_max - x_min) * (right - left)); };
  auto py = [&](double y) { return bottom - static_cast<int>((y - y_min) / (y_max - y_min) * (bottom - top)); };

  // Grid: 5 horizontal and 5 vertical lines, then the frame.
  for (int k = 0; k <= 5; ++k) {
    int gy = top + (bottom - top) * k / 5, gx = left + (right - left) * k / 5;
    for (int x = left; x <= right; ++x) set_pixel(x, gy, 225, 225, 225);
    for (int y = top; y <= bottom; ++y) set_pixel(gx, y, 225, 225, 225);
  }
  // Labels at the grid lines, 2x scaled glyphs: values on the left, steps below.
  auto draw_text = [&](const std::string& text, int x, int y) {
    for (char c : text) {
      if (const uint8_t* g = glyph(c)) {
        for (int row = 0; row < 5; ++row)
          for (int col = 0; col < 3; ++col)
            if (g[row] & (4 >> col))
              for (int d = 0; d < 4; ++d) set_pixel(x + 2 * col + d % 2, y + 2 * row + d / 2, 60, 60, 60);
      }
      x += 8;
    }
  };
  for (int k = 0; k <= 5; ++k) {
    std::string y_label = axis_label(y_max - (y_max - y_min) * k / 5);
    draw_text(y_label, left - 6 - 8 * static_cast<int>(y_label.size()), top + (bottom - top) * k / 5 - 5);
    std::string x_label = axis_label(x_min + (x_max - x_min) * k / 5);
    draw_text(x_label, left + (right - left) * k / 5 - 4 * static_cast<int>(x_label.size()), bottom + 8);
  }
  for (int x = left; x <= right; ++x) set_pixel(x, bottom, 90, 90, 90), set_pixel(x, top, 90, 90, 90);
  for (int y = top; y <= bottom; ++y) set_pixel(left, y, 90, 90, 90), set_pixel(right, y, 90, 90, 90);

  for (const auto& s : series) {
    bool have_previous = false;
    int previous_x = 0, previous_y = 0;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      int x = px(s.x[i]), y = py(s.y[i]);
      if (s.points) {
        for (int dy = -2; dy <= 2; ++dy)
          for (int dx = -2; dx <= 2; ++dx) set_pixel(x + dx, y + dy, s.red, s.green, s.blue);
      } else if (have_previous) {
        // Bresenham-style: step along the longer axis.
        int steps = std::max(std::abs(x - previous_x), std::abs(y - previous_y));
        for (int t = 0; t <= steps; ++t) {
          int lx = previous_x + (steps ? (x - previous_x) * t / steps : 0);
          int ly = previous_y + (steps ? (y - previous_y) * t / steps : 0);
          set_pixel(lx, ly, s.red, s.green, s.blue);
          set_pixel(lx, ly + 1, s.red, s.green, s.blue);
        }
      }
      have_previous = true;
      previous_x = x;
      previous_y = y;
    }
  }
  return encode_png_rgb(width, height, rgb);
}

}  // namespace xf::trainer
