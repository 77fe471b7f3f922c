# Stock oneAPI DPC++/C++ (icpx). Finds it under $ONEAPI_ROOT (set by setvars.sh), then
# /opt/intel/oneapi, then PATH. Use with -DTQ_SYCL_BACKEND=stock.
set(TQ_SYCL_TOOLCHAIN_FLAVOR stock)
set(_tq_oneapi "$ENV{ONEAPI_ROOT}")
if(NOT _tq_oneapi)
  set(_tq_oneapi "/opt/intel/oneapi")
endif()
find_program(TQ_ICPX icpx HINTS "${_tq_oneapi}/compiler/latest/bin" REQUIRED)
set(CMAKE_CXX_COMPILER "${TQ_ICPX}")
get_filename_component(_tq_bin "${TQ_ICPX}" DIRECTORY)
find_program(TQ_ICX icx HINTS "${_tq_bin}")
if(TQ_ICX)
  set(CMAKE_C_COMPILER "${TQ_ICX}")
endif()
