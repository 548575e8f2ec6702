# Writes ${OUT}: the git commit and dirty flag of the source tree ${SRC} at build time, so an
# installed package can name the code it runs (benchmark manifests). Run at every build; the
# file is rewritten only when its content changes.
set(commit "null")
set(dirty "null")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse HEAD WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    set(commit "\"${head}\"")
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                    OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(changes STREQUAL "")
      set(dirty "false")
    else()
      set(dirty "true")
    endif()
  endif()
endif()
set(content "{\"git_commit\": ${commit}, \"git_dirty\": ${dirty}}\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL content)
  file(WRITE ${OUT} "${content}")
endif()
