// Marian's SSRU cell, step after step, against a double-precision reference: the state carried
// in place between steps, a first step that ignores whatever the state held, rows that keep
// their state at other rows (the runtime's compacted steps), and gates saturated both ways.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernel_device.h"
#include "xf/kernels/recurrent.h"

namespace xf::test {
namespace {

using Recurrent = KernelTest;

TEST_P(Recurrent, SsruStepsMatchADoubleReference) {
  const int64_t state_count = 9, dim = 37, steps = 4;
  for (const bool mapped : {false, true}) {
    SCOPED_TRACE(mapped ? "state rows mapped" : "state row = row");
    // Mapped: 5 rows whose states are rows 7, 0, 3, 8, 5 of 9; the others must stay as they were.
    const Ints state_rows = mapped ? Ints{7, 0, 3, 8, 5} : Ints{};
    const int64_t rows = mapped ? 5 : state_count;
    Floats cell = uniform(state_count * dim, -5.0f, 5.0f);  // garbage before the first step
    const Floats untouched = cell;
    std::vector<double> reference(state_count * dim, 0.0);
    for (int64_t step = 0; step < steps; ++step) {
      Floats in = uniform(rows * 2 * dim, -3.0f, 3.0f);
      if (step == 1) {
        in[dim] = -100.0f;     // forget gate closed: exp(100) overflows, s must be 0, not NaN
        in[dim + 1] = 100.0f;  // open: the state is kept
      }
      std::vector<double> expected(rows * dim);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t state_row = mapped ? state_rows[r] : r;
        for (int64_t j = 0; j < dim; ++j) {
          const double x = in[r * 2 * dim + j], f = in[r * 2 * dim + dim + j];
          const double s = 1.0 / (1.0 + std::exp(-f));
          double& c = reference[state_row * dim + j];
          c = s * (step == 0 ? 0.0 : c) + (1.0 - s) * x;
          expected[r * dim + j] = std::max(0.0, c);
        }
      }
      const Floats out = device().ssru_step(in, cell, state_rows, step == 0, rows, dim);
      SCOPED_TRACE("step " + std::to_string(step));
      expect_close(out, expected, 1.0, tolerance());
      std::vector<double> expected_cell(state_count * dim);
      for (int64_t i = 0; i < state_count * dim; ++i) expected_cell[i] = reference[i];
      if (mapped)  // the states no row reads keep their values
        for (const int64_t unused : {1, 2, 4, 6})
          for (int64_t j = 0; j < dim; ++j) expected_cell[unused * dim + j] = untouched[unused * dim + j];
      expect_close(cell, expected_cell, 1.0, tolerance());
    }
  }
}

XF_KERNEL_TEST_DEVICES(Recurrent, all_devices());

}  // namespace
}  // namespace xf::test
