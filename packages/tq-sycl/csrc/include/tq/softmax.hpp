// Online softmax in base 2 and the log-sum-exp merge of split-KV partials.
//
// Scores arrive already multiplied by scale * log2(e) (folded into the rotated query),
// so exp2 replaces exp. A row's state is (m, l, acc): running max, running sum of
// exp2(s - m), and the unnormalised output sum of exp2(s - m) * v.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "tq/numeric.hpp"

namespace tq {

constexpr float kLog2e = 1.4426950408889634f;

inline float neg_inf() { return -std::numeric_limits<float>::infinity(); }

// The max to subtract before exp2. A row that has seen only masked scores keeps
// m = -inf; subtracting 0 instead makes every weight exp2(-inf) = 0 rather than the
// NaN of (-inf) - (-inf).
inline float safe_max(float m) { return m == neg_inf() ? 0.f : m; }

// Folds a tile's max into the running max; returns the factor that rescales the old
// l and acc (0 when the row had nothing yet, 1 when the max did not move).
inline float online_update_max(float* m, float tile_max) {
  const float m_new = std::fmax(*m, tile_max);
  const float alpha = std::exp2(*m - safe_max(m_new));
  *m = m_new;
  return alpha;
}

inline float softmax_weight(float s, float m) { return std::exp2(s - safe_max(m)); }

// Log-sum-exp merge of split partials: out = sum_s w_s * acc_s with
// w_s = exp2(m_s - M) / L and L = sum_s l_s * exp2(m_s - M). Splits with l_s == 0
// (entirely masked for this row) contribute nothing; a row with no visible token gets
// w = 0 everywhere (output 0, never NaN). m/l of split s sit at m[s * stride].
//
// Non-finite queries: the merge writes quiet_nan() to every element of a row whose query
// has a NaN or ±inf element (tq_core's result), whatever its partials hold. The stores
// write only finite numbers, so with a finite query a row is finite and depends on no
// other row's query.
//
// NaN from the cache (corrupted bytes): a NaN score or value makes l or acc NaN. Such a
// split is never taken for empty: its weight is NaN (l NaN), and a split with l > 0 is
// read even where its weight underflows to 0, so the NaN reaches the row (tq_core's
// result: a NaN read by a row is never turned into a plausible number).
struct MergeScale {
  float max;
  float inv_total;
};

inline MergeScale lse_merge_scale(const float* m, const float* l, int64_t stride, int32_t n) {
  float mx = neg_inf();
  for (int32_t s = 0; s < n; ++s)
    if (l[s * stride] > 0.f) mx = std::fmax(mx, m[s * stride]);
  float total = 0.f;
  for (int32_t s = 0; s < n; ++s)
    if (l[s * stride] > 0.f) total += l[s * stride] * std::exp2(m[s * stride] - mx);
  return MergeScale{mx, total > 0.f ? 1.f / total : 0.f};
}

inline float lse_merge_weight(const MergeScale& ms, float m_s, float l_s) {
  if (is_nan(l_s) || is_nan(m_s)) return quiet_nan();
  return l_s > 0.f ? std::exp2(m_s - ms.max) * ms.inv_total : 0.f;
}

// Whether the merge reads split s's partial output: it saw a position (l > 0) or its sum
// is NaN. A split with l == 0 saw nothing and may have left its partial unwritten.
inline bool split_contributes(float l_s) { return l_s > 0.f || is_nan(l_s); }

}  // namespace tq
