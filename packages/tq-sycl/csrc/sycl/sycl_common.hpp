// Declarations shared by the SYCL translation units.
//
// A call is three launches on the caller's queue, none waiting on the host:
//   1. rotate_queries: q_rot = H q * scale * log2(e) (plain q for fp8 keys), once per call;
//   2. one attention kernel (scalar, esimd or jm) writing split partials (acc, m, l);
//   3. merge_splits: log-sum-exp merge of the partials into `out`, in out's dtype.
// NOTE: none of this has been compiled or run on Intel hardware yet (docs/sycl.md).
#pragma once

#include <sycl/sycl.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tq/head_dim.hpp"
#include "tq/params.hpp"

namespace tq::sycl_impl {

// Sub-group size every kernel is written for (Xe2 DPAS N = 16).
constexpr int kSubGroup = 16;

sycl::event rotate_queries(sycl::queue& q, const AttentionParams& p);
sycl::event merge_splits(sycl::queue& q, const AttentionParams& p);

#ifdef TQ_SYCL_HAVE_SCALAR
sycl::event launch_scalar(sycl::queue& q, const AttentionParams& p);
#endif
#ifdef TQ_SYCL_HAVE_ESIMD
// ESIMD programs own 8 rows (one DPAS repeat count); it changes p.rows_per_tile.
constexpr int32_t kEsimdRows = 8;
sycl::event launch_esimd(sycl::queue& q, const AttentionParams& p);
#endif
#ifdef TQ_SYCL_HAVE_JM
sycl::event launch_jm(sycl::queue& q, const AttentionParams& p);
#endif

// The kernel families this module was built with ("scalar", "esimd", "jm").
std::vector<std::string> compiled_kernels();

// Rows per program each family uses (the workspace is sized for kRowsPerTile = 16,
// which bounds every smaller choice; see params.hpp).
int32_t rows_per_tile_for(const std::string& kernel);

// Enqueues the three launches; returns the attention kernel's event (for timing) and
// the last event (for ordering).
struct CallEvents {
  sycl::event kernel;
  sycl::event last;
};
CallEvents run_attention(sycl::queue& q, AttentionParams p, const std::string& kernel);

// `groups` work-groups of `wg` work-items (the scalar and jm kernels: one per program).
inline sycl::nd_range<1> work_groups(int64_t groups, int wg) {
  return sycl::nd_range<1>(sycl::range<1>(static_cast<size_t>(groups) * wg), sycl::range<1>(wg));
}

// Throws std::runtime_error when a kernel's SLM need exceeds the device's local memory.
void require_local_memory(const sycl::queue& q, size_t bytes, const char* kernel);

}  // namespace tq::sycl_impl
