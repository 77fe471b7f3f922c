# intel/llvm nightly ("sycl-nightly" release archive, or a local build), clang++ -fsycl.
# Point TQ_SYCL_NIGHTLY_ROOT at the directory holding bin/clang++ and lib/libsycl.so.*.
# Use with -DTQ_SYCL_BACKEND=nightly. The module this builds links libsycl.so.9 and runs
# only in tq_sycl's bridge child process.
set(TQ_SYCL_TOOLCHAIN_FLAVOR nightly)
set(_tq_root "$ENV{TQ_SYCL_NIGHTLY_ROOT}")
if(NOT _tq_root)
  message(FATAL_ERROR "TQ_SYCL_NIGHTLY_ROOT is not set: point it at an intel/llvm nightly (bin/clang++, lib/libsycl.so.*)")
endif()
if(NOT EXISTS "${_tq_root}/bin/clang++")
  message(FATAL_ERROR "TQ_SYCL_NIGHTLY_ROOT=${_tq_root}: no bin/clang++ there")
endif()
set(CMAKE_CXX_COMPILER "${_tq_root}/bin/clang++")
set(CMAKE_C_COMPILER "${_tq_root}/bin/clang")
set(CMAKE_BUILD_RPATH "${_tq_root}/lib")
