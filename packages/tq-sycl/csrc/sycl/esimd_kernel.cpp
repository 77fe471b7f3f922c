// `esimd`: explicit-SIMD kernel with xmx::dpas for both products (stock oneAPI).
//
// One ESIMD thread owns 8 rows (DPAS repeat count) of a row tile, one kv head, one split
// and a 128-wide slice of the output (head_dim 256/512 use 2/4 threads, each recomputing
// the scores from L1-resident K codes rather than keeping 8 x 512 accumulators live).
// Per tile of 16 tokens it:
//  - gathers each token's packed codes as 32-bit words (`bits` words hold 32 codes), one
//    token per lane, and unpacks them with vector shifts: no byte-wide loads;
//  - builds the DPAS B operand (VNNI pairs) directly from registers; Lloyd-Max codes go
//    through a 16-entry register table (iselect) and the norm correction is a column
//    scale of S applied after the dot products (S = (Q C^T) * norm / ||c||);
//  - runs the softmax on the 8 x 16 score block with vector max/exp2/sum per row;
//  - accumulates P V with a second DPAS into 8 x 128 float accumulators kept in
//    registers across all tiles of the split.
// What the turboquant-xpu project's ESIMD kernel (~190 ms) lacked: split-KV, DPAS for both products,
// a vectorised softmax and in-register dequantisation (it staged through lane-0 fills).
#include <sycl/ext/intel/esimd.hpp>
#include <sycl/sycl.hpp>

#include <functional>
#include <limits>

#include "sycl_common.hpp"
#include "tq/dequant.hpp"
#include "tq/schedule.hpp"
#include "tq/softmax.hpp"

