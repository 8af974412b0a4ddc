# The git sha and the compiled-in features, for `vibevoice --version`.
execute_process(COMMAND git rev-parse --verify -q HEAD WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                OUTPUT_VARIABLE VV_GIT_SHA RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT _rc EQUAL 0 OR NOT VV_GIT_SHA MATCHES "^[0-9a-f]+$")
  set(VV_GIT_SHA "unknown")
endif()
