# The sgemm behind the CPU vocoder.
#   OMNI_BLAS=scipy-openblas (default): OpenBLAS from the scipy-openblas32 wheel -- runtime CPU
#     dispatch (Haswell/SkylakeX/Zen on x86-64, ARMv8/NeoverseN1/N2 on aarch64, e.g. Kunpeng),
#     installable with pip on both architectures, symbols prefixed so it never clashes with
#     another BLAS in the process.
#   OMNI_BLAS=system: a system cblas (e.g. Debian's libopenblas-dev), found with find_library.
set(OMNI_BLAS "$ENV{OMNI_BLAS}" CACHE STRING "scipy-openblas | system")
if(NOT OMNI_BLAS)
  set(OMNI_BLAS "scipy-openblas")
endif()

function(omni_find_blas)
  if(OMNI_BLAS STREQUAL "scipy-openblas")
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c
        "import scipy_openblas32 as s; print(s.get_include_dir()); print(s.get_lib_dir()); print(s.get_library())"
      OUTPUT_VARIABLE out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "scipy-openblas32 is not installed for ${Python_EXECUTABLE} "
                          "(pip install scipy-openblas32), or set OMNI_BLAS=system")
    endif()
    string(REPLACE "\n" ";" parts "${out}")
    list(GET parts 0 inc)
    list(GET parts 1 libdir)
    list(GET parts 2 libname)
    find_library(OMNI_BLAS_LIB NAMES ${libname} PATHS "${libdir}" NO_DEFAULT_PATH REQUIRED)
    add_library(omni::blas INTERFACE IMPORTED GLOBAL)
    target_include_directories(omni::blas INTERFACE "${inc}")
    target_link_libraries(omni::blas INTERFACE "${OMNI_BLAS_LIB}")
    target_compile_definitions(omni::blas INTERFACE OMNI_BLAS_SCIPY_OPENBLAS)
    set(OMNI_BLAS_RPATH "$ORIGIN/../scipy_openblas32/lib" PARENT_SCOPE)
  elseif(OMNI_BLAS STREQUAL "system")
    find_library(OMNI_BLAS_LIB NAMES openblas blis cblas blas REQUIRED)
    find_path(OMNI_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas REQUIRED)
    add_library(omni::blas INTERFACE IMPORTED GLOBAL)
    target_include_directories(omni::blas INTERFACE "${OMNI_CBLAS_INCLUDE}")
    target_link_libraries(omni::blas INTERFACE "${OMNI_BLAS_LIB}")
    set(OMNI_BLAS_RPATH "" PARENT_SCOPE)
  else()
    message(FATAL_ERROR "OMNI_BLAS must be scipy-openblas or system, got '${OMNI_BLAS}'")
  endif()
  message(STATUS "llama-omni-py: vocoder BLAS ${OMNI_BLAS} (${OMNI_BLAS_LIB})")
endfunction()
