# Locates llama.cpp/ggml and defines omni::llama and omni::ggml.
# Sets OMNI_LLAMA_CPP_SOURCE_DESC (for the log) and OMNI_LLAMA_CPP_RUNTIME_DIRS (extra run path).

function(_omni_from_prefix prefix)
  list(PREPEND CMAKE_PREFIX_PATH "${prefix}")
  find_package(ggml CONFIG REQUIRED)
  find_package(llama CONFIG REQUIRED)
  add_library(omni::llama INTERFACE IMPORTED GLOBAL)
  target_link_libraries(omni::llama INTERFACE llama)
  add_library(omni::ggml INTERFACE IMPORTED GLOBAL)
  target_link_libraries(omni::ggml INTERFACE ggml::ggml ggml::ggml-base)
endfunction()

function(_omni_from_source_tree src build)
  foreach(lib llama ggml ggml-base)
    string(MAKE_C_IDENTIFIER "OMNI_LIB_${lib}" var)
    find_library(${var} NAMES ${lib}
      PATHS "${build}/bin" "${build}/src" "${build}/ggml/src" "${build}/lib"
      NO_DEFAULT_PATH)
    if(NOT ${var})
      message(FATAL_ERROR "OMNI_LLAMA_CPP_DIR=${src}: lib${lib} not found under ${build} "
                          "(build llama.cpp with -DBUILD_SHARED_LIBS=ON first, or set OMNI_LLAMA_CPP_BUILD_DIR)")
    endif()
    get_filename_component(dir "${${var}}" DIRECTORY)
    list(APPEND runtime_dirs "${dir}")
  endforeach()
  add_library(omni::ggml INTERFACE IMPORTED GLOBAL)
  target_include_directories(omni::ggml INTERFACE "${src}/ggml/include")
  target_link_libraries(omni::ggml INTERFACE "${OMNI_LIB_ggml}" "${OMNI_LIB_ggml_base}")
  add_library(omni::llama INTERFACE IMPORTED GLOBAL)
  target_include_directories(omni::llama INTERFACE "${src}/include")
  target_link_libraries(omni::llama INTERFACE "${OMNI_LIB_llama}" omni::ggml)
  list(REMOVE_DUPLICATES runtime_dirs)
  set(OMNI_LLAMA_CPP_RUNTIME_DIRS "${runtime_dirs}" PARENT_SCOPE)
endfunction()

function(omni_find_llama_cpp)
  if(OMNI_LLAMA_CPP_DIR)
    get_filename_component(dir "${OMNI_LLAMA_CPP_DIR}" ABSOLUTE)
    if(EXISTS "${dir}/lib/cmake/llama/llama-config.cmake" OR EXISTS "${dir}/lib64/cmake/llama/llama-config.cmake")
      _omni_from_prefix("${dir}")
      set(OMNI_LLAMA_CPP_RUNTIME_DIRS "${dir}/lib;${dir}/lib64" PARENT_SCOPE)
      set(OMNI_LLAMA_CPP_SOURCE_DESC "install prefix ${dir} (OMNI_LLAMA_CPP_DIR)" PARENT_SCOPE)
    elseif(EXISTS "${dir}/include/llama.h" AND EXISTS "${dir}/ggml/include/ggml.h")
      set(build "${OMNI_LLAMA_CPP_BUILD_DIR}")
      if(NOT build)
        set(build "${dir}/build")
      endif()
      _omni_from_source_tree("${dir}" "${build}")
      set(OMNI_LLAMA_CPP_RUNTIME_DIRS "${OMNI_LLAMA_CPP_RUNTIME_DIRS}" PARENT_SCOPE)
      set(OMNI_LLAMA_CPP_SOURCE_DESC "source tree ${dir}, build ${build} (OMNI_LLAMA_CPP_DIR)" PARENT_SCOPE)
    else()
      message(FATAL_ERROR "OMNI_LLAMA_CPP_DIR=${dir} is neither a llama.cpp install prefix "
                          "(lib/cmake/llama) nor a llama.cpp source tree (include/llama.h)")
    endif()
    return()
  endif()

  # The pinned wheel installs include/ and lib/cmake/ at the top of site-packages.
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import importlib.util, os; s = importlib.util.find_spec('llama_cpp'); print(os.path.dirname(list(s.submodule_search_locations)[0]) if s else '')"
    OUTPUT_VARIABLE site OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT site OR NOT EXISTS "${site}/lib/cmake/llama/llama-config.cmake")
    message(FATAL_ERROR "llama-cpp-python==0.3.36 (with its include/ and lib/cmake/) was not found for "
                        "${Python_EXECUTABLE}. Install it, or point OMNI_LLAMA_CPP_DIR at a llama.cpp "
                        "install prefix or built source tree.")
  endif()
  _omni_from_prefix("${site}")
  set(OMNI_LLAMA_CPP_SOURCE_DESC "llama-cpp-python at ${site}" PARENT_SCOPE)
endfunction()
