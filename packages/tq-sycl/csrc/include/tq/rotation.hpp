// The key rotation: orthonormal Sylvester Walsh-Hadamard transform, H = H^T = H^-1.
#pragma once

#include <cmath>
#include <cstdint>

namespace tq {

// In place on x[0..d), d a power of two: x <- mul * H x with H orthonormal. Stage h pairs
// (j, j + h) inside blocks of 2h, the order tq_core.fwht uses. mul / sqrt(d) multiplies
// each element *before* the butterflies sum d of them, so a finite x cannot overflow on
// the way (mul = scale * log2(e) keeps scale finite in float32; docs/overview.md,
// "Non-finite inputs").
inline void fwht_inplace(float* x, int32_t d, float mul = 1.f) {
  const float s = mul / std::sqrt(static_cast<float>(d));
  for (int32_t j = 0; j < d; ++j) x[j] *= s;
  for (int32_t h = 1; h < d; h *= 2) {
    for (int32_t base = 0; base < d; base += 2 * h) {
      for (int32_t j = base; j < base + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

}  // namespace tq
