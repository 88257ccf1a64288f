# Sanitizer and fuzzing builds (make test-asan, make test-tsan, make fuzz); all need clang.
#
# KERNELSERVE_SANITIZE: sanitizers every target of the project is built with, as -fsanitize
#   takes them ("address,undefined" or "thread"); "" = none. UBSan stops at the first error.
# KERNELSERVE_FUZZ: also builds the libFuzzer harnesses of tests/fuzz; the project's code gets
#   libFuzzer's coverage instrumentation (and ASan + UBSan unless KERNELSERVE_SANITIZE says
#   otherwise).
# KERNELSERVE_TSAN_ABSEIL: prefix of an Abseil built with TSan by scripts/build-tsan-abseil.sh
#   (same version as Debian's). The binaries link against it and load it in place of Debian's
#   uninstrumented copy, for gRPC too, so that TSan sees absl::Mutex's synchronization.
set(KERNELSERVE_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined or thread")
option(KERNELSERVE_FUZZ "Build the libFuzzer harnesses of tests/fuzz (clang)" OFF)
set(KERNELSERVE_TSAN_ABSEIL "" CACHE PATH "Prefix of a TSan-instrumented Abseil")

if(KERNELSERVE_FUZZ AND KERNELSERVE_SANITIZE STREQUAL "")
  set(KERNELSERVE_SANITIZE "address,undefined" CACHE STRING "" FORCE)
endif()
if((KERNELSERVE_FUZZ OR KERNELSERVE_SANITIZE) AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "KERNELSERVE_SANITIZE / KERNELSERVE_FUZZ need clang: configure with "
                      "CC=clang-14 CXX=clang++-14")
endif()

if(KERNELSERVE_SANITIZE)
  add_compile_options(-fsanitize=${KERNELSERVE_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${KERNELSERVE_SANITIZE})
  if(KERNELSERVE_SANITIZE MATCHES "undefined")
    # vptr off: UBSan checks a vtable's memory through a pipe it opens, so with the descriptors
    # used up (the listener's tests do that on purpose) every virtual call "fails" the check.
    add_compile_options(-fno-sanitize-recover=all -fno-sanitize=vptr)
  endif()
  if(KERNELSERVE_SANITIZE MATCHES "thread")
    # gRPC's header code stays uninstrumented like its libraries (see the list).
    add_compile_options(-fsanitize-ignorelist=${PROJECT_SOURCE_DIR}/tests/tsan-ignorelist.txt)
  endif()
  message(STATUS "kernelserve: sanitizers ${KERNELSERVE_SANITIZE}")
endif()
if(KERNELSERVE_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link)
  message(STATUS "kernelserve: libFuzzer harnesses ON")
endif()

if(KERNELSERVE_TSAN_ABSEIL)
  if(NOT EXISTS ${KERNELSERVE_TSAN_ABSEIL}/lib/cmake/absl/abslConfig.cmake)
    message(FATAL_ERROR "KERNELSERVE_TSAN_ABSEIL=${KERNELSERVE_TSAN_ABSEIL} holds no Abseil: "
                        "run scripts/build-tsan-abseil.sh")
  endif()
  # find_package(absl), and gRPC's targets through it, resolve to the instrumented copy; the
  # rpath (DT_RPATH, which unlike DT_RUNPATH also serves the libraries' own dependencies) loads
  # it in place of Debian's for every library of the process.
  list(PREPEND CMAKE_PREFIX_PATH ${KERNELSERVE_TSAN_ABSEIL})
  add_link_options(-Wl,--disable-new-dtags -Wl,-rpath,${KERNELSERVE_TSAN_ABSEIL}/lib)
  message(STATUS "kernelserve: TSan-instrumented Abseil from ${KERNELSERVE_TSAN_ABSEIL}")
endif()
