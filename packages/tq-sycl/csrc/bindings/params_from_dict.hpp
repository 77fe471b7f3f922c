// Builds tq::AttentionParams from the dict the Python side sends (tq_sycl.kernel_args).
// The same dict shape serves the host module, the in-process SYCL module and the
// bridge child, so one validated description of a call exists. The layout fields are
// tq-core's (tq_core.layout.KernelFields), copied, never derived here.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "tq/head_dim.hpp"
#include "tq/numeric.hpp"
#include "tq/params.hpp"

namespace tq::bindings {

namespace py = pybind11;

template <typename T>
T get(const py::dict& a, const char* key) {
  if (!a.contains(key)) throw py::key_error(std::string("attention args: missing '") + key + "'");
  return a[key].cast<T>();
}

template <typename T>
T get_or(const py::dict& a, const char* key, T fallback) {
  return a.contains(key) && !a[key].is_none() ? a[key].cast<T>() : fallback;
}

template <typename P>
P* ptr(const py::dict& a, const char* key) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(get<uint64_t>(a, key)));
}

template <typename P>
P* ptr_or_null(const py::dict& a, const char* key) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(get_or<uint64_t>(a, key, 0)));
}

inline Preset preset_from_dict(const py::dict& a) {
  Preset pr{};
  pr.key_fp8 = get<int32_t>(a, "key_fp8");
  pr.key_bits = get<int32_t>(a, "key_bits");
  pr.value_bits = get<int32_t>(a, "value_bits");
  pr.norm_correction = get<int32_t>(a, "norm_correction");
  if (pr.key_bits < 1 || pr.key_bits > 8 || pr.value_bits < 1 || pr.value_bits > 8)
    throw py::value_error("attention args: key_bits/value_bits must be 1..8");
  return pr;
}

// The field offsets and widths tq-core computed (tq_core.layout.KernelFields), checked
// only so that a malformed dict cannot address memory outside a head region.
inline BlockLayout layout_from_dict(const py::dict& a, const Preset& pr) {
  BlockLayout l{};
  l.head_dim = get<int32_t>(a, "head_dim");
  l.block_size = get<int32_t>(a, "block_size");
  l.head_stride = get<int64_t>(a, "head_stride");
  l.key_offset = get<int64_t>(a, "key_offset");
  l.key_width = get<int32_t>(a, "key_width");
  l.norm_offset = get<int64_t>(a, "norm_offset");
  l.value_offset = get<int64_t>(a, "value_offset");
  l.value_width = get<int32_t>(a, "value_width");
  l.scale_offset = get<int64_t>(a, "scale_offset");
  l.zero_offset = get<int64_t>(a, "zero_offset");
  dispatch_head_dim(l.head_dim, "attention args", [](auto) {});
  if (l.block_size < 1) throw py::value_error("attention args: block_size must be >= 1");
  if ((pr.key_fp8 != 0) != (l.norm_offset < 0))
    throw py::value_error("attention args: norm_offset must be -1 exactly for fp8 keys");
  const int64_t key_bytes = (static_cast<int64_t>(l.head_dim) * pr.key_bits + 7) / 8;
  const int64_t value_bytes = (static_cast<int64_t>(l.head_dim) * pr.value_bits + 7) / 8;
  if (l.key_width < key_bytes || l.value_width < value_bytes)
    throw py::value_error("attention args: key_width/value_width are smaller than head_dim codes");
  const int64_t b = l.block_size;
  const auto inside = [&](int64_t offset, int64_t width) {
    return offset >= 0 && offset + b * width <= l.head_stride;
  };
  if (!inside(l.key_offset, l.key_width) || (l.norm_offset >= 0 && !inside(l.norm_offset, kHalfWidth)) ||
      !inside(l.value_offset, l.value_width) || !inside(l.scale_offset, kHalfWidth) ||
      !inside(l.zero_offset, kHalfWidth))
    throw py::value_error("attention args: a field's block_size entries pass head_stride");
  return l;
}

