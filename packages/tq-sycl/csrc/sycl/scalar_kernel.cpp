// `scalar`: the zero-copy split-KV baseline with sub-group cooperation over head_dim.
//
// What it does differently from the turboquant-xpu project's scalar SYCL kernel (~219 ms at the PoC shape):
//  - split-KV: one work-group per (row tile, kv head, split), merged by merge_splits;
//  - GQA x verify sharing: a K/V tile is dequantised once into SLM and read by all 16
//    rows of the tile (q heads of the group x verify tokens);
//  - no lane-0 fills: every lane of every sub-group dequantises a slice of the tile, and
//    a token's norm-correction sum is a sub-group reduction;
//  - vectorised softmax: lane j holds token j's score, max/sum are sub-group reductions;
//  - zero-copy: reads the packed cache, metadata and query in place (USM pointers of
//    torch-XPU tensors); int64 address math throughout.
#include <sycl/sycl.hpp>

#include "sg_dequant.hpp"
#include "sycl_common.hpp"
#include "tq/schedule.hpp"
#include "tq/softmax.hpp"

namespace tq::sycl_impl {

template <int D>
class ScalarAttentionKernel;

namespace {

constexpr int kSubGroups = 8;                       // sub-groups per work-group
constexpr int kRowsPerSg = kRowsPerTile / kSubGroups;  // 2 rows per sub-group

template <int D>
sycl::event scalar_d(sycl::queue& q, const AttentionParams& p) {
  constexpr int SG = kSubGroup;
  constexpr int T = kTileTokens;
  constexpr int CPL = D / SG;  // coordinates per lane
  constexpr int WG = SG * kSubGroups;
  static_assert(T == SG, "lane j holds token j's score");
  const int64_t groups = num_programs(p);
  if (groups == 0) return sycl::event{};
  require_local_memory(q, 2 * sizeof(float) * T * D + sizeof(int32_t) * T, "scalar");
  return q.submit([&](sycl::handler& h) {
    sycl::local_accessor<float, 1> k_s(sycl::range<1>(T * D), h);
    sycl::local_accessor<float, 1> v_s(sycl::range<1>(T * D), h);
    sycl::local_accessor<int32_t, 1> valid_s(sycl::range<1>(T), h);
    const AttentionParams pp = p;
    h.parallel_for<ScalarAttentionKernel<D>>(
        work_groups(groups, WG), [=](sycl::nd_item<1> it) [[sycl::reqd_sub_group_size(16)]] {
          Program prog;
          // uniform over the work-group, so leaving before any barrier is safe
          if (!locate_program(pp, static_cast<int64_t>(it.get_group(0)), &prog)) return;
          const auto& [tile, head, split, t, g, rows, begin, end] = prog;

          const sycl::sub_group sg = it.get_sub_group();
          const int lane = static_cast<int>(sg.get_local_linear_id());
          const int sgid = static_cast<int>(sg.get_group_linear_id());

          // this sub-group's rows: sgid and sgid + 8; lane owns coordinates lane + 16 * c
          float qv[kRowsPerSg][CPL];
          float acc[kRowsPerSg][CPL];
          float m[kRowsPerSg];
          float l[kRowsPerSg];
          int32_t max_pos[kRowsPerSg];
          bool live[kRowsPerSg];
          for (int i = 0; i < kRowsPerSg; ++i) {
            const int32_t rr = sgid + kSubGroups * i;
            live[i] = rr < rows;
            m[i] = neg_inf();
            l[i] = 0.f;
            max_pos[i] = -1;
            for (int c = 0; c < CPL; ++c) {
              qv[i][c] = 0.f;
              acc[i][c] = 0.f;
            }
            if (!live[i]) continue;
            const int32_t row = t.row_begin + rr;
            max_pos[i] = row_max_pos(t, row, g);
            const float* qrow =
                pp.q_rot + (query_token(t, row, g) * pp.num_q_heads + query_head(head, row, g)) * int64_t{D};
            for (int c = 0; c < CPL; ++c) qv[i][c] = qrow[lane + SG * c];
          }

          for (int32_t pos0 = begin; pos0 < end; pos0 += T) {
            const int32_t n = sycl::min(T, end - pos0);
            // fill: sub-group s dequantises tokens s and s + 8, all 16 lanes at once
            for (int j = sgid; j < T; j += kSubGroups) {
              const bool read = dequant_token<D>(sg, pp, t.req, head, pos0 + j, j < n, [&](int c, float k, float v) {
                k_s[j * D + c] = k;
                v_s[j * D + c] = v;
              });
              if (lane == 0) valid_s[j] = read ? 1 : 0;
            }
            sycl::group_barrier(it.get_group());

            for (int i = 0; i < kRowsPerSg; ++i) {
              if (!live[i]) continue;  // uniform within the sub-group
              float s_mine = neg_inf();
              for (int j = 0; j < T; ++j) {
                float part = 0.f;
                for (int c = 0; c < CPL; ++c) part += qv[i][c] * k_s[j * D + lane + SG * c];
                const float sj = sycl::reduce_over_group(sg, part, sycl::plus<float>());
                if (lane == j) s_mine = sj;
              }
              if (lane >= n || valid_s[lane] == 0 || pos0 + lane > max_pos[i]) s_mine = neg_inf();
              const float tile_max = sycl::reduce_over_group(sg, s_mine, sycl::maximum<float>());
              const float alpha = online_update_max(&m[i], tile_max);
              const float w = softmax_weight(s_mine, m[i]);
              l[i] = l[i] * alpha + sycl::reduce_over_group(sg, w, sycl::plus<float>());
              for (int c = 0; c < CPL; ++c) acc[i][c] *= alpha;
              for (int j = 0; j < n; ++j) {
                const float wj = sycl::select_from_group(sg, w, j);
                // masked positions only (uniform over the sub-group): a visible weight that
                // underflows to 0 still multiplies its value, so a NaN value from the cache
                // reaches the row (0 x NaN = NaN; softmax.hpp)
                if (valid_s[j] == 0 || pos0 + j > max_pos[i]) continue;
                for (int c = 0; c < CPL; ++c) acc[i][c] += wj * v_s[j * D + lane + SG * c];
              }
            }
            // the next fill overwrites the tile every sub-group is still reading
            sycl::group_barrier(it.get_group());
          }

          for (int i = 0; i < kRowsPerSg; ++i) {
            if (!live[i]) continue;
            const int64_t w = ws_row_index(pp, tile, head, split, sgid + kSubGroups * i);
            for (int c = 0; c < CPL; ++c) pp.ws_acc[w * D + lane + SG * c] = acc[i][c];
            if (lane == 0) {
              pp.ws_m[w] = m[i];
              pp.ws_l[w] = l[i];
            }
          }
        });
  });
}

}  // namespace

sycl::event launch_scalar(sycl::queue& q, const AttentionParams& p) {
  return dispatch_head_dim(p.layout.head_dim, "tq_sycl scalar",
                           [&](auto d) { return scalar_d<decltype(d)::value>(q, p); });
}

}  // namespace tq::sycl_impl
