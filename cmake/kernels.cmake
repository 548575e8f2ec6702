# The CPU kernel sets (native/src/kernels): variant.cpp compiled once per ISA with that ISA's
# flags, all linked into the core; dispatch.cpp picks one at run time from what the CPU reports.
# Nothing here depends on the build machine's CPU: a wheel built on an AVX-512 host runs on an
# AVX2 or a baseline x86-64 one (and the reverse), because no flag reaches the other sources.
#
#   x86-64:  generic (the baseline), avx2 (AVX2 + FMA + F16C), avx512 (F/BW/VL/DQ, BF16 tiles
#            where the compiler knows AVX512_BF16)
#   aarch64: generic, neon (Advanced SIMD, part of every AArch64 target)
#   other:   generic
include(CheckCXXCompilerFlag)
get_filename_component(OMNI_KERNELS_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

function(omni_add_kernel_set target name)
  set(flags ${ARGN})
  if(flags)
    string(REPLACE ";" " " joined "${flags}")
    string(MAKE_C_IDENTIFIER "omni_flags_${name}" var)
    check_cxx_compiler_flag("${joined}" ${var})
    if(NOT ${var})
      message(STATUS "llama-omni-py: the compiler lacks ${joined}; no '${name}' CPU kernels")
      return()
    endif()
  endif()
  string(TOUPPER "${name}" upper)
  set(obj omni_kernels_${name})
  add_library(${obj} OBJECT ${OMNI_KERNELS_ROOT}/native/src/kernels/variant.cpp)
  target_include_directories(${obj} PRIVATE ${OMNI_KERNELS_ROOT}/native/src/kernels)
  target_compile_definitions(${obj} PRIVATE OMNI_KERNEL_SET=${name} OMNI_KERNEL_SET_${upper})
  target_compile_options(${obj} PRIVATE ${flags})
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${obj} PRIVATE -Wall -Wextra -fno-trapping-math)
  endif()
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:${obj}>)
  target_compile_definitions(${target} PRIVATE OMNI_HAVE_KERNELS_${upper})
  set_property(GLOBAL APPEND PROPERTY OMNI_KERNEL_OBJECTS ${obj})
  list(APPEND OMNI_KERNEL_SETS ${name})
  set(OMNI_KERNEL_SETS ${OMNI_KERNEL_SETS} PARENT_SCOPE)
endfunction()

function(omni_add_kernels target)
  set(OMNI_KERNEL_SETS "")
  target_sources(${target} PRIVATE ${OMNI_KERNELS_ROOT}/native/src/kernels/dispatch.cpp)
  omni_add_kernel_set(${target} generic)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    omni_add_kernel_set(${target} avx2 -mavx2 -mfma -mf16c)
    omni_add_kernel_set(${target} avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c)
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
    omni_add_kernel_set(${target} neon)
  endif()
  # Every symbol a set defines must be its own (internal) or its one table getter: a weak symbol
  # (an inline function or template instance compiled with the set's flags) could be merged with
  # a generic copy, and a generic caller would then run AVX-512 code.
  if(CMAKE_NM)
    get_property(objs GLOBAL PROPERTY OMNI_KERNEL_OBJECTS)
    foreach(obj ${objs})
      add_custom_command(TARGET ${target} PRE_LINK
        COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} "-DOBJECTS=$<TARGET_OBJECTS:${obj}>"
                -P ${OMNI_KERNELS_ROOT}/cmake/check_kernel_symbols.cmake
        VERBATIM)
    endforeach()
  endif()
  message(STATUS "llama-omni-py: CPU kernel sets ${OMNI_KERNEL_SETS} (${CMAKE_SYSTEM_PROCESSOR})")
endfunction()
