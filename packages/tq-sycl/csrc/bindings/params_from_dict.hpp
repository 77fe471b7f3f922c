// Builds tq::AttentionParams from the dict the Python side sends (tq_sycl.kernel_args).
// The same dict shape serves the host module, the in-process SYCL module and the
// bridge child, so one validated description of a call exists. The layout fields are
// tq-core's (tq_core.layout.KernelFields), copied, never derived here.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <type_traits>

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

// The keys of tq_core.layout.KernelFields and the members they fill: f(key, member) for
// each, in this order (a Preset / BlockLayout, const or not). preset_from_dict and
// layout_from_dict read them, fields_to_dict writes them back.
template <typename P, typename F>
void visit_preset_fields(P& pr, F&& f) {
  f("key_fp8", pr.key_fp8);
  f("key_bits", pr.key_bits);
  f("value_bits", pr.value_bits);
  f("norm_correction", pr.norm_correction);
}

template <typename L, typename F>
void visit_layout_fields(L& l, F&& f) {
  f("head_dim", l.head_dim);
  f("block_size", l.block_size);
  f("head_stride", l.head_stride);
  f("key_offset", l.key_offset);
  f("key_width", l.key_width);
  f("norm_offset", l.norm_offset);
  f("value_offset", l.value_offset);
  f("value_width", l.value_width);
  f("scale_offset", l.scale_offset);
  f("zero_offset", l.zero_offset);
}

// A visitor that sets each member to get<its type>(a, key).
inline auto read_from(const py::dict& a) {
  return [&a](const char* key, auto& member) { member = get<std::remove_reference_t<decltype(member)>>(a, key); };
}

// A visitor that stores each member under its key.
inline auto write_to(py::dict& d) {
  return [&d](const char* key, const auto& member) { d[key] = member; };
}

inline Preset preset_from_dict(const py::dict& a) {
  Preset pr{};
  visit_preset_fields(pr, read_from(a));
  // not one of tq-core's KernelFields: the argument dict adds it (kernel_args.prepare)
  pr.calibrated = get_or<int32_t>(a, "calibrated", 0);
  if (pr.key_bits < 1 || pr.key_bits > 8 || pr.value_bits < 1 || pr.value_bits > 8)
    throw py::value_error("attention args: key_bits/value_bits must be 1..8");
  return pr;
}

// The field offsets and widths tq-core computed (tq_core.layout.KernelFields), checked
// only so that a malformed dict cannot address memory outside a head region.
inline BlockLayout layout_from_dict(const py::dict& a, const Preset& pr) {
  BlockLayout l{};
  visit_layout_fields(l, read_from(a));
  dispatch_head_dim(l.head_dim, "attention args", [](auto) {});
  if (l.block_size < 1) throw py::value_error("attention args: block_size must be >= 1");
  if ((pr.key_fp8 != 0) != (l.norm_offset < 0))
    throw py::value_error("attention args: norm_offset must be -1 exactly for fp8 keys");
  if ((pr.calibrated != 0) != (l.zero_offset < 0))
    throw py::value_error("attention args: zero_offset must be -1 exactly for calibrated formats");
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
      (l.zero_offset >= 0 && !inside(l.zero_offset, kHalfWidth)))
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
  p.value_centroids = ptr_or_null<const float>(a, "value_centroids");
  p.calibration = ptr_or_null<const float>(a, "calibration");
  if (p.preset.calibrated != 0 && (p.value_centroids == nullptr || p.calibration == nullptr))
    throw py::value_error("attention args: a calibrated format needs value_centroids and calibration");
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
  visit_preset_fields(pr, write_to(d));
  visit_layout_fields(l, write_to(d));
  return d;
}

}  // namespace tq::bindings