inline AttentionParams params_from_dict(const py::dict& a) {
  AttentionParams p{};
  p.query = ptr<const void>(a, "query");
  p.query_dtype = get<int32_t>(a, "query_dtype");
  p.q_stride_token = get<int64_t>(a, "q_stride_token");
  p.q_stride_head = get<int64_t>(a, "q_stride_head");
  p.out = ptr<void>(a, "out");
  p.out_dtype = get<int32_t>(a, "out_dtype");
  p.o_stride_token = get<int64_t>(a, "o_stride_token");
  p.o_stride_head = get<int64_t>(a, "o_stride_head");
  p.cache = ptr<const uint8_t>(a, "cache");
  p.cache_block_stride = get<int64_t>(a, "cache_block_stride");
  p.num_blocks = get<int32_t>(a, "num_blocks");
  p.block_table = ptr<const int32_t>(a, "block_table");
  p.bt_stride = get<int64_t>(a, "bt_stride");
  p.bt_cols = get<int32_t>(a, "bt_cols");
  p.seq_lens = ptr<const int32_t>(a, "seq_lens");
  p.query_start_loc = ptr<const int32_t>(a, "query_start_loc");
  p.num_reqs = get<int32_t>(a, "num_reqs");
  p.num_q_tokens = get<int32_t>(a, "num_q_tokens");
  p.num_q_heads = get<int32_t>(a, "num_q_heads");
  p.num_kv_heads = get<int32_t>(a, "num_kv_heads");
  p.preset = preset_from_dict(a);
  p.layout = layout_from_dict(a, p.preset);
  p.centroids = ptr_or_null<const float>(a, "centroids");
  p.scale = get<float>(a, "scale");
  p.num_splits = get<int32_t>(a, "num_splits");
  p.rows_per_tile = get_or<int32_t>(a, "rows_per_tile", kRowsPerTile);
  p.q_rot = ptr_or_null<float>(a, "q_rot");
  p.ws_acc = ptr_or_null<float>(a, "ws_acc");
  p.ws_m = ptr_or_null<float>(a, "ws_m");
  p.ws_l = ptr_or_null<float>(a, "ws_l");
  for (int32_t dt : {p.query_dtype, p.out_dtype})
    if (dt != kFloat32 && dt != kFloat16 && dt != kBFloat16)
      throw py::value_error("attention args: dtype code must be 0 (f32), 1 (f16) or 2 (bf16)");
  if (p.num_kv_heads < 1 || p.num_q_heads < p.num_kv_heads || p.num_q_heads % p.num_kv_heads != 0)
    throw py::value_error("attention args: num_q_heads must be a positive multiple of num_kv_heads");
  if (p.num_splits < 1 || p.rows_per_tile < 1) throw py::value_error("attention args: num_splits, rows_per_tile >= 1");
  // the float the kernels multiply by (tq_core.checks.check_scale rejects these first)
  if (!is_finite(p.scale) || !(p.scale > 0.f))
    throw py::value_error("attention args: scale must be positive and finite in float32");
  if (!p.preset.key_fp8 && p.centroids == nullptr)
    throw py::value_error("attention args: Lloyd-Max presets need 'centroids'");
  if (p.num_reqs < 0 || p.num_q_tokens < 0 || p.bt_cols < 0 || p.num_blocks < 1)
    throw py::value_error("attention args: negative sizes or an empty cache");
  return p;
}

// What preset_from_dict and layout_from_dict read, under the same keys (the tests hold
// it to the tq_core.layout.KernelFields it was given).
inline py::dict fields_to_dict(const Preset& pr, const BlockLayout& l) {
  py::dict d;
  d["key_fp8"] = pr.key_fp8;
  d["key_bits"] = pr.key_bits;
  d["value_bits"] = pr.value_bits;
  d["norm_correction"] = pr.norm_correction;
  d["head_dim"] = l.head_dim;
  d["block_size"] = l.block_size;
  d["head_stride"] = l.head_stride;
  d["key_offset"] = l.key_offset;
  d["key_width"] = l.key_width;
  d["norm_offset"] = l.norm_offset;
  d["value_offset"] = l.value_offset;
  d["value_width"] = l.value_width;
  d["scale_offset"] = l.scale_offset;
  d["zero_offset"] = l.zero_offset;
  return d;
}

}  // namespace tq::bindings
