// One definition of the SYCL module's functions, registered under two module names.
#pragma once

#include <pybind11/pybind11.h>

namespace tq::sycl_bindings {

void define(pybind11::module_& m, const char* flavor);

}  // namespace tq::sycl_bindings
