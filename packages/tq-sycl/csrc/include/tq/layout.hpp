// Presets and the addressing of tq's in-block layout.
//
// tq-core computes every offset and width (tq_core.layout.KernelFields); the Python side
// copies them into the argument dict and params_from_dict.hpp into these structs. Nothing
// here derives a layout. The addressing rule, the same for every field: entry t of a field
// of kv head h in block b starts at byte
//
//   b * block_stride + h * head_stride + <field>_offset + t * <field>_width
//
// head_region() is the first two terms, field_entry() the last two.
#pragma once

#include <cstdint>

namespace tq {

struct Preset {
  int32_t key_fp8;          // 1: raw key as float8 e4m3fn, no rotation, no norm
  int32_t key_bits;         // Lloyd-Max code bits (8 for fp8)
  int32_t value_bits;       // uniform value code bits (Lloyd-Max value code bits if calibrated)
  int32_t norm_correction;  // rescale the centroid vector to unit length at decode
  int32_t calibrated;       // 1: a calibrated format (tq_core.Calibration): Lloyd-Max values
                            // with an fp16 norm and no zero point, coded against the layer's
                            // calibration (docs/format.md, "Calibrated formats")
};

// The fields of one kv head's region of a block (tq_core.layout.KernelFields).
struct BlockLayout {
  int32_t head_dim;
  int32_t block_size;
  int64_t head_stride;   // bytes between kv heads of one block
  int64_t key_offset;    // byte offsets inside one head region
  int32_t key_width;     // key code bytes per token (head_dim for fp8 keys)
  int64_t norm_offset;   // fp16 norm per token; -1 for fp8 keys
  int64_t value_offset;
  int32_t value_width;   // value code bytes per token
  int64_t scale_offset;  // fp16 value scale per token
  int64_t zero_offset;   // fp16 value zero per token; -1 for calibrated formats
};

// Width in bytes of the fp16 per-token fields (norm, scale, zero).
constexpr int32_t kHalfWidth = 2;

// Start of (block, kv head)'s region. int64 math: caches pass 2^31 bytes easily.
inline const uint8_t* head_region(const uint8_t* cache, int64_t block_stride, int64_t block, int32_t head,
                                  const BlockLayout& l) {
  return cache + block * block_stride + static_cast<int64_t>(head) * l.head_stride;
}

// Entry t of a field inside a head region: region + offset + t * width. `region` is a
// pointer or a byte offset from the cache (the ESIMD kernel gathers by offset).
template <typename Base>
inline Base field_entry(Base region, int64_t offset, int64_t width, int32_t t) {
  return region + (offset + static_cast<int64_t>(t) * width);
}

}  // namespace tq
