// Python bindings of a SYCL build (tq_sycl._stock or tq_sycl._nightly).
//
//   attention(args, kernel)       in-process: args hold USM pointers of torch-XPU tensors,
//                                 the workspace, and "queue" (torch's sycl::queue*). Only
//                                 enqueues; never waits (no host sync in the hot path).
//   attention_host(args, kernel)  for the bridge child: args hold host pointers into the
//                                 shared-memory segment; stages them through device
//                                 buffers kept across calls, runs, copies `out` back and
//                                 returns the attention kernel's device time in ms.
#include "sycl_bindings.hpp"

#include <pybind11/stl.h>

#include <sycl/sycl.hpp>

#include <memory>
#include <stdexcept>
#include <string>

#include "params_from_dict.hpp"
#include "sycl/sycl_common.hpp"

#ifndef TQ_SYCL_VERSION
#error "TQ_SYCL_VERSION must be defined by the build"
#endif

namespace tq::sycl_bindings {

namespace py = pybind11;

namespace {

size_t element_size(int32_t dtype) { return dtype == kFloat32 ? 4 : 2; }

// Device buffers reused across bridge requests (grow-only), on one in-order queue with
// profiling so the child can report kernel time without host timers.
class Staging {
 public:
  Staging()
      : q_(sycl::gpu_selector_v, sycl::property_list{sycl::property::queue::in_order(),
                                                     sycl::property::queue::enable_profiling()}) {}
  ~Staging() {
    for (auto& b : bufs_)
      if (b.ptr) sycl::free(b.ptr, q_);
  }
  sycl::queue& queue() { return q_; }

  // device copy of `bytes` at host address `src` in slot `slot`; returns the device pointer
  void* upload(int slot, const void* src, size_t bytes) {
    void* dst = reserve(slot, bytes);
    if (bytes) q_.memcpy(dst, src, bytes);
    return dst;
  }
  void* reserve(int slot, size_t bytes) {
    Buf& b = bufs_[slot];
    if (bytes > b.size) {
      if (b.ptr) sycl::free(b.ptr, q_);
      b.ptr = sycl::malloc_device(bytes, q_);
      if (!b.ptr) throw std::runtime_error("tq_sycl: device allocation of " + std::to_string(bytes) + " bytes failed");
      b.size = bytes;
    }
    return b.ptr;
  }

 private:
  struct Buf {
    void* ptr = nullptr;
    size_t size = 0;
  };
  sycl::queue q_;
  Buf bufs_[12];
};

Staging& staging() {
  static std::unique_ptr<Staging> s;  // created on first use: importing must not need a GPU
  if (!s) s = std::make_unique<Staging>();
  return *s;
}

void attention(const py::dict& args, const std::string& kernel) {
  AttentionParams p = bindings::params_from_dict(args);
  if (!p.q_rot || !p.ws_acc || !p.ws_m || !p.ws_l)
    throw py::value_error("attention args: the in-process path needs q_rot, ws_acc, ws_m and ws_l");
  auto* q = reinterpret_cast<sycl::queue*>(static_cast<uintptr_t>(bindings::get<uint64_t>(args, "queue")));
  if (!q) throw py::value_error("attention args: 'queue' is null");
  py::gil_scoped_release release;
  sycl_impl::run_attention(*q, p, kernel);
}

double attention_host(const py::dict& args, const std::string& kernel) {
  AttentionParams p = bindings::params_from_dict(args);
  py::gil_scoped_release release;
  Staging& st = staging();
  sycl::queue& q = st.queue();
  const int64_t nq = p.num_q_tokens;
  // bytes from the first to one past the last element each strided array spans
  const auto extent = [](int64_t n, int64_t stride, int64_t last) { return n > 0 ? (n - 1) * stride + last : 0; };
  const int64_t row_elems_q = (p.num_q_heads - 1) * p.q_stride_head + p.layout.head_dim;
  const int64_t row_elems_o = (p.num_q_heads - 1) * p.o_stride_head + p.layout.head_dim;
  const size_t q_bytes = static_cast<size_t>(extent(nq, p.q_stride_token, row_elems_q)) * element_size(p.query_dtype);
  const size_t o_bytes = static_cast<size_t>(extent(nq, p.o_stride_token, row_elems_o)) * element_size(p.out_dtype);
  void* host_out = p.out;
  p.query = st.upload(0, p.query, q_bytes);
  p.out = st.upload(1, p.out, o_bytes);  // rows the kernels do not write keep their values
  p.cache = static_cast<const uint8_t*>(
      st.upload(2, p.cache, static_cast<size_t>(p.num_blocks) * static_cast<size_t>(p.cache_block_stride)));
  p.block_table = static_cast<const int32_t*>(
      st.upload(3, p.block_table, static_cast<size_t>(extent(p.num_reqs, p.bt_stride, p.bt_cols)) * 4));
  p.seq_lens = static_cast<const int32_t*>(st.upload(4, p.seq_lens, static_cast<size_t>(p.num_reqs) * 4));
  p.query_start_loc =
      static_cast<const int32_t*>(st.upload(5, p.query_start_loc, static_cast<size_t>(p.num_reqs + 1) * 4));
  if (!p.preset.key_fp8)
    p.centroids = static_cast<const float*>(st.upload(6, p.centroids, (size_t{1} << p.preset.key_bits) * 4));
  // the workspace is sized for 16-row tiles, which bounds every family's choice
  AttentionParams sizing = p;
  sizing.rows_per_tile = kRowsPerTile;
  const size_t rows = static_cast<size_t>(num_row_tiles(sizing) * p.num_kv_heads * p.num_splits * kRowsPerTile);
  p.q_rot = static_cast<float*>(st.reserve(7, static_cast<size_t>(nq) * p.num_q_heads * p.layout.head_dim * 4 + 4));
  p.ws_acc = static_cast<float*>(st.reserve(8, rows * p.layout.head_dim * 4 + 4));
  p.ws_m = static_cast<float*>(st.reserve(9, rows * 4 + 4));
  p.ws_l = static_cast<float*>(st.reserve(10, rows * 4 + 4));
  const sycl_impl::CallEvents ev = sycl_impl::run_attention(q, p, kernel);
  if (o_bytes) q.memcpy(host_out, p.out, o_bytes);
  q.wait_and_throw();
  const auto t0 = ev.kernel.get_profiling_info<sycl::info::event_profiling::command_start>();
  const auto t1 = ev.kernel.get_profiling_info<sycl::info::event_profiling::command_end>();
  return static_cast<double>(t1 - t0) * 1e-6;
}

std::string device_name() {
  return staging().queue().get_device().get_info<sycl::info::device::name>();
}

}  // namespace

void define(py::module_& m, const char* flavor) {
  m.doc() = "tq-sycl SYCL kernels (scalar / esimd / jm) over tq's paged compressed cache";
  const std::string fl(flavor);
  m.def("version", [] { return std::string(TQ_SYCL_VERSION); });
  m.def("backend", [fl] { return fl; });
  m.def("kernels", [] { return sycl_impl::compiled_kernels(); });
  m.def("device_name", &device_name);
  m.def("attention", &attention, py::arg("args"), py::arg("kernel"));
  m.def("attention_host", &attention_host, py::arg("args"), py::arg("kernel"));
}

}  // namespace tq::sycl_bindings
