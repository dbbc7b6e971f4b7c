# `cmake --install` of everything into a temporary prefix, then:
# - bin/ holds the tools (the six of issue 27, xf-join, and issue 39's xf-distill and
#   xf-shortlist), and the installed xf-run translates;
# - include/ holds the public headers only (the C API, the C++ API and the two format headers
#   it includes), not format/'s reader, writer or schema;
# - examples/c_api, a C-only CMake project (C89, -pedantic-errors), builds with find_package(xf);
# - the same source builds as C99 from `pkg-config --cflags --libs xf` alone;
# and both programs translate a sentence exactly as the installed xf-run does.
# Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR, MODEL, C_COMPILER, PKG_CONFIG, SHARED.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

include(${CMAKE_CURRENT_LIST_DIR}/../common/steps.cmake)

run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

set(tools xf-train xf-convert xf-inspect xf-eval xf-bench xf-run xf-join xf-distill xf-shortlist)
foreach(tool ${tools})
  if(NOT EXISTS ${prefix}/bin/${tool})
    message(FATAL_ERROR "not installed: bin/${tool}")
  endif()
endforeach()
file(GLOB installed_tools RELATIVE ${prefix}/bin ${prefix}/bin/*)
list(SORT installed_tools)
list(SORT tools)
if(NOT installed_tools STREQUAL tools)
  message(FATAL_ERROR "bin/ holds ${installed_tools}, not the tools ${tools}")
endif()

file(GLOB_RECURSE headers RELATIVE ${prefix}/include ${prefix}/include/*)
list(SORT headers)
set(public_headers xf/dtype.h xf/error.h xf/export.h xf/format/config.h xf/format/file_access.h
  xf/model.h xf/model_math.h xf/sentences.h xf/translation_types.h xf/translator.h xf/xf.h)
if(NOT headers STREQUAL public_headers)
  message(FATAL_ERROR "installed headers: ${headers}\nexpected the public ones: ${public_headers}")
endif()

# What the installed xf-run says, to compare with.
set(sentence "the dog runs to the river")
if(SHARED)
  set(ENV{LD_LIBRARY_PATH} "${prefix}/lib:$ENV{LD_LIBRARY_PATH}")
endif()
xf_run_translation(expected ${prefix}/bin/xf-run ${MODEL} "${sentence}" ${WORK_DIR})

# A C-only CMake consumer (the project enables no C++).
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/c_api -B ${WORK_DIR}/cmake-build
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-build)
expect_translation(${WORK_DIR}/cmake-build/translate_c ${MODEL} "${sentence}" "${expected}")

# A pkg-config consumer: nothing but the .pc file's flags.
set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs xf
  RESULT_VARIABLE status OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs xf failed (${status}): ${err}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run_step(${C_COMPILER} -std=c99 -Wall -Wextra -pedantic-errors -Werror
  ${SOURCE_DIR}/examples/c_api/translate.c ${flags} -o ${WORK_DIR}/translate_pkg_config)
expect_translation(${WORK_DIR}/translate_pkg_config ${MODEL} "${sentence}" "${expected}")
message(STATUS "the tools, public headers only; the CMake C89 and pkg-config C99 consumers agree with xf-run: ${expected}")
