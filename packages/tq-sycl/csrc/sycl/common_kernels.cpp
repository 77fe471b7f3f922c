// Query rotation and the split merge: used by every kernel family.
#include <sycl/sycl.hpp>

#include "sycl_common.hpp"
#include "tq/numeric.hpp"
#include "tq/schedule.hpp"
#include "tq/softmax.hpp"

namespace tq::sycl_impl {

template <int D>
class RotateQueriesKernel;
template <int D>
class MergeSplitsKernel;

namespace {

// One work-group per (query token, q head) row, D/2 work-items: each owns one butterfly
// per stage of the Walsh-Hadamard transform over the row staged in SLM.
template <int D>
sycl::event rotate_d(sycl::queue& q, const AttentionParams& p) {
  const int64_t rows = static_cast<int64_t>(p.num_q_tokens) * p.num_q_heads;
  if (rows == 0) return sycl::event{};
  return q.submit([&](sycl::handler& h) {
    sycl::local_accessor<float, 1> x(sycl::range<1>(D), h);
    const AttentionParams pp = p;
    h.parallel_for<RotateQueriesKernel<D>>(
        sycl::nd_range<2>(sycl::range<2>(static_cast<size_t>(rows), D / 2), sycl::range<2>(1, D / 2)),
        [=](sycl::nd_item<2> it) {
          const int64_t row = static_cast<int64_t>(it.get_global_id(0));
          const int j = static_cast<int>(it.get_local_id(1));
          const int64_t tok = row / pp.num_q_heads;
          const int64_t head = row % pp.num_q_heads;
          const int64_t src = tok * pp.q_stride_token + head * pp.q_stride_head;
          float mul = pp.scale * kLog2e;
          // scaled before the butterflies sum it, so a finite query cannot overflow (rotation.hpp)
          if (!pp.preset.key_fp8) mul *= sycl::rsqrt(static_cast<float>(D));
          x[j] = load_element(pp.query, src + j, pp.query_dtype) * mul;
          x[j + D / 2] = load_element(pp.query, src + j + D / 2, pp.query_dtype) * mul;
          if (!pp.preset.key_fp8) {
            for (int h2 = 1; h2 < D; h2 *= 2) {
              sycl::group_barrier(it.get_group());
              const int a = (j / h2) * 2 * h2 + (j % h2);
              const float u = x[a];
              const float v = x[a + h2];
              x[a] = u + v;
              x[a + h2] = u - v;
            }
            sycl::group_barrier(it.get_group());
          }
          float* dst = pp.q_rot + row * D;
          dst[j] = x[j];
          dst[j + D / 2] = x[j + D / 2];
        });
  });
}

// One work-group per (row tile, kv head, row); work-item c writes coordinate c.
template <int D>
sycl::event merge_d(sycl::queue& q, const AttentionParams& p) {
  const int64_t groups = num_row_tiles(p) * p.num_kv_heads * p.rows_per_tile;
  if (groups == 0) return sycl::event{};
  return q.submit([&](sycl::handler& h) {
    const AttentionParams pp = p;
    h.parallel_for<MergeSplitsKernel<D>>(
        sycl::nd_range<2>(sycl::range<2>(static_cast<size_t>(groups), D), sycl::range<2>(1, D)),
        [=](sycl::nd_item<2> it) {
          const int64_t gid = static_cast<int64_t>(it.get_global_id(0));
          const int c = static_cast<int>(it.get_local_id(1));
          const int32_t rr = static_cast<int32_t>(gid % pp.rows_per_tile);
          const int32_t head = static_cast<int32_t>((gid / pp.rows_per_tile) % pp.num_kv_heads);
          const int64_t tile = gid / pp.rows_per_tile / pp.num_kv_heads;
          TileRows t;
          if (!locate_tile(pp, tile, &t) || rr >= t.row_end - t.row_begin) return;
          const int64_t first = ws_row_index(pp, tile, head, 0, rr);
          const MergeScale ms = lse_merge_scale(pp.ws_m + first, pp.ws_l + first, pp.rows_per_tile, pp.num_splits);
          float o = 0.f;
          for (int32_t s = 0; s < pp.num_splits; ++s) {
            const int64_t i = ws_row_index(pp, tile, head, s, rr);
            const float w = lse_merge_weight(ms, pp.ws_m[i], pp.ws_l[i]);
            if (split_contributes(pp.ws_l[i])) o += w * pp.ws_acc[i * D + c];
          }
          const int32_t g = group_size(pp);
          const int32_t row = t.row_begin + rr;
          const int64_t tok = query_token(t, row, g);
          const int32_t qh = query_head(head, row, g);
          const int64_t dst = tok * pp.o_stride_token + qh * pp.o_stride_head;
          // a query row with a NaN or ±inf element gives a NaN row (see softmax.hpp);
          // the early return above is uniform over the work-group, so all of it gets here
          const float qc = load_element(pp.query, tok * pp.q_stride_token + qh * pp.q_stride_head + c, pp.query_dtype);
          if (sycl::any_of_group(it.get_group(), !is_finite(qc))) o = quiet_nan();
          store_element(pp.out, dst + c, pp.out_dtype, o);
        });
  });
}

}  // namespace

sycl::event rotate_queries(sycl::queue& q, const AttentionParams& p) {
  return dispatch_head_dim(p.layout.head_dim, "tq_sycl",
                           [&](auto d) { return rotate_d<decltype(d)::value>(q, p); });
}

sycl::event merge_splits(sycl::queue& q, const AttentionParams& p) {
  return dispatch_head_dim(p.layout.head_dim, "tq_sycl",
                           [&](auto d) { return merge_d<decltype(d)::value>(q, p); });
}

void require_local_memory(const sycl::queue& q, size_t bytes, const char* kernel) {
  const size_t have = q.get_device().get_info<sycl::info::device::local_mem_size>();
  if (bytes > have)
    throw std::runtime_error(std::string("tq_sycl: kernel '") + kernel + "' needs " + std::to_string(bytes) +
                             " bytes of local memory at this head_dim; the device has " + std::to_string(have));
}

}  // namespace tq::sycl_impl
