#pragma once
// Finite-difference helpers for the trainer's gradient tests (double precision throughout).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace xf::trainer::testing {

inline std::vector<double> random_values(std::mt19937_64& rng, size_t n, double low = -1.0,
                                         double high = 1.0) {
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// Central difference of loss() with respect to x[i].
inline double numeric_derivative(const std::function<double()>& loss, double* x, size_t i,
                                 double step = 1e-5) {
  const double saved = x[i];
  x[i] = saved + step;
  const double plus = loss();
  x[i] = saved - step;
  const double minus = loss();
  x[i] = saved;
  return (plus - minus) / (2 * step);
}

// Compares analytic[i] with the central difference of loss() for every i in `indices` (all of
// [0, n) when empty). The tolerance is relative to max(1, |numeric|).
inline void expect_gradient(const std::function<double()>& loss, double* x, size_t n,
                            const double* analytic, const std::string& what,
                            double tolerance = 1e-6, std::vector<size_t> indices = {}) {
  if (indices.empty())
    for (size_t i = 0; i < n; ++i) indices.push_back(i);
  int failures = 0;
  for (size_t i : indices) {
    const double numeric = numeric_derivative(loss, x, i);
    const double error = std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric));
    if (error > tolerance && ++failures <= 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", numeric "
                    << numeric;
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << indices.size()
                         << " derivatives disagree";
}

// sum_i weights[i] * values[i]: a scalar loss whose gradient with respect to values is weights.
inline double weighted_sum(const std::vector<double>& weights, const double* values) {
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) sum += weights[i] * values[i];
  return sum;
}

}  // namespace xf::trainer::testing
