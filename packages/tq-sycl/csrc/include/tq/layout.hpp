// Presets and tq's in-block layout (mirrors tq_core.layout; the host tests compare them).
//
// Per block, per kv head, each field of all the block's tokens is contiguous and starts
// 16-byte aligned; head h's region starts at byte h * block_size * slot_size_aligned.
#pragma once

#include <cstdint>

namespace tq {

struct Preset {
  int32_t key_fp8;          // 1: raw key as float8 e4m3fn, no rotation, no norm
  int32_t key_bits;         // Lloyd-Max code bits (8 for fp8)
  int32_t value_bits;       // uniform value code bits
  int32_t norm_correction;  // rescale the centroid vector to unit length at decode
};

struct BlockLayout {
  int32_t head_dim;
  int32_t block_size;
  int32_t num_kv_heads;
  int32_t slot_size_aligned;
  int32_t key_code_bytes;    // per token
  int32_t value_code_bytes;  // per token
  int64_t key_offset;        // byte offsets inside one head region
  int64_t norm_offset;       // -1 for fp8 keys
  int64_t value_offset;
  int64_t scale_offset;
  int64_t zero_offset;
  int64_t used_bytes;

  int64_t head_stride() const { return static_cast<int64_t>(block_size) * slot_size_aligned; }
  int64_t block_bytes() const { return head_stride() * num_kv_heads; }
};

inline int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }

// Fills *out and returns true, or returns false when the aligned fields do not fit the
// block (tq_core raises ShapeError in that case; callers validate before launching).
inline bool make_block_layout(const Preset& p, int32_t head_dim, int32_t block_size, int32_t num_kv_heads,
                              BlockLayout* out) {
  const bool has_norm = p.key_fp8 == 0;
  const int32_t kcb = (head_dim * p.key_bits + 7) / 8;
  const int32_t vcb = (head_dim * p.value_bits + 7) / 8;
  const int32_t slot = kcb + (has_norm ? 2 : 0) + vcb + 4;
  const int64_t b = block_size;
  BlockLayout l{};
  l.head_dim = head_dim;
  l.block_size = block_size;
  l.num_kv_heads = num_kv_heads;
  l.slot_size_aligned = slot + slot % 2;
  l.key_code_bytes = kcb;
  l.value_code_bytes = vcb;
  l.key_offset = 0;
  int64_t end = b * kcb;
  l.norm_offset = -1;
  if (has_norm) {
    l.norm_offset = align16(end);
    end = l.norm_offset + 2 * b;
  }
  l.value_offset = align16(end);
  l.scale_offset = align16(l.value_offset + b * vcb);
  l.zero_offset = align16(l.scale_offset + 2 * b);
  l.used_bytes = l.zero_offset + 2 * b;
  if (l.used_bytes > b * l.slot_size_aligned) return false;
  *out = l;
  return true;
}

// Start of (block, kv head)'s region. int64 math: caches pass 2^31 bytes easily.
inline const uint8_t* head_region(const uint8_t* cache, int64_t block_stride, int64_t block, int32_t head,
                                  const BlockLayout& l) {
  return cache + block * block_stride + static_cast<int64_t>(head) * l.head_stride();
}

}  // namespace tq
