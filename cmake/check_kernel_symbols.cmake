# cmake -DNM=<nm> -DOBJECTS=<a.o;b.o> -P check_kernel_symbols.cmake
# Fails when a kernel-set object defines a weak or unique symbol: such a body is compiled with the
# set's ISA flags, and the linker may keep it for callers on any CPU (see cmake/kernels.cmake).
foreach(obj ${OBJECTS})
  execute_process(COMMAND ${NM} -C --defined-only ${obj} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line ${lines})
    if(line MATCHES "^[0-9a-fA-F]+ [WVu] (.*)$")
      message(FATAL_ERROR "kernel set object ${obj} defines the shared symbol '${CMAKE_MATCH_1}': "
                          "keep kernel-set code in an anonymous namespace and off inline library templates")
    endif()
  endforeach()
endforeach()
