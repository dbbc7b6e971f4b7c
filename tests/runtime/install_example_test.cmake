# Installs the xf_sdk component into a temporary prefix, builds examples/embed against it with
# find_package(xf), and checks that it translates a sentence exactly as xf-run does.
# With a shared libxf (SONAME set), the example must load it, and no other xf library.
# In a CUDA build the device modules are installed beside the library, and the package still
# builds the example without looking for a CUDA toolkit.
# Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR, MODEL, XF_RUN, READELF, SONAME (empty: static),
# WITH_CUDA.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/../common/steps.cmake)

run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix --component xf_sdk)
foreach(installed include/xf/translator.h include/xf/xf.h include/xf/export.h lib/cmake/xf/xfConfig.cmake)
  if(NOT EXISTS ${WORK_DIR}/prefix/${installed})
    message(FATAL_ERROR "not installed: ${installed}")
  endif()
endforeach()
if(WITH_CUDA)
  foreach(module libxf_cuda_runtime.so libxf_cuda_trainer.so)
    if(NOT EXISTS ${WORK_DIR}/prefix/lib/${module})
      message(FATAL_ERROR "not installed: lib/${module}")
    endif()
  endforeach()
endif()
file(READ ${WORK_DIR}/prefix/lib/cmake/xf/xfConfig.cmake config)
if(config MATCHES "CUDAToolkit")
  message(FATAL_ERROR "the installed package looks for the CUDA toolkit")
endif()
run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/embed -B ${WORK_DIR}/build
  -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

if(SONAME)
  execute_process(COMMAND ${READELF} -d ${WORK_DIR}/build/embed OUTPUT_VARIABLE dynamic)
  if(NOT dynamic MATCHES "Shared library: \\[${SONAME}\\]")
    message(FATAL_ERROR "embed does not load ${SONAME}:\n${dynamic}")
  endif()
  if(dynamic MATCHES "Shared library: \\[(libcuda|libcublas)")
    message(FATAL_ERROR "embed loads a CUDA library:\n${dynamic}")
  endif()
endif()

set(sentence "the dog runs to the river")
xf_run_translation(expected ${XF_RUN} ${MODEL} "${sentence}" ${WORK_DIR})
expect_translation(${WORK_DIR}/build/embed ${MODEL} "${sentence}" "${expected}")
message(STATUS "embed and xf-run agree: ${expected}")
