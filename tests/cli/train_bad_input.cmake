# `shardlab train` and `shardlab data` on bad input: each exits non-zero with one clear line that
# names the file, field or value at fault.
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

# A missing data file names the path.
expect_error(missing_file "no_such_file\\.txt: cannot open for reading: No such file"
             train --model tiny --steps 1 --data ${WORK_DIR}/no_such_file.txt)

# A .bin that is not an llm.c shard: its first four bytes ("This") are read as the magic.
string(REPEAT "This is text, not a token shard. " 40 text)
file(WRITE ${WORK_DIR}/not_a_shard.bin "${text}")
# "This" little-endian: 0x73696854 = 1936287828.
set(want "token file '.*not_a_shard\\.bin': bad magic 1936287828 \\(expected 20240520")
expect_error(wrong_magic "${want}"
             train --model tiny --steps 1 --data ${WORK_DIR}/not_a_shard.bin)

# A truncated body: a valid shard cut short names the expected and the actual size.
file(WRITE ${WORK_DIR}/words.txt "${text}")
run_ok(out data encode ${WORK_DIR}/words.txt ${WORK_DIR}/words.bin)
string(LENGTH "${text}" n)
math(EXPR full "1024 + 2 * ${n}")
math(EXPR cut "${full} - 100")
execute_process(COMMAND head -c ${cut} ${WORK_DIR}/words.bin OUTPUT_FILE ${WORK_DIR}/cut.bin
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "head -c failed")
endif()
set(want "token file '.*cut\\.bin': truncated: header says ${n} tokens, ")
string(APPEND want "expected ${full} bytes, file has ${cut}")
expect_error(truncated "${want}"
             train --model tiny --steps 1 --data ${WORK_DIR}/cut.bin)
expect_error(truncated_info "cut\\.bin': truncated" data info ${WORK_DIR}/cut.bin)

# Invalid model configs name the field and the value.
expect_error(heads_not_dividing "n_head 5.*n_embd 256" train --model small --n-head 5 --steps 1)
expect_error(unknown_preset "huge" train --model huge --steps 1)
expect_error(seq_too_long "--seq 100 exceeds the model's max_seq_len 64"
             train --model tiny --seq 100 --steps 1)

# An attention kernel that does not exist names the option and the choices, in train and plan.
expect_error(unknown_attention "--attention 'flash2': the attention kernels are naive and flash"
             train --model tiny --steps 1 --attention flash2)
expect_error(plan_unknown_attention "--attention 'fast'"
             plan --model tiny --attention fast)

# Bad loop and optimizer values.
expect_error(negative_steps "--steps -5: the step count must be >= 0"
             train --model tiny --steps -5)
expect_error(unknown_optimizer "unknown optimizer 'lion'" train --model tiny --optimizer lion)
expect_error(negative_lr "lr -1" train --model tiny --lr -1 --steps 1)

# Encoding a missing file names it.
expect_error(encode_missing "absent\\.txt: cannot open for reading"
             data encode ${WORK_DIR}/absent.txt ${WORK_DIR}/absent.bin)

# A binding other than core or none names the option.
expect_error(bad_bind "--bind-to 'socket': expected core or none"
             train --model tiny --steps 1 --bind-to socket)
