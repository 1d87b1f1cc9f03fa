#include "core/model/family.hpp"

#include "core/model/gpt2.hpp"
#include "core/model/llama.hpp"

namespace shardlab {

Model build_model(const GPTConfig& cfg, const KernelChoice& kernels) {
  switch (cfg.family) {
    case ModelFamily::gpt2: return gpt2_model(cfg, kernels);
    case ModelFamily::llama: return llama_model(cfg, kernels);
  }
  return gpt2_model(cfg, kernels);  // not reached: every family is a case above
}

Model::Model(const GPTConfig& cfg) : Model(build_model(cfg)) {}

}  // namespace shardlab
