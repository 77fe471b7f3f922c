#include "host_attention.hpp"

#include <algorithm>
#include <vector>

#include "tq/dequant.hpp"
#include "tq/numeric.hpp"
#include "tq/rotation.hpp"
#include "tq/schedule.hpp"
#include "tq/softmax.hpp"

namespace tq::host {

void rotate_queries(const AttentionParams& p) {
  const int32_t d = p.layout.head_dim;
  const float mul = p.scale * kLog2e;
  for (int64_t tok = 0; tok < p.num_q_tokens; ++tok) {
    for (int32_t h = 0; h < p.num_q_heads; ++h) {
      float* dst = p.q_rot + (tok * p.num_q_heads + h) * d;
      const int64_t src = tok * p.q_stride_token + h * p.q_stride_head;
      for (int32_t c = 0; c < d; ++c) dst[c] = load_element(p.query, src + c, p.query_dtype);
      if (p.preset.key_fp8) {
        for (int32_t c = 0; c < d; ++c) dst[c] *= mul;
      } else if (p.preset.calibrated) {
        // scores against the coded keys a * (k - mu_p): the query divided by the key gain,
        // and position 0's offset (q * mul) . (mu0 - mu), in the scores' units
        const int32_t kv = h / group_size(p);
        const float* gain = calibration_vector(p, 0, kv);
        const float* mu = calibration_vector(p, 1, kv);
        const float* mu0 = calibration_vector(p, 2, kv);
        float first = 0.f;
        for (int32_t c = 0; c < d; ++c) {
          first += dst[c] * mul * (mu0[c] - mu[c]);
          dst[c] /= gain[c];
        }
        p.q_first[tok * p.num_q_heads + h] = first;
        fwht_inplace(dst, d, mul);
      } else {
        fwht_inplace(dst, d, mul);  // scaled before it sums: cannot overflow
      }
    }
  }
}

void run_program(const AttentionParams& p, const Program& prog) {
  const auto& [tile, head, split, t, g, rows, begin, end] = prog;
  const int32_t d = p.layout.head_dim;

  const bool cal = p.preset.calibrated != 0;
  std::vector<float> m(rows, neg_inf());
  std::vector<float> l(rows, 0.f);
  std::vector<float> p0(rows, 0.f);  // calibrated formats: the probability of position 0
  std::vector<float> acc(static_cast<size_t>(rows) * d, 0.f);
  // one dequantised K/V tile, shared by every row of the program
  std::vector<float> k(static_cast<size_t>(kTileTokens) * d);
  std::vector<float> v(static_cast<size_t>(kTileTokens) * d);
  bool valid[kTileTokens];
  float s[kTileTokens];

  for (int32_t pos0 = begin; pos0 < end; pos0 += kTileTokens) {
    const int32_t n = std::min(kTileTokens, end - pos0);
    for (int32_t j = 0; j < n; ++j) {
      const int32_t pos = pos0 + j;
      const int64_t blk = block_of(p, t.req, pos);
      valid[j] = blk >= 0;
      if (!valid[j]) continue;
      const uint8_t* region = head_region(p.cache, p.cache_block_stride, blk, head, p.layout);
      const int32_t off = pos % p.layout.block_size;
      dequant_key(region, off, p.layout, p.preset, p.centroids, &k[static_cast<size_t>(j) * d]);
      if (cal)
        dequant_lloyd_max_value(region, off, p.layout, p.preset, p.value_centroids, &v[static_cast<size_t>(j) * d]);
      else
        dequant_value(region, off, p.layout, p.preset, &v[static_cast<size_t>(j) * d]);
    }
    for (int32_t rr = 0; rr < rows; ++rr) {
      const int32_t row = t.row_begin + rr;
      const int32_t max_pos = row_max_pos(t, row, g);
      const int64_t qrow = query_token(t, row, g) * p.num_q_heads + query_head(head, row, g);
      const float* q = p.q_rot + qrow * d;
      float tile_max = neg_inf();
      for (int32_t j = 0; j < n; ++j) {
        s[j] = neg_inf();
        if (!valid[j] || pos0 + j > max_pos) continue;
        float dot = 0.f;
        const float* kj = &k[static_cast<size_t>(j) * d];
        for (int32_t c = 0; c < d; ++c) dot += q[c] * kj[c];
        if (cal && pos0 + j == 0) dot += p.q_first[qrow];
        s[j] = dot;
        tile_max = std::max(tile_max, dot);
      }
      const float alpha = online_update_max(&m[rr], tile_max);
      float* a = &acc[static_cast<size_t>(rr) * d];
      l[rr] *= alpha;
      p0[rr] *= alpha;
      for (int32_t c = 0; c < d; ++c) a[c] *= alpha;
      for (int32_t j = 0; j < n; ++j) {
        // masked positions only: a visible weight that underflows to 0 still multiplies its
        // value, so that a NaN value read from the cache reaches the row (0 x NaN = NaN)
        if (s[j] == neg_inf()) continue;
        const float w = softmax_weight(s[j], m[rr]);
        l[rr] += w;
        if (cal && pos0 + j == 0) p0[rr] += w;
        const float* vj = &v[static_cast<size_t>(j) * d];
        for (int32_t c = 0; c < d; ++c) a[c] += w * vj[c];
      }
    }
  }
  for (int32_t rr = 0; rr < rows; ++rr) {
    const int64_t w = ws_row_index(p, tile, head, split, rr);
    p.ws_m[w] = m[rr];
    p.ws_l[w] = l[rr];
    if (cal) p.ws_p0[w] = p0[rr];
    std::copy(acc.begin() + static_cast<int64_t>(rr) * d, acc.begin() + static_cast<int64_t>(rr + 1) * d,
              p.ws_acc + w * d);
  }
}

void merge_tile(const AttentionParams& p, int64_t tile, int32_t head) {
  TileRows t;
  if (!locate_tile(p, tile, &t)) return;
  const int32_t d = p.layout.head_dim;
  const int32_t g = group_size(p);
  const int32_t n = p.num_splits;
  std::vector<float> w(n);
  std::vector<float> o_row(d);
  for (int32_t rr = 0; rr < t.row_end - t.row_begin; ++rr) {
    const int64_t first = ws_row_index(p, tile, head, 0, rr);
    const MergeScale ms = lse_merge_scale(p.ws_m + first, p.ws_l + first, p.rows_per_tile, n);
    for (int32_t s = 0; s < n; ++s) {
      const int64_t i = ws_row_index(p, tile, head, s, rr);
      w[s] = lse_merge_weight(ms, p.ws_m[i], p.ws_l[i]);
    }
    const int32_t row = t.row_begin + rr;
    const int64_t tok = query_token(t, row, g);
    const int32_t qh = query_head(head, row, g);
    const int64_t dst = tok * p.o_stride_token + qh * p.o_stride_head;
    // a query row with a NaN or ±inf element gives a NaN row (see softmax.hpp)
    const bool finite = row_is_finite(p.query, tok * p.q_stride_token + qh * p.q_stride_head, d, p.query_dtype);
    float p_first = 0.f;  // calibrated formats: the merged probability of position 0
    for (int32_t c = 0; c < d; ++c) {
      float o = 0.f;
      for (int32_t s = 0; s < n; ++s)
        if (split_contributes(p.ws_l[ws_row_index(p, tile, head, s, rr)]))
          o += w[s] * p.ws_acc[ws_row_index(p, tile, head, s, rr) * d + c];
      o_row[c] = o;
    }
    if (p.preset.calibrated) {
      for (int32_t s = 0; s < n; ++s) {
        const int64_t i = ws_row_index(p, tile, head, s, rr);
        if (split_contributes(p.ws_l[i])) p_first += w[s] * p.ws_p0[i];
      }
      // the coded values were read rotated: rotate back once, then undo the value gain and
      // add the offsets every value was coded against (position 0's with its probability)
      fwht_inplace(o_row.data(), d);
      const float* gain = calibration_vector(p, 3, head);
      const float* nu = calibration_vector(p, 4, head);
      const float* nu0 = calibration_vector(p, 5, head);
      for (int32_t c = 0; c < d; ++c) o_row[c] = o_row[c] / gain[c] + nu[c] + p_first * (nu0[c] - nu[c]);
    }
    for (int32_t c = 0; c < d; ++c) store_element(p.out, dst + c, p.out_dtype, finite ? o_row[c] : quiet_nan());
  }
}

void attention(AttentionParams p) {
  const int32_t d = p.layout.head_dim;
  std::vector<float> q_rot(static_cast<size_t>(p.num_q_tokens) * p.num_q_heads * d);
  p.q_rot = q_rot.data();
  std::vector<float> q_first(p.preset.calibrated ? static_cast<size_t>(p.num_q_tokens) * p.num_q_heads : 0);
  p.q_first = q_first.data();
  rotate_queries(p);
  const int64_t tiles = num_row_tiles(p);
  const int64_t rows = tiles * p.num_kv_heads * p.num_splits * p.rows_per_tile;
  std::vector<float> ws_acc(static_cast<size_t>(rows) * d);
  std::vector<float> ws_m(static_cast<size_t>(rows));
  std::vector<float> ws_l(static_cast<size_t>(rows));
  p.ws_acc = ws_acc.data();
  p.ws_m = ws_m.data();
  p.ws_l = ws_l.data();
  std::vector<float> ws_p0(p.preset.calibrated ? static_cast<size_t>(rows) : 0);
  p.ws_p0 = ws_p0.data();
  for (int64_t i = 0; i < num_programs(p); ++i) {
    Program prog;
    if (locate_program(p, i, &prog)) run_program(p, prog);
  }
  for (int64_t tile = 0; tile < tiles; ++tile)
    for (int32_t h = 0; h < p.num_kv_heads; ++h) merge_tile(p, tile, h);
}

}  // namespace tq::host
