// The argument block every implementation takes. Plain data: it is copied by value into
// SYCL kernels and filled from a Python dict by the bindings.
#pragma once

#include <cstdint>

#include "layout.hpp"

namespace tq {

// Rows (query token x q head of one GQA group) one program owns; the row tile is the
// unit that shares each dequantised K/V tile.
constexpr int32_t kRowsPerTile = 16;
// Tokens per K/V tile: one per lane of a 16-wide sub-group, DPAS N/K = 16 on Xe2.
constexpr int32_t kTileTokens = 16;
constexpr int32_t kMaxCentroids = 16;

struct AttentionParams {
  // query [num_q_tokens, num_q_heads, head_dim], last dim contiguous; strides in elements
  const void* query;
  int32_t query_dtype;
  int64_t q_stride_token;
  int64_t q_stride_head;
  // out, same shape; rows past query_start_loc[-1] are never written
  void* out;
  int32_t out_dtype;
  int64_t o_stride_token;
  int64_t o_stride_head;
  // paged cache: block b starts at cache + b * cache_block_stride (bytes)
  const uint8_t* cache;
  int64_t cache_block_stride;
  int32_t num_blocks;
  // int32 metadata
  const int32_t* block_table;  // [num_reqs, bt_cols] with row stride bt_stride
  int64_t bt_stride;
  int32_t bt_cols;
  const int32_t* seq_lens;         // [num_reqs]
  const int32_t* query_start_loc;  // [num_reqs + 1]
  int32_t num_reqs;
  int32_t num_q_tokens;
  int32_t num_q_heads;
  int32_t num_kv_heads;
  Preset preset;
  BlockLayout layout;
  const float* centroids;  // Lloyd-Max centroids scaled by 1/sqrt(d); unused for fp8
  // calibrated formats only (null otherwise): the value codebook (as centroids, of
  // value_bits bits) and the layer's calibration, float [6][num_kv_heads][head_dim] in the
  // order key gain, key offset, key first-position offset, value gain, value offset, value
  // first-position offset
  const float* value_centroids;
  const float* calibration;
  float scale;
  int32_t num_splits;
  int32_t rows_per_tile;
  // workspace: rotated, pre-scaled query [num_q_tokens, num_q_heads, head_dim] float
  float* q_rot;
  // calibrated formats: each query row's score offset at position 0 [num_q_tokens, num_q_heads]
  float* q_first;
  // split partials, indexed [tile][kv_head][split][row] (acc also x head_dim)
  float* ws_acc;
  float* ws_m;
  float* ws_l;
  // calibrated formats: each row's unnormalised probability of position 0 (as ws_l)
  float* ws_p0;
};

// Calibration vector `which` (0..5, the order above) of kv head `head`.
inline const float* calibration_vector(const AttentionParams& p, int32_t which, int32_t head) {
  return p.calibration + (static_cast<int64_t>(which) * p.num_kv_heads + head) * p.layout.head_dim;
}

inline int32_t group_size(const AttentionParams& p) { return p.num_q_heads / p.num_kv_heads; }

// Upper bound on row tiles, from shapes alone (no host sync): see tile_start().
inline int64_t num_row_tiles(const AttentionParams& p) {
  return static_cast<int64_t>(p.num_q_tokens) * group_size(p) / p.rows_per_tile + p.num_reqs;
}

inline int64_t ws_row_index(const AttentionParams& p, int64_t tile, int32_t head, int32_t split, int32_t row) {
  return ((tile * p.num_kv_heads + head) * p.num_splits + split) * static_cast<int64_t>(p.rows_per_tile) + row;
}

}  // namespace tq
