# The SYCL module (_stock or _nightly). Included by CMakeLists.txt when
# TQ_SYCL_BACKEND is stock or nightly; the toolchain file has set the compiler.

if(NOT TQ_SYCL_BACKEND MATCHES "^(stock|nightly)$")
  message(FATAL_ERROR "TQ_SYCL_BACKEND=${TQ_SYCL_BACKEND}: expected none, stock or nightly")
endif()
if(DEFINED TQ_SYCL_TOOLCHAIN_FLAVOR AND NOT TQ_SYCL_TOOLCHAIN_FLAVOR STREQUAL TQ_SYCL_BACKEND)
  message(FATAL_ERROR "TQ_SYCL_BACKEND=${TQ_SYCL_BACKEND} but the toolchain file is for ${TQ_SYCL_TOOLCHAIN_FLAVOR}")
endif()

# Kernel families. Stock icpx 2025.3 has no BMG-G31 joint_matrix tables, so jm is off by
# default there; the nightly carries them.
if(TQ_SYCL_BACKEND STREQUAL "stock")
  set(_jm_default OFF)
else()
  set(_jm_default ON)
endif()
option(TQ_SYCL_KERNEL_SCALAR "Build the scalar (sub-group, SLM) kernel" ON)
option(TQ_SYCL_KERNEL_ESIMD "Build the ESIMD + xmx::dpas kernel" ON)
option(TQ_SYCL_KERNEL_JM "Build the joint_matrix kernel" ${_jm_default})

# Ahead-of-time target for ocloc (e.g. bmg-g31, bmg-g21, lnl-m); empty means JIT from
# SPIR-V at first launch.
set(TQ_SYCL_AOT_TARGET "" CACHE STRING "AOT device for ocloc (empty: JIT, spir64)")
option(TQ_SYCL_LARGE_GRF "AOT only: compile with the 256-register file (ESIMD and jm keep big tiles live)" ON)

set(_sycl_srcs
  csrc/bindings/sycl_bindings.cpp
  csrc/sycl/launch.cpp
  csrc/sycl/common_kernels.cpp)
set(_sycl_defs TQ_SYCL_VERSION="${TQ_SYCL_VERSION}" TQ_SYCL_FLAVOR="${TQ_SYCL_BACKEND}")
if(TQ_SYCL_KERNEL_SCALAR)
  list(APPEND _sycl_srcs csrc/sycl/scalar_kernel.cpp)
  list(APPEND _sycl_defs TQ_SYCL_HAVE_SCALAR=1)
endif()
if(TQ_SYCL_KERNEL_ESIMD)
  list(APPEND _sycl_srcs csrc/sycl/esimd_kernel.cpp)
  list(APPEND _sycl_defs TQ_SYCL_HAVE_ESIMD=1)
endif()
if(TQ_SYCL_KERNEL_JM)
  list(APPEND _sycl_srcs csrc/sycl/jm_kernel.cpp)
  list(APPEND _sycl_defs TQ_SYCL_HAVE_JM=1)
endif()
if(NOT (TQ_SYCL_KERNEL_SCALAR OR TQ_SYCL_KERNEL_ESIMD OR TQ_SYCL_KERNEL_JM))
  message(FATAL_ERROR "all SYCL kernel families are switched off")
endif()

set(_sycl_flags -fsycl)
if(TQ_SYCL_AOT_TARGET)
  set(_ocloc "-device ${TQ_SYCL_AOT_TARGET}")
  if(TQ_SYCL_LARGE_GRF)
    string(APPEND _ocloc " -options -ze-opt-large-register-file")
  endif()
  list(APPEND _sycl_flags -fsycl-targets=spir64_gen "SHELL:-Xsycl-target-backend=spir64_gen \"${_ocloc}\"")
else()
  list(APPEND _sycl_flags -fsycl-targets=spir64)
endif()

set(_module "_${TQ_SYCL_BACKEND}")
pybind11_add_module(${_module} MODULE csrc/bindings/${TQ_SYCL_BACKEND}_module.cpp ${_sycl_srcs})
target_include_directories(${_module} PRIVATE "${TQ_CORE_INCLUDE}" "${TQ_CSRC}" "${TQ_CSRC}/bindings")
target_compile_definitions(${_module} PRIVATE ${_sycl_defs})
target_compile_options(${_module} PRIVATE ${_sycl_flags})
target_link_options(${_module} PRIVATE ${_sycl_flags})
# the bridge child finds the nightly runtime through LD_LIBRARY_PATH; the stock module
# uses whatever libsycl.so.8 torch-XPU already loaded
install(TARGETS ${_module} DESTINATION tq_sycl)
message(STATUS "tq-sycl: building ${_module} (scalar=${TQ_SYCL_KERNEL_SCALAR} esimd=${TQ_SYCL_KERNEL_ESIMD} "
               "jm=${TQ_SYCL_KERNEL_JM} aot='${TQ_SYCL_AOT_TARGET}')")
