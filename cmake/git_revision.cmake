# Writes OUTPUT (a header defining KERNELSERVE_GIT) with the checkout's short commit, "+dirty"
# when the work tree has changes, or "unknown" outside a git checkout. Rewrites the file only
# when the value changed, so that a build without new commits recompiles nothing.
#   cmake -DSOURCE_DIR=... -DOUTPUT=... [-DREVISION=...] -P git_revision.cmake
# REVISION, when given and not empty, is used as it is (an image built without .git).
if(DEFINED REVISION AND NOT REVISION STREQUAL "")
  set(revision "${REVISION}")
  set(failed 0)
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE failed ERROR_QUIET)
endif()
if(failed OR revision STREQUAL "")
  set(revision "unknown")
elseif(NOT DEFINED REVISION OR REVISION STREQUAL "")
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND revision "+dirty")
  endif()
endif()
set(content "#define KERNELSERVE_GIT \"${revision}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUTPUT}" "${content}")
endif()
