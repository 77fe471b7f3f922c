// Scalar number formats used by the cache and the query/output tensors.
//
// Everything here is plain integer/float arithmetic so that the same functions run in
// host C++ and inside SYCL kernels; nothing depends on a compiler's half or fp8 type.
#pragma once

#include <cstdint>
#include <cstring>

namespace tq {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// False for ±inf and NaN. A test of the exponent bits, so it still holds where the
// compiler may assume finite arithmetic (fast-math defaults of SYCL compilers).
inline bool is_finite(float f) { return (float_to_bits(f) & 0x7F800000u) != 0x7F800000u; }

inline float quiet_nan() { return bits_to_float(0x7FC00000u); }

// True for NaN only; a test of the bits, like is_finite.
inline bool is_nan(float f) { return (float_to_bits(f) & 0x7FFFFFFFu) > 0x7F800000u; }

// IEEE binary16 -> binary32, exact (every half is a float).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0) {
    // zero or subnormal: man * 2^-24 is exact in float
    const float f = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  if (exp == 31) return bits_to_float(sign | 0x7F800000u | (man << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round-to-nearest-even on an integer: keep q, drop `rem` of a 2^shift unit.
inline uint32_t round_half_even(uint32_t q, uint32_t rem, uint32_t half) {
  return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}

// binary32 -> binary16 with round-to-nearest-even, as torch's .to(float16) does.
inline uint16_t float_to_half(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
  // 65520 and above round to infinity (65504 is the largest half)
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  const uint32_t e = ax >> 23;
  if (e < 113) {
    // result is a half subnormal: count units of 2^-24
    const uint32_t m = (ax & 0x7FFFFFu) | (e ? 0x800000u : 0u);
    const uint32_t shift = 126u - e;  // >= 14
    if (shift > 24) return static_cast<uint16_t>(sign);
    const uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    return static_cast<uint16_t>(sign | round_half_even(q, rem, 1u << (shift - 1)));
  }
  const uint32_t mant = ax & 0x7FFFFFu;
  const uint32_t q = ((e - 112u) << 10) | (mant >> 13);
  // a carry out of the mantissa correctly bumps the exponent
  return static_cast<uint16_t>(sign | round_half_even(q, mant & 0x1FFFu, 0x1000u));
}

inline float bf16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t x = float_to_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// float8 e4m3fn (bias 7, no infinities, S.1111.111 is NaN) -> binary32, exact.
inline float fp8_e4m3fn_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xFu;
  const uint32_t man = b & 0x7u;
  if (exp == 15 && man == 7) return bits_to_float(sign | 0x7FC00000u);
  if (exp == 0) {
    const float f = static_cast<float>(man) * 0.001953125f;  // man * 2^-9
    return sign ? -f : f;
  }
  return bits_to_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// Little-endian 16-bit load from a byte pointer of any alignment.
inline uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}

// Element dtypes of query / output tensors (codes shared with the Python side).
enum DType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline float load_element(const void* base, int64_t index, int32_t dtype) {
  if (dtype == kFloat32) return static_cast<const float*>(base)[index];
  const uint16_t bits = static_cast<const uint16_t*>(base)[index];
  return dtype == kFloat16 ? half_to_float(bits) : bf16_to_float(bits);
}

// True when elements base[index .. index + n) of a query / output tensor are all finite.
inline bool row_is_finite(const void* base, int64_t index, int32_t n, int32_t dtype) {
  bool finite = true;
  for (int32_t c = 0; c < n; ++c) finite = finite && is_finite(load_element(base, index + c, dtype));
  return finite;
}

inline void store_element(void* base, int64_t index, int32_t dtype, float v) {
  if (dtype == kFloat32) {
    static_cast<float*>(base)[index] = v;
  } else {
    static_cast<uint16_t*>(base)[index] = dtype == kFloat16 ? float_to_half(v) : float_to_bf16(v);
  }
}

}  // namespace tq
