// Kernel selection and the three-launch sequence of one call.
#include <stdexcept>
#include <string>
#include <vector>

#include "sycl_common.hpp"

namespace tq::sycl_impl {

std::vector<std::string> compiled_kernels() {
  std::vector<std::string> k;
#ifdef TQ_SYCL_HAVE_SCALAR
  k.emplace_back("scalar");
#endif
#ifdef TQ_SYCL_HAVE_ESIMD
  k.emplace_back("esimd");
#endif
#ifdef TQ_SYCL_HAVE_JM
  k.emplace_back("jm");
#endif
  return k;
}

int32_t rows_per_tile_for(const std::string& kernel) {
#ifdef TQ_SYCL_HAVE_ESIMD
  if (kernel == "esimd") return kEsimdRows;
#endif
  (void)kernel;
  return kRowsPerTile;
}

CallEvents run_attention(sycl::queue& q, AttentionParams p, const std::string& kernel) {
  // the three launches are ordered by the queue itself (torch's XPU queues and the
  // bridge child's are in-order), so no event waits are needed
  if (!q.is_in_order()) throw std::invalid_argument("tq_sycl: the SYCL queue must be in-order");
  p.rows_per_tile = rows_per_tile_for(kernel);
  rotate_queries(q, p);
  sycl::event ev;
  bool found = false;
#ifdef TQ_SYCL_HAVE_SCALAR
  if (kernel == "scalar") {
    ev = launch_scalar(q, p);
    found = true;
  }
#endif
#ifdef TQ_SYCL_HAVE_ESIMD
  if (kernel == "esimd") {
    ev = launch_esimd(q, p);
    found = true;
  }
#endif
#ifdef TQ_SYCL_HAVE_JM
  if (kernel == "jm") {
    ev = launch_jm(q, p);
    found = true;
  }
#endif
  if (!found) throw std::invalid_argument("tq_sycl: kernel '" + kernel + "' is not compiled into this module");
  // the merge runs even for one split: it also converts to out's dtype and strides
  sycl::event last = merge_splits(q, p);
  return CallEvents{ev, last};
}

}  // namespace tq::sycl_impl
