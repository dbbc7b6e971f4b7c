# The steps the CMake script tests share (include()d by tests/*/..._test.cmake).

# Runs a command; on failure stops the test with its status, stdout and stderr.
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed (${status}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

# Sets `out_var` to what `xf_run` prints for `sentence` with `model` (input written into
# `work_dir`); stops on failure or an empty translation, which would make a comparison prove little.
function(xf_run_translation out_var xf_run model sentence work_dir)
  file(WRITE ${work_dir}/input.txt "${sentence}\n")
  execute_process(COMMAND ${xf_run} --model ${model} INPUT_FILE ${work_dir}/input.txt
    RESULT_VARIABLE status OUTPUT_VARIABLE translation ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${xf_run} failed (${status}): ${err}")
  endif()
  string(STRIP "${translation}" stripped)
  if(stripped STREQUAL "")
    message(FATAL_ERROR "xf-run printed an empty translation: the comparison would prove little")
  endif()
  set(${out_var} "${translation}" PARENT_SCOPE)
endfunction()

# Runs `program MODEL SENTENCE` and stops unless it prints `expected` exactly.
function(expect_translation program model sentence expected)
  execute_process(COMMAND ${program} ${model} ${sentence}
    RESULT_VARIABLE status OUTPUT_VARIABLE printed ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${program} failed (${status}): ${err}")
  endif()
  if(NOT printed STREQUAL expected)
    message(FATAL_ERROR "${program} printed '${printed}', xf-run '${expected}'")
  endif()
endfunction()
