// tq_sycl._host: the host build of the core (system C++ compiler, no SYCL).
//
// attention() takes raw pointers to CPU memory; the Python side validates the tensors
// and keeps them alive for the call. The bridge child serves requests with it too.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "host/host_attention.hpp"
#include "params_from_dict.hpp"
#include "tq/dequant.hpp"
#include "tq/numeric.hpp"

#ifndef TQ_SYCL_VERSION
#error "TQ_SYCL_VERSION must be defined by the build (CMake reads it from __about__.py)"
#endif

namespace py = pybind11;

namespace {

void attention(const py::dict& args) {
  tq::AttentionParams p = tq::bindings::params_from_dict(args);
  py::gil_scoped_release release;  // pure C++ on memory the caller keeps alive
  tq::host::attention(p);
}

// The preset and layout fields as the C++ side reads them from an argument dict.
py::dict kernel_fields(const py::dict& args) {
  const tq::Preset pr = tq::bindings::preset_from_dict(args);
  return tq::bindings::fields_to_dict(pr, tq::bindings::layout_from_dict(args, pr));
}

// Dequantised K (rotated domain for Lloyd-Max presets) and V (rotated domain for
// calibrated formats' Lloyd-Max values) of every token of one (block, kv head): lets the
// tests check the dequant code against tq_core directly.
py::tuple dequant_block(const py::dict& args, int64_t block, int32_t head) {
  const tq::AttentionParams p = tq::bindings::params_from_dict(args);
  if (block < 0 || block >= p.num_blocks || head < 0 || head >= p.num_kv_heads)
    throw py::index_error("dequant_block: block or head out of range");
  const int32_t bs = p.layout.block_size;
  const int32_t d = p.layout.head_dim;
  py::array_t<float> k({bs, d});
  py::array_t<float> v({bs, d});
  const uint8_t* region = tq::head_region(p.cache, p.cache_block_stride, block, head, p.layout);
  for (int32_t t = 0; t < bs; ++t) {
    tq::dequant_key(region, t, p.layout, p.preset, p.centroids, k.mutable_data(t, 0));
    if (p.preset.calibrated)
      tq::dequant_lloyd_max_value(region, t, p.layout, p.preset, p.value_centroids, v.mutable_data(t, 0));
    else
      tq::dequant_value(region, t, p.layout, p.preset, v.mutable_data(t, 0));
  }
  return py::make_tuple(k, v);
}

// Number-format round trips, vectorised over a uint16/uint8/float32 array.
template <typename From, typename To, To (*Convert)(From)>
py::array_t<To> convert(const py::array_t<From, py::array::c_style>& a) {
  py::array_t<To> out(a.size());
  for (py::ssize_t i = 0; i < a.size(); ++i) out.mutable_data()[i] = Convert(a.data()[i]);
  return out;
}

}  // namespace

PYBIND11_MODULE(_host, m) {
  m.doc() = "tq-sycl host core: the SYCL kernels' shared headers compiled for the CPU (no SYCL)";
  m.def("version", [] { return std::string(TQ_SYCL_VERSION); });
  m.def("backend", [] { return std::string("host"); });
  m.def("kernels", [] { return std::vector<std::string>{"host"}; });
  m.def("attention", &attention, py::arg("args"));
  m.def("kernel_fields", &kernel_fields, py::arg("args"));
  m.def("dequant_block", &dequant_block, py::arg("args"), py::arg("block"), py::arg("head"));
  m.def("half_to_float", &convert<uint16_t, float, tq::half_to_float>);
  m.def("float_to_half", &convert<float, uint16_t, tq::float_to_half>);
  m.def("float_to_bf16", &convert<float, uint16_t, tq::float_to_bf16>);
  m.def("fp8_to_float", &convert<uint8_t, float, tq::fp8_e4m3fn_to_float>);
}
