# Llama-family models at the command line: llama-tiny trains, a Hugging Face config.json gives the
# same plan as the preset of its shape, and a bad config.json is refused naming the file and field.
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

run_ok(out train --model llama-tiny --ranks 2 --steps 3 --batch 4 --seq 32 --trace off)
if(NOT out MATCHES "shardlab train: model llama-tiny llama V=256")
  message(FATAL_ERROR "llama-tiny: no model line naming the Llama shape:\n${out}")
endif()
if(NOT out MATCHES "final loss [0-9.]+")
  message(FATAL_ERROR "llama-tiny: no final loss:\n${out}")
endif()

# Meta-Llama-3-8B's config.json as the hub publishes it (the fields a shape needs, and others).
file(WRITE ${WORK_DIR}/llama3-8b/config.json [=[{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "vocab_size": 128256
}]=])
set(plan_args --ranks 8 --batch 1 --seq 2048 --cluster h100-sxm --param-dtype bf16
    --reduce-dtype bf16 --attention flash)
run_ok(by_preset plan --model llama3-8b ${plan_args})
run_ok(by_config plan --hf-config ${WORK_DIR}/llama3-8b ${plan_args})
if(NOT by_preset MATCHES "8,030,261,248 params")
  message(FATAL_ERROR "llama3-8b: not Hugging Face's 8,030,261,248 parameters:\n${by_preset}")
endif()
# The same plan but for the name on the first line.
string(REGEX REPLACE "^model [^:]*:" "" a "${by_preset}")
string(REGEX REPLACE "^model [^:]*:" "" b "${by_config}")
if(NOT a STREQUAL b)
  message(FATAL_ERROR "plan --hf-config differs from --model llama3-8b:\n${by_preset}\n---\n${by_config}")
endif()

# Bad config.json files name the file and the field.
file(WRITE ${WORK_DIR}/no_layers.json [=[{"model_type": "llama", "hidden_size": 64,
  "intermediate_size": 176, "num_attention_heads": 4, "vocab_size": 256}]=])
expect_error(missing_field "no_layers\\.json.*num_hidden_layers"
             plan --hf-config ${WORK_DIR}/no_layers.json)
file(WRITE ${WORK_DIR}/kv.json [=[{"model_type": "llama", "hidden_size": 64,
  "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 3,
  "num_hidden_layers": 2, "vocab_size": 256}]=])
expect_error(kv_not_dividing "kv\\.json: field 'num_key_value_heads' = 3 does not divide"
             train --hf-config ${WORK_DIR}/kv.json --steps 1)
file(WRITE ${WORK_DIR}/bert.json [=[{"model_type": "bert", "hidden_size": 64}]=])
expect_error(unknown_type "bert\\.json: field 'model_type' = \"bert\" is not a model type.*llama"
             plan --hf-config ${WORK_DIR}/bert.json)
