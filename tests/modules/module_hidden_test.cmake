# With the CUDA modules out of reach (XF_MODULE_PATH names an empty directory), xf-run still
# translates on the CPU and --device cuda fails with one line naming the missing module; no tool
# and not libxf is linked against a CUDA library.
# Variables: WORK_DIR, MODEL, XF_RUN, READELF, BINARIES (list: tools and libxf to check).
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/no-modules)
file(WRITE ${WORK_DIR}/input.txt "the dog runs to the river\n")

foreach(binary IN LISTS BINARIES)
  execute_process(COMMAND ${READELF} -d ${binary} OUTPUT_VARIABLE dynamic RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "readelf failed on ${binary}")
  endif()
  if(dynamic MATCHES "Shared library: \\[(libcuda|libcudart|libcublas|libnccl|libnv)[^]]*\\]")
    message(FATAL_ERROR "${binary} is linked against ${CMAKE_MATCH_0}")
  endif()
endforeach()

set(ENV{XF_MODULE_PATH} ${WORK_DIR}/no-modules)
execute_process(COMMAND ${XF_RUN} --model ${MODEL} --device cpu INPUT_FILE ${WORK_DIR}/input.txt
  RESULT_VARIABLE status OUTPUT_VARIABLE translation ERROR_VARIABLE err)
string(STRIP "${translation}" translation)
if(NOT status EQUAL 0 OR translation STREQUAL "")
  message(FATAL_ERROR "xf-run --device cpu without modules failed (${status}): ${err}")
endif()

execute_process(COMMAND ${XF_RUN} --model ${MODEL} --device cuda INPUT_FILE ${WORK_DIR}/input.txt
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(STRIP "${err}" err)
set(expected "xf-run: device cuda: module libxf_cuda_runtime.so not found in ${WORK_DIR}/no-modules (XF_MODULE_PATH sets where to look)")
if(NOT status EQUAL 1 OR NOT err STREQUAL expected)
  message(FATAL_ERROR "xf-run --device cuda without modules: exit ${status}, stderr '${err}', expected exit 1 and '${expected}'")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "without modules: cpu translates ('${translation}'), cuda says: ${err}")
