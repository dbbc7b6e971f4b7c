// The SSRU recurrence over whole sequences (xf/kernels/recurrent.h): the double reference's
// backward against finite differences of its forward, and each device's f32 kernels against
// the double reference, with fused (stride 2 * dim) and separate (stride dim) inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "kernel_device.h"
#include "xf/kernels/recurrent.h"

namespace xf::test {
namespace {

using trainer::testing::expect_gradient;
using trainer::testing::random_values;
using trainer::testing::weighted_sum;

// The reference written out from the definition, step by step, in double.
TEST(SsruScanReference, ForwardIsTheRecurrenceAndBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t batch = 3, len = 5, dim = 4, stride = 2 * dim;
  // Fused input [rows, 2 * dim]: x then f.
  auto input = random_values(rng, batch * len * stride, -2.0, 2.0);
  const auto weights = random_values(rng, batch * len * dim);
  std::vector<double> cell(batch * len * dim), out(batch * len * dim);
  auto loss = [&] {
    cpu::ssru_scan_forward<double>(input.data(), input.data() + dim, stride, batch, len, dim, cell.data(), out.data(), 2);
    return weighted_sum(weights, out.data());
  };
  loss();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < dim; ++j) {
      double c = 0;
      for (int64_t t = 0; t < len; ++t) {
        const int64_t r = b * len + t;
        const double s = 1 / (1 + std::exp(-input[r * stride + dim + j]));
        c = s * c + (1 - s) * input[r * stride + j];
        EXPECT_NEAR(cell[r * dim + j], c, 1e-14);
        EXPECT_EQ(out[r * dim + j], std::max(c, 0.0));
      }
    }
  std::vector<double> d_input(input.size(), 0.0);
  cpu::ssru_scan_backward<double>(weights.data(), input.data(), input.data() + dim, stride, cell.data(), batch, len,
                                  dim, d_input.data(), d_input.data() + dim, stride, 2);
  expect_gradient(loss, input.data(), input.size(), d_input.data(), "d(x, f)");
}

using SsruScan = KernelTest;

TEST_P(SsruScan, ForwardAndBackwardMatchDoubleReference) {
  for (const bool fused : {true, false})
    for (auto [batch, len, dim] : {std::tuple<int64_t, int64_t, int64_t>{2, 7, 5}, {9, 33, 256}}) {
      SCOPED_TRACE(std::string(fused ? "fused" : "separate") + " batch " + std::to_string(batch) + " len " +
                   std::to_string(len) + " dim " + std::to_string(dim));
      const int64_t rows = batch * len, stride = fused ? 2 * dim : dim;
      const int64_t f_at = fused ? dim : 0;
      std::vector<double> cell_ref(rows * dim), out_ref(rows * dim), dx_ref(rows * stride, 0.0),
          df_ref(rows * stride, 0.0);
      // Inputs drawn again while a cell lies within 1e-5 of relu's kink: there the f32 cell and
      // the double one may fall on either side of 0, and the gradient through relu(c) is then
      // dout on one side and 0 on the other: rare (0 of 150 random seeds), but XF_TEST_SEED=3497822479
      // put the f32 gradients 5% of the largest off.
      Floats x, f;
      std::vector<double> xd, fd;
      do {
        x = uniform(rows * stride, -2.0f, 2.0f);
        f = fused ? x : uniform(rows * stride, -2.0f, 2.0f);
        xd = to_double(x);
        fd = to_double(f);
        cpu::ssru_scan_forward<double>(xd.data(), fd.data() + f_at, stride, batch, len, dim, cell_ref.data(),
                                       out_ref.data(), 1);
      } while (std::any_of(cell_ref.begin(), cell_ref.end(), [](double c) { return std::fabs(c) < 1e-5; }));
      const Floats dout = uniform(rows * dim, -1.0f, 1.0f);
      cpu::ssru_scan_backward<double>(to_double(dout).data(), xd.data(), fd.data() + f_at, stride, cell_ref.data(),
                                      batch, len, dim, dx_ref.data(), df_ref.data(), stride, 1);
      // Device views: f's buffer is x's when fused, so the kernel reads it at x.data() + dim.
      Floats f_view(f.begin() + f_at, f.end());
      f_view.resize(f.size(), 0.0f);
      Floats cell(rows * dim, std::nanf("")), out(rows * dim, std::nanf(""));
      device().ssru_scan_forward(x, f_view, stride, batch, len, dim, cell, out);
      expect_close_to_largest(cell, cell_ref, tolerance());
      expect_close_to_largest(out, out_ref, tolerance());
      Floats dx(rows * stride, 0.0f), df(rows * stride, 0.0f);
      device().ssru_scan_backward(dout, x, f_view, stride, cell, batch, len, dim, dx, df, stride);
      // Only the views' positions are written; the rest stays 0 in both.
      expect_close_to_largest(dx, dx_ref, 1e-4);
      expect_close_to_largest(df, df_ref, 1e-4);
    }
}

XF_KERNEL_TEST_DEVICES(SsruScan, devices_with(Feature::f32_only_ops));

}  // namespace
}  // namespace xf::test
