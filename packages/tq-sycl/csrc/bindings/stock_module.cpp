// tq_sycl._stock: built by stock icpx; shares libsycl.so.8 (and torch's queue) in-process.
#include "sycl_bindings.hpp"

PYBIND11_MODULE(_stock, m) { tq::sycl_bindings::define(m, "stock"); }
