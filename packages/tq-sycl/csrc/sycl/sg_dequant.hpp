// Sub-group-cooperative dequantisation of one cached token, shared by the scalar and jm
// kernels (both fill an SLM tile with it; ESIMD gathers code words in registers instead).
// Every lane of the sub-group works on the token: lane l owns coordinates l + 16 * c, and
// the token's norm-correction sum is a sub-group reduction (no lane-0 fills).
#pragma once

#include <sycl/sycl.hpp>

#include <cstdint>

#include "sycl_common.hpp"
#include "tq/dequant.hpp"
#include "tq/schedule.hpp"

namespace tq::sycl_impl {

// Token `pos` of request `req` and kv head `head`: calls put(coord, key, value) for every
// coordinate this lane owns, the key in the rotated domain with its norm correction
// applied. A masked token (`present` false, or its block id outside the cache) gets zeros,
// not garbage: its weight is 0 and 0 * NaN is NaN. Returns whether the token was read.
// Uniform over the sub-group: every lane must call it with the same token.
template <int D, typename Put>
bool dequant_token(const sycl::sub_group& sg, const AttentionParams& p, int32_t req, int32_t head, int32_t pos,
                   bool present, Put&& put) {
  constexpr int SG = kSubGroup;
  constexpr int CPL = D / SG;  // coordinates per lane
  const int lane = static_cast<int>(sg.get_local_linear_id());
  const int64_t blk = present ? block_of(p, req, pos) : -1;
  if (blk < 0) {
    for (int c = 0; c < CPL; ++c) put(lane + SG * c, 0.f, 0.f);
    return false;
  }
  const BlockLayout& lay = p.layout;
  const uint8_t* region = head_region(p.cache, p.cache_block_stride, blk, head, lay);
  const int32_t off = pos % lay.block_size;
  const uint8_t* krow = key_row(region, off, lay);
  float kv[CPL];
  float sumsq = 0.f;
  for (int c = 0; c < CPL; ++c) {
    kv[c] = key_coord_raw(krow, lane + SG * c, p.preset, p.centroids);
    sumsq += kv[c] * kv[c];
  }
  float mul = 1.f;
  if (!p.preset.key_fp8) {
    sumsq = sycl::reduce_over_group(sg, sumsq, sycl::plus<float>());
    mul = key_row_multiplier(key_norm(region, off, lay), sumsq, p.preset.norm_correction != 0);
  }
  const uint8_t* vrow = value_row(region, off, lay);
  const float vscale = value_scale(region, off, lay);
  const float vzero = value_zero(region, off, lay);
  for (int c = 0; c < CPL; ++c) {
    const int idx = lane + SG * c;
    put(idx, kv[c] * mul, value_coord(vrow, idx, p.preset.value_bits, vscale, vzero));
  }
  return true;
}

}  // namespace tq::sycl_impl