namespace tq::sycl_impl {

template <int D, int KBITS, int VBITS>
class EsimdAttentionKernel;

namespace {

namespace esimd = sycl::ext::intel::esimd;
namespace xmx = sycl::ext::intel::esimd::xmx;
using fp16 = sycl::half;
template <typename T, int N>
using vec = esimd::simd<T, N>;

constexpr int R = kEsimdRows;  // DPAS M (repeat count)
constexpr int T = 16;          // tokens per tile: DPAS N for S, K for P V

// float8 e4m3fn in the low byte of each lane -> float (vector form of numeric.hpp's).
ESIMD_INLINE vec<float, T> fp8_to_float(vec<uint32_t, T> b) {
  const vec<uint32_t, T> sign = (b & 0x80u) << 24;
  const vec<uint32_t, T> e = (b >> 3) & 0xFu;
  const vec<uint32_t, T> man = b & 0x7u;
  // not const: bit_cast_view and select are views, callable only on non-const simd lvalues
  vec<uint32_t, T> normal_bits = sign | ((e + 120u) << 23) | (man << 20);
  vec<float, T> f = normal_bits.template bit_cast_view<float>();
  vec<float, T> sub = vec<float, T>(man) * 0.001953125f;  // man * 2^-9
  sub.merge(-sub, sign != 0u);
  f.merge(sub, e == 0u);
  f.merge(vec<float, T>(std::numeric_limits<float>::quiet_NaN()), (e == 15u) & (man == 7u));
  return f;
}

// Code i (0..31) of a 32-code group held as `BITS` words per lane (word w at w*T).
template <int BITS, int W>
ESIMD_INLINE vec<uint32_t, T> group_code(vec<uint32_t, T * W> words, int i) {
  const int bit = i * BITS;
  const int w = bit / 32;
  const int sh = bit % 32;
  vec<uint32_t, T> code = words.template select<T, 1>(w * T) >> sh;
  if (sh + BITS > 32) code |= words.template select<T, 1>((w + 1) * T) << (32 - sh);
  return code & ((1u << BITS) - 1u);
}

template <int D, int KBITS, int VBITS>
sycl::event esimd_dkv(sycl::queue& q, const AttentionParams& p) {
  constexpr int DS = D < 128 ? D : 128;  // output slice per thread
  constexpr int NSL = D / DS;
  constexpr int NC = DS / 16;             // output chunks of 16 in a slice
  constexpr int KW = KBITS;               // words per 32 key codes (fp8: 8)
  constexpr bool FP8 = KBITS == 8;
  const int64_t threads = num_programs(p) * NSL;
  if (threads == 0) return sycl::event{};
  return q.submit([&](sycl::handler& h) {
    const AttentionParams pp = p;
    h.parallel_for<EsimdAttentionKernel<D, KBITS, VBITS>>(
        sycl::range<1>(static_cast<size_t>(threads)), [=](sycl::id<1> id) SYCL_ESIMD_KERNEL {
          const int64_t idx = static_cast<int64_t>(id[0]);
          const int slice = static_cast<int>(idx % NSL);
          Program prog;
          if (!locate_program(pp, idx / NSL, &prog)) return;
          const auto& [tile, head, split, t, g, rows, begin, end] = prog;
          const BlockLayout& lay = pp.layout;
          const float ninf = -std::numeric_limits<float>::infinity();

          // rotated queries as the DPAS A operand, chunk-major: chunk kc = rows x 16 halves
          vec<fp16, R * D> qa = 0;
          vec<int32_t, R> max_pos = -1;  // dead rows see nothing
          for (int r = 0; r < R; ++r) {
            if (r >= rows) continue;
            const int32_t row = t.row_begin + r;
            max_pos[r] = row_max_pos(t, row, g);
            const float* qrow =
                pp.q_rot + (query_token(t, row, g) * pp.num_q_heads + query_head(head, row, g)) * int64_t{D};
            for (int kc = 0; kc < D / 16; ++kc) {
              const vec<float, 16> v = esimd::block_load<float, 16>(qrow + kc * 16);
              qa.template select<16, 1>(kc * R * 16 + r * 16) = vec<fp16, 16>(v);
            }
          }
          vec<float, T> cent = 0;
          if constexpr (!FP8) {
            for (int i = 0; i < (1 << KBITS); ++i) cent[i] = pp.centroids[i];
          }

          vec<float, R * 16 * NC> acc = 0;
          vec<float, R> m = ninf;
          vec<float, R> l = 0;
          const auto* cache32 = reinterpret_cast<const uint32_t*>(pp.cache);

          for (int32_t pos0 = begin; pos0 < end; pos0 += T) {
            // per-token metadata, one token per lane (scalar loads: 16 per tile)
            vec<uint64_t, T> kaddr = 0;
            vec<uint64_t, T> vaddr = 0;
            vec<uint16_t, T> vflag = 0;
            vec<float, T> norm = 0;
            vec<float, T> vscale = 0;
            vec<float, T> vzero = 0;
            for (int j = 0; j < T; ++j) {
              const int32_t pos = pos0 + j;
              const int64_t blk = pos < end ? block_of(pp, t.req, pos) : -1;
              if (blk < 0) continue;
              const uint8_t* region = head_region(pp.cache, pp.cache_block_stride, blk, head, lay);
              const int32_t off = pos % lay.block_size;
              const uint64_t base = static_cast<uint64_t>(region - pp.cache);
              kaddr[j] = field_entry(base, lay.key_offset, lay.key_width, off);
              vaddr[j] = field_entry(base, lay.value_offset, lay.value_width, off);
              vflag[j] = 1;
              if constexpr (!FP8) norm[j] = key_norm(region, off, lay);
              vscale[j] = value_scale(region, off, lay);
              vzero[j] = value_zero(region, off, lay);
            }
            const esimd::simd_mask<T> valid = vflag != 0;

            // S = Q K^T over head_dim in chunks of 16 (two chunks per 32-code group)
            vec<float, R * T> s = 0;
            vec<float, T> sumsq = 0;
            for (int gi = 0; gi < D / 32; ++gi) {
              vec<uint32_t, T * KW> kw = 0;
              for (int w = 0; w < KW; ++w)
                kw.template select<T, 1>(w * T) =
                    esimd::gather<uint32_t, T>(cache32, kaddr + static_cast<uint64_t>((gi * KW + w) * 4), valid);
              for (int half = 0; half < 2; ++half) {
                vec<fp16, 16 * T> b;  // VNNI: (k, n) at (k / 2) * 32 + n * 2 + k % 2
                for (int k = 0; k < 16; ++k) {
                  const int i = half * 16 + k;
                  vec<float, T> val;
                  if constexpr (FP8) {
                    val = fp8_to_float((kw.template select<T, 1>((i / 4) * T) >> ((i % 4) * 8)) & 0xFFu);
                  } else {
                    val = cent.iselect(vec<uint16_t, T>(group_code<KBITS, KW>(kw, i)));
                  }
                  val.merge(vec<float, T>(0.f), !valid);  // masked gathers return garbage
                  if constexpr (!FP8) sumsq += val * val;
                  b.template select<T, 2>((k / 2) * 32 + (k % 2)) = vec<fp16, T>(val);
                }
                const int kc = gi * 2 + half;
                s = xmx::dpas<8, R, float>(s, b, vec<fp16, R * 16>(qa.template select<R * 16, 1>(kc * R * 16)));
              }
            }
            if constexpr (!FP8) {
              // rotated key = c * norm / ||c||: a per-token (column) scale of S
              vec<float, T> mul = norm;
              if (pp.preset.norm_correction) mul = norm * esimd::rsqrt(sumsq);
              mul.merge(vec<float, T>(0.f), !valid);
              for (int r = 0; r < R; ++r) s.template select<T, 1>(r * T) *= mul;
            }

            // online softmax, one 16-wide vector per row
            const vec<int32_t, T> pos = vec<int32_t, T>(pos0, 1);
            vec<float, R> tile_max;
            for (int r = 0; r < R; ++r) {
              vec<float, T> sr = s.template select<T, 1>(r * T);
              sr.merge(vec<float, T>(ninf), !valid | (pos > int32_t(max_pos[r])));
              tile_max[r] = esimd::hmax<float>(sr);
              s.template select<T, 1>(r * T) = sr;
            }
            const vec<float, R> m_new = esimd::max(m, tile_max);
            vec<float, R> m_use = m_new;
            m_use.merge(vec<float, R>(0.f), m_new == ninf);  // rows with nothing yet: weights 0, not NaN
            const vec<float, R> alpha = esimd::exp2(m - m_use);
            vec<float, R> psum;
            for (int r = 0; r < R; ++r) {
              const vec<float, T> pr = esimd::exp2(s.template select<T, 1>(r * T) - float(m_use[r]));
              s.template select<T, 1>(r * T) = pr;
              psum[r] = esimd::reduce<float>(pr, std::plus<>());
              for (int c = 0; c < NC; ++c) acc.template select<T, 1>(c * R * 16 + r * 16) *= float(alpha[r]);
            }
            l = l * alpha + psum;
            m = m_new;
            const vec<fp16, R * T> pa = s;

            // acc += P V for this thread's output slice
            for (int gv = slice * DS / 32; gv < (slice + 1) * DS / 32; ++gv) {
              vec<uint32_t, T * VBITS> vw = 0;
              for (int w = 0; w < VBITS; ++w)
                vw.template select<T, 1>(w * T) =
                    esimd::gather<uint32_t, T>(cache32, vaddr + static_cast<uint64_t>((gv * VBITS + w) * 4), valid);
              for (int half = 0; half < 2; ++half) {
                vec<fp16, 16 * T> b;  // VNNI over token pairs: (k, n) at (k / 2) * 32 + n * 2 + k % 2
                for (int n = 0; n < 16; ++n) {
                  vec<float, T> val = vzero + vec<float, T>(group_code<VBITS, VBITS>(vw, half * 16 + n)) * vscale;
                  val.merge(vec<float, T>(0.f), !valid);
                  vec<fp16, T> hv = val;  // not const: select() views need a non-const simd
                  b.template select<8, 32>(2 * n) = hv.template select<8, 2>(0);
                  b.template select<8, 32>(2 * n + 1) = hv.template select<8, 2>(1);
                }
                const int oc = gv * 2 + half - slice * NC;
                vec<float, R * 16> c = acc.template select<R * 16, 1>(oc * R * 16);
                c = xmx::dpas<8, R, float>(c, b, pa);
                acc.template select<R * 16, 1>(oc * R * 16) = c;
              }
            }
          }

          for (int r = 0; r < R; ++r) {
            if (r >= rows) continue;
            const int64_t w = ws_row_index(pp, tile, head, split, r);
            for (int c = 0; c < NC; ++c) {
              const vec<float, 16> out = acc.template select<16, 1>(c * R * 16 + r * 16);
              esimd::block_store<float, 16>(pp.ws_acc + w * D + slice * DS + c * 16, out);
            }
            if (slice == 0) {
              pp.ws_m[w] = m[r];
              pp.ws_l[w] = l[r];
            }
          }
        });
  });
}

template <int D>
sycl::event esimd_d(sycl::queue& q, const AttentionParams& p) {
  const Preset& pr = p.preset;
  if (pr.key_fp8 && pr.value_bits == 4) return esimd_dkv<D, 8, 4>(q, p);
  if (!pr.key_fp8 && pr.key_bits == 4 && pr.value_bits == 4) return esimd_dkv<D, 4, 4>(q, p);
  if (!pr.key_fp8 && pr.key_bits == 3 && pr.value_bits == 4) return esimd_dkv<D, 3, 4>(q, p);
  if (!pr.key_fp8 && pr.key_bits == 3 && pr.value_bits == 3) return esimd_dkv<D, 3, 3>(q, p);
  throw std::runtime_error("tq_sycl esimd: no kernel for this key/value bit combination");
}

}  // namespace

sycl::event launch_esimd(sycl::queue& q, const AttentionParams& p) {
  return dispatch_head_dim(p.layout.head_dim, "tq_sycl esimd",
                           [&](auto d) { return esimd_d<decltype(d)::value>(q, p); });
}

}  // namespace tq::sycl_impl
