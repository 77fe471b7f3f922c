// tq_sycl._nightly: built by an intel/llvm nightly (libsycl.so.9); imported only by the
// bridge child process, never beside torch-XPU.
#include "sycl_bindings.hpp"

PYBIND11_MODULE(_nightly, m) { tq::sycl_bindings::define(m, "nightly"); }
