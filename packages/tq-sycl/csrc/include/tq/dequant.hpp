// Dequantisation of one token's key or value from a head region of tq's layout.
//
// Keys of Lloyd-Max presets come out in the *rotated* domain (norm * c / ||c||): the
// query is rotated once instead, so no kernel ever applies the Hadamard to keys.
#pragma once

#include <cmath>
#include <cstdint>

#include "layout.hpp"
#include "numeric.hpp"

namespace tq {

// Code i of a little-endian bit stream of `bits`-bit codes (bits <= 8). For 4 bits that
// is "low nibble first"; for 3 bits "code i at bit 3*(i%8) of 24-bit group i/8". The
// second byte is only touched when the code straddles it, so the last code of a row
// never reads past the row.
inline uint32_t code_at(const uint8_t* row, int32_t i, int32_t bits) {
  const int32_t bit = i * bits;
  const int32_t byte = bit >> 3;
  const int32_t shift = bit & 7;
  uint32_t v = static_cast<uint32_t>(row[byte]) >> shift;
  if (shift + bits > 8) v |= static_cast<uint32_t>(row[byte + 1]) << (8 - shift);
  return v & ((1u << bits) - 1u);
}

inline const uint8_t* key_row(const uint8_t* region, int32_t t, const BlockLayout& l) {
  return field_entry(region, l.key_offset, l.key_width, t);
}

inline const uint8_t* value_row(const uint8_t* region, int32_t t, const BlockLayout& l) {
  return field_entry(region, l.value_offset, l.value_width, t);
}

inline float key_norm(const uint8_t* region, int32_t t, const BlockLayout& l) {
  return half_to_float(load_u16(field_entry(region, l.norm_offset, kHalfWidth, t)));
}

inline float value_scale(const uint8_t* region, int32_t t, const BlockLayout& l) {
  return half_to_float(load_u16(field_entry(region, l.scale_offset, kHalfWidth, t)));
}

inline float value_zero(const uint8_t* region, int32_t t, const BlockLayout& l) {
  return half_to_float(load_u16(field_entry(region, l.zero_offset, kHalfWidth, t)));
}

// Multiplier turning gathered centroids into the rotated key: norm / ||c|| with norm
// correction, norm without. `sumsq` is sum(c_i^2) over the whole row.
inline float key_row_multiplier(float norm, float sumsq, bool norm_correction) {
  if (!norm_correction) return norm;
  return sumsq > 0.f ? norm / std::sqrt(sumsq) : 0.f;
}

// Key coordinate c of token t before the row multiplier: centroid or fp8 value.
inline float key_coord_raw(const uint8_t* row, int32_t c, const Preset& p, const float* centroids) {
  if (p.key_fp8) return fp8_e4m3fn_to_float(row[c]);
  return centroids[code_at(row, c, p.key_bits)];
}

// Whole key row of token t into k[0..head_dim).
inline void dequant_key(const uint8_t* region, int32_t t, const BlockLayout& l, const Preset& p,
                        const float* centroids, float* k) {
  const uint8_t* row = key_row(region, t, l);
  if (p.key_fp8) {
    for (int32_t c = 0; c < l.head_dim; ++c) k[c] = fp8_e4m3fn_to_float(row[c]);
    return;
  }
  float sumsq = 0.f;
  for (int32_t c = 0; c < l.head_dim; ++c) {
    const float v = centroids[code_at(row, c, p.key_bits)];
    k[c] = v;
    sumsq += v * v;
  }
  const float mul = key_row_multiplier(key_norm(region, t, l), sumsq, p.norm_correction != 0);
  for (int32_t c = 0; c < l.head_dim; ++c) k[c] *= mul;
}

// Value coordinate: zero + code * scale, the order tq_core uses.
inline float value_coord(const uint8_t* row, int32_t c, int32_t bits, float scale, float zero) {
  return zero + static_cast<float>(code_at(row, c, bits)) * scale;
}

// A calibrated format's coded value in the rotated domain: the key rule with the value
// table (its scale field holds norm / ||c|| for Lloyd-Max values and s for tq_k4v4's
// symmetric ones, whose table is the cell centres (2 i - 15) / 16; norm_correction is off,
// so this is scale * table[code]); attention rotates its output back once per row.
inline void dequant_lloyd_max_value(const uint8_t* region, int32_t t, const BlockLayout& l, const Preset& p,
                                    const float* value_centroids, float* v) {
  const uint8_t* row = value_row(region, t, l);
  float sumsq = 0.f;
  for (int32_t c = 0; c < l.head_dim; ++c) {
    const float x = value_centroids[code_at(row, c, p.value_bits)];
    v[c] = x;
    sumsq += x * x;
  }
  const float mul = key_row_multiplier(value_scale(region, t, l), sumsq, p.norm_correction != 0);
  for (int32_t c = 0; c < l.head_dim; ++c) v[c] *= mul;
}

inline void dequant_value(const uint8_t* region, int32_t t, const BlockLayout& l, const Preset& p, float* v) {
  const uint8_t* row = value_row(region, t, l);
  const float scale = value_scale(region, t, l);
  const float zero = value_zero(region, t, l);
  for (int32_t c = 0; c < l.head_dim; ++c) v[c] = value_coord(row, c, p.value_bits, scale, zero);
}

}  // namespace tq
