// The head dims the kernels are instantiated for (tq_core.presets.SUPPORTED_HEAD_DIMS),
// and the one runtime-to-compile-time dispatch over them.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace tq {

template <int D>
using HeadDim = std::integral_constant<int, D>;

// Calls f(HeadDim<D>{}) for the D equal to head_dim and returns its result; throws
// std::invalid_argument naming `who` for any other head_dim. Kernels take D as
// `decltype(d)::value`.
template <class F>
auto dispatch_head_dim(int32_t head_dim, const char* who, F&& f) {
  switch (head_dim) {
    case 64: return f(HeadDim<64>{});
    case 128: return f(HeadDim<128>{});
    case 256: return f(HeadDim<256>{});
    case 512: return f(HeadDim<512>{});
    default: throw std::invalid_argument(std::string(who) + ": head_dim must be 64, 128, 256 or 512");
  }
}

}  // namespace tq
