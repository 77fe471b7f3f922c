// `jm`: joint_matrix split-KV kernel (intel/llvm nightly; stock icpx 2025.3 lacks the
// BMG-G31 joint_matrix tables).
//
// Work-group = (row tile of 16 rows, kv head, split); sub-groups = 2 row groups of 8
// rows x (head_dim / 128) output slices. Per tile of 16 tokens:
//  - all sub-groups dequantise the tile once into SLM as fp16: K transposed
//    ([head_dim][16], the B operand of Q K^T) and V ([16][head_dim], B of P V); the
//    norm-correction sum of a token is a sub-group reduction (no lane-0 fills);
//  - S (8 x 16) = sum over head_dim chunks of joint_matrix_mad(Q chunk, K^T chunk);
//  - the softmax runs on S staged in SLM, lane j = token j (vectorised max/sum);
//  - O (8 x 128 per sub-group) stays in joint_matrix accumulators across every tile of
//    the split. Instead of rescaling O by exp(m_old - m_new) each tile (which needs
//    per-row access to fragments), P is taken relative to a reference max that only
//    moves when a row's max grows by more than 2^8; only then are the fragments
//    round-tripped through SLM and rescaled. P = exp2(s - m_ref) <= 256 fits fp16.
// What the turboquant-xpu project's joint_matrix kernel (96.9 ms) did instead: fragments round-tripped
// through private arrays every tile, scalar softmax, lane-0 SLM fills, no tile sharing.
#include <sycl/ext/oneapi/matrix/matrix.hpp>
#include <sycl/sycl.hpp>

#include "sg_dequant.hpp"
#include "sycl_common.hpp"
#include "tq/schedule.hpp"
#include "tq/softmax.hpp"

