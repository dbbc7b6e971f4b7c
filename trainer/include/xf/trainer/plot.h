#pragma once
// The PNG plot of a run's metrics (metrics.png): a line plot over shared axes, encoded without
// zlib.
#include <cstdint>
#include <string>
#include <vector>

namespace xf::trainer {

struct PlotSeries {
  std::vector<double> x, y;
  uint8_t red = 0, green = 0, blue = 0;
  bool points = false;  // draw markers instead of a line
};

// Encodes an RGB image ([height, width, 3] bytes) as a PNG with stored (uncompressed) deflate
// blocks: self-contained, no zlib needed.
std::string encode_png_rgb(int width, int height, const std::vector<uint8_t>& rgb);

// Draws the series on shared axes (white background, grey frame and grid) and returns the PNG.
std::string render_line_plot_png(const std::vector<PlotSeries>& series, int width, int height);

}  // namespace xf::trainer