namespace tq::sycl_impl {

template <int D>
class JointMatrixAttentionKernel;

namespace {

namespace mx = sycl::ext::oneapi::experimental::matrix;
using fp16 = sycl::half;

constexpr int M = 8;    // rows per sub-group (joint_matrix M on Xe2)
constexpr int N = 16;   // tokens per tile, output chunk width
constexpr int K = 16;   // reduction chunk (fp16)
constexpr int RG = kRowsPerTile / M;  // row groups per work-group
constexpr float kRescaleLog2 = 8.f;   // P <= 2^8 between rescales

template <typename T>
auto local_ptr(const sycl::local_accessor<T, 1>& a, size_t offset) {
  return a.template get_multi_ptr<sycl::access::decorated::no>() + offset;
}

template <int D>
sycl::event jm_d(sycl::queue& q, const AttentionParams& p) {
  constexpr int SG = kSubGroup;
  constexpr int DS = D < 128 ? D : 128;
  constexpr int NSL = D / DS;
  constexpr int NC = DS / N;
  constexpr int NSG = RG * NSL;
  constexpr int WG = NSG * SG;
  constexpr int T = kTileTokens;
  static_assert(T == N && T == K, "one tile is one N (scores) and one K (P V)");
  const int64_t groups = num_programs(p);
  if (groups == 0) return sycl::event{};
  const size_t slm = sizeof(fp16) * (2 * T * D + kRowsPerTile * D + NSG * M * N) + sizeof(float) * NSG * (M * N + M) +
                     sizeof(int32_t) * T;
  require_local_memory(q, slm, "jm");
  return q.submit([&](sycl::handler& h) {
    sycl::local_accessor<fp16, 1> kt_s(sycl::range<1>(D * T), h);           // K^T: [D][T]
    sycl::local_accessor<fp16, 1> v_s(sycl::range<1>(T * D), h);            // V:   [T][D]
    sycl::local_accessor<fp16, 1> q_s(sycl::range<1>(kRowsPerTile * D), h);  // Q:   [16][D]
    sycl::local_accessor<fp16, 1> p_s(sycl::range<1>(NSG * M * N), h);      // P per sub-group
    sycl::local_accessor<float, 1> s_s(sycl::range<1>(NSG * M * N), h);     // S / rescale scratch
    sycl::local_accessor<float, 1> alpha_s(sycl::range<1>(NSG * M), h);
    sycl::local_accessor<int32_t, 1> valid_s(sycl::range<1>(T), h);
    const AttentionParams pp = p;
    h.parallel_for<JointMatrixAttentionKernel<D>>(
        work_groups(groups, WG), [=](sycl::nd_item<1> it) [[sycl::reqd_sub_group_size(16)]] {
          Program prog;
          // uniform over the work-group
          if (!locate_program(pp, static_cast<int64_t>(it.get_group(0)), &prog)) return;
          const auto& [tile, head, split, t, g, rows, begin, end] = prog;

          sycl::sub_group sg = it.get_sub_group();
          const int lane = static_cast<int>(sg.get_local_linear_id());
          const int sgid = static_cast<int>(sg.get_group_linear_id());
          const int rg = sgid % RG;
          const int slice = sgid / RG;
          const int lid = static_cast<int>(it.get_local_linear_id());

          // Q rows of the tile into SLM as fp16 (dead rows zero)
          for (int i = lid; i < kRowsPerTile * D; i += WG) {
            const int r = i / D;
            const int c = i % D;
            float v = 0.f;
            if (r < rows) {
              const int32_t row = t.row_begin + r;
              v = pp.q_rot[(query_token(t, row, g) * pp.num_q_heads + query_head(head, row, g)) * int64_t{D} + c];
            }
            q_s[i] = fp16(v);
          }

          // row state, identical in every lane of the sub-group
          float m_ref[M];
          float l_row[M];
          int32_t max_pos[M];
          for (int r = 0; r < M; ++r) {
            m_ref[r] = neg_inf();
            l_row[r] = 0.f;
            const int32_t rr = rg * M + r;
            max_pos[r] = rr < rows ? row_max_pos(t, t.row_begin + rr, g) : -1;  // dead rows see nothing
          }
          mx::joint_matrix<sycl::sub_group, float, mx::use::accumulator, M, N> acc[NC];
          for (int c = 0; c < NC; ++c) mx::joint_matrix_fill(sg, acc[c], 0.f);
          const size_t s_off = static_cast<size_t>(sgid) * M * N;

          for (int32_t pos0 = begin; pos0 < end; pos0 += T) {
            const int32_t n = sycl::min(T, end - pos0);
            sycl::group_barrier(it.get_group());  // previous tile fully consumed (and q_s written)
            for (int j = sgid; j < T; j += NSG) {
              const bool read = dequant_token<D>(sg, pp, t.req, head, pos0 + j, j < n, [&](int c, float k, float v) {
                kt_s[c * T + j] = fp16(k);
                v_s[j * D + c] = fp16(v);
              });
              if (lane == 0) valid_s[j] = read ? 1 : 0;
            }
            sycl::group_barrier(it.get_group());

            // S = Q K^T for this sub-group's 8 rows
            mx::joint_matrix<sycl::sub_group, float, mx::use::accumulator, M, N> s_acc;
            mx::joint_matrix_fill(sg, s_acc, 0.f);
            for (int kc = 0; kc < D / K; ++kc) {
              mx::joint_matrix<sycl::sub_group, fp16, mx::use::a, M, K, mx::layout::row_major> qa;
              mx::joint_matrix<sycl::sub_group, fp16, mx::use::b, K, N, mx::layout::row_major> kb;
              mx::joint_matrix_load(sg, qa, local_ptr(q_s, static_cast<size_t>(rg) * M * D + kc * K), D);
              mx::joint_matrix_load(sg, kb, local_ptr(kt_s, static_cast<size_t>(kc) * K * T), T);
              mx::joint_matrix_mad(sg, s_acc, qa, kb, s_acc);
            }
            mx::joint_matrix_store(sg, s_acc, local_ptr(s_s, s_off), N, mx::layout::row_major);
            sycl::group_barrier(sg);

            // softmax rows against the reference max; lane j = token j
            bool rescale = false;
            for (int r = 0; r < M; ++r) {
              float s = s_s[s_off + r * N + lane];
              if (lane >= n || valid_s[lane] == 0 || pos0 + lane > max_pos[r]) s = neg_inf();
              const float tile_max = sycl::reduce_over_group(sg, s, sycl::maximum<float>());
              float alpha = 1.f;
              if (tile_max > m_ref[r] + kRescaleLog2 || (m_ref[r] == neg_inf() && tile_max != neg_inf())) {
                const float new_ref = tile_max;
                alpha = std::exp2(m_ref[r] - new_ref);  // 0 when the row had nothing yet
                m_ref[r] = new_ref;
                if (l_row[r] > 0.f) rescale = true;     // zero accumulators need no rescale
              }
              const float w = softmax_weight(s, m_ref[r]);
              l_row[r] = l_row[r] * alpha + sycl::reduce_over_group(sg, w, sycl::plus<float>());
              p_s[s_off + r * N + lane] = fp16(w);
              if (lane == 0) alpha_s[static_cast<size_t>(sgid) * M + r] = alpha;
            }
            sycl::group_barrier(sg);

            if (rescale) {  // uniform: every lane computed the same row state
              for (int c = 0; c < NC; ++c) {
                mx::joint_matrix_store(sg, acc[c], local_ptr(s_s, s_off), N, mx::layout::row_major);
                sycl::group_barrier(sg);
                for (int r = 0; r < M; ++r) s_s[s_off + r * N + lane] *= alpha_s[static_cast<size_t>(sgid) * M + r];
                sycl::group_barrier(sg);
                mx::joint_matrix_load(sg, acc[c], local_ptr(s_s, s_off), N, mx::layout::row_major);
                sycl::group_barrier(sg);
              }
            }

            // O += P V over this sub-group's output slice
            mx::joint_matrix<sycl::sub_group, fp16, mx::use::a, M, K, mx::layout::row_major> pa;
            mx::joint_matrix_load(sg, pa, local_ptr(p_s, s_off), N);
            for (int c = 0; c < NC; ++c) {
              mx::joint_matrix<sycl::sub_group, fp16, mx::use::b, K, N, mx::layout::row_major> vb;
              mx::joint_matrix_load(sg, vb, local_ptr(v_s, static_cast<size_t>(slice) * DS + c * N), D);
              mx::joint_matrix_mad(sg, acc[c], pa, vb, acc[c]);
            }
          }

          // partials: 8 consecutive workspace rows per sub-group (rows past `rows` are
          // inside the tile's 16-row allocation and never merged)
          const int64_t w0 = ws_row_index(pp, tile, head, split, rg * M);
          for (int c = 0; c < NC; ++c) {
            auto dst = sycl::address_space_cast<sycl::access::address_space::global_space,
                                                sycl::access::decorated::no>(pp.ws_acc + w0 * D + slice * DS + c * N);
            mx::joint_matrix_store(sg, acc[c], dst, D, mx::layout::row_major);
          }
          if (slice == 0 && lane < M && rg * M + lane < rows) {
            // lane r publishes row r's state (all lanes hold every row's)
            float mr = m_ref[0];
            float lr = l_row[0];
            for (int r = 1; r < M; ++r) {
              if (lane == r) {
                mr = m_ref[r];
                lr = l_row[r];
              }
            }
            pp.ws_m[w0 + lane] = mr;
            pp.ws_l[w0 + lane] = lr;
          }
        });
  });
}

}  // namespace

sycl::event launch_jm(sycl::queue& q, const AttentionParams& p) {
  return dispatch_head_dim(p.layout.head_dim, "tq_sycl jm",
                           [&](auto d) { return jm_d<decltype(d)::value>(q, p); });
}

}  // namespace tq::sycl_impl
