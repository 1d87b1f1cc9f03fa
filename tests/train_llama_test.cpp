// The Llama family as stages (core/model/llama.hpp) and trained by the engine: the stages walked
// forward and backward against the fp64 reference of tests/llama_reference.hpp (loss and every
// gradient), for grouped-query and multi-query attention, tied and untied heads, biases and flash
// attention; then llama-tiny under every strategy, against one rank, against the naive kernel
// with flash, and its measured peak against the planner's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/file_io.hpp"
#include "core/checkpoint/hf_config.hpp"
#include "core/checkpoint/hf_safetensors.hpp"
#include "core/device/device.hpp"
#include "core/fsdp/memory_plan.hpp"
#include "core/memory/tracker.hpp"
#include "core/model/family.hpp"
#include "core/model/llama.hpp"
#include "core/train/trainer.hpp"
#include "tests/llama_reference.hpp"

using namespace shardlab;
using ref::Vec;

namespace {

struct Variant {
  const char* name;
  int n_kv_head;
  bool qkv_bias, tied;
  AttentionKernel attention;
};

GPTConfig micro(const Variant& v) {
  GPTConfig c{11, 6, 2, 4, 16};  // V 11, T 6, L 2, NH 4, C 16 (hs 4)
  c.family = ModelFamily::llama;
  c.n_kv_head = v.n_kv_head;
  c.ffn_dim = 12;
  c.rope_theta = 50.0f;
  c.qkv_bias = v.qkv_bias;
  c.tie_embeddings = v.tied;
  c.validate();
  return c;
}

// One flat fp32 buffer per stage (its parameters in params() order) and its gradient.
struct StageBuffers {
  std::vector<std::vector<float>> w, g;
};

// Forward and backward over every stage of `model`, each stage's gradient overwritten by its
// first writer as the engine's first micro-batch does; returns the loss.
float walk(Device& dev, const Model& model, StageBuffers& b, const std::vector<int>& tokens,
           const std::vector<int>& targets, int B, int T) {
  auto args = [&](int s, GradWrite own) {
    StageArgs a;
    a.own = {b.w[s].data(), b.g[s].data(), own};
    for (const TieRef& t : model.ties(s))
      a.tied.push_back(
          {b.w[t.owner].data() + t.offset, b.g[t.owner].data() + t.offset, GradWrite::overwrite});
    return a;
  };
  const MicroBatch batch{tokens.data(), targets.data(), B, T, 1.0f};
  std::unique_ptr<Pass> pass = model.begin(dev, batch);
  for (int s = 0; s < model.num_stages(); ++s) model.stage(s).forward(*pass, args(s, {}));
  pass->begin_backward();
  for (int s = model.num_stages() - 1; s >= 0; --s) {
    model.stage(s).backward(*pass, args(s, GradWrite::overwrite));
    model.stage(s).release(*pass);
  }
  pass->end_backward();
  return pass->loss;
}

class LlamaStagesTest : public ::testing::TestWithParam<Variant> {
 protected:
  MemoryTracker tracker{0};
  std::unique_ptr<Device> dev = make_cpu_device(tracker);
};

TrainConfig llama_config(Strategy s, int ranks) {
  TrainConfig c;
  c.model = "llama-tiny";
  c.steps = 6;
  c.batch = 8;
  c.seq = 32;
  c.warmup = 0;
  c.ranks = ranks;
  c.synthetic.vocab = 32;
  c.synthetic.tokens = 20000;
  c.engine.optim.lr = 1e-2f;
  c.engine.strategy = s;
  c.run_dir.clear();
  return c;
}

TrainResult train(const TrainConfig& c) {
  std::ostringstream out;
  return run_training(c, out);
}

}  // namespace

TEST_P(LlamaStagesTest, LossAndEveryGradientAgainstTheReference) {
  const GPTConfig cfg = micro(GetParam());
  const Model model = build_model(cfg, {GetParam().attention});
  ASSERT_EQ(model.family(), "llama");
  ASSERT_EQ(model.num_stages(), 2 * cfg.n_layer + 2);
  EXPECT_EQ(model.num_params(), cfg.num_params());
  const int B = 2, T = 6, L = cfg.n_layer;
  const std::vector<int> tokens = {1, 5, 3, 9, 0, 10, 4, 4, 7, 2, 8, 6};
  const std::vector<int> targets = {5, 3, 9, 0, 10, 4, 4, 7, 2, 8, 6, 1};

  // Values: norms around 1, the rest small (the stages' own init would make every norm exactly 1).
  StageBuffers b;
  for (int s = 0; s < model.num_stages(); ++s) {
    std::vector<float> w = ref::random_floats(static_cast<size_t>(model.stage(s).numel()),
                                              static_cast<uint32_t>(100 + s), 0.3f);
    int64_t at = 0;
    for (const StageParam& p : model.stage(s).params()) {
      if (p.name.find("norm") != std::string::npos)
        for (int64_t i = 0; i < p.numel(); ++i) w[static_cast<size_t>(at + i)] += 1.0f;
      at += p.numel();
    }
    b.w.push_back(w);
    b.g.emplace_back(w.size(), 7.0f);  // overwritten, never read
  }
  const float loss = walk(*dev, model, b, tokens, targets, B, T);

  // The reference on the same values: stage 0 is embed_tokens, stages 1 + 2l and 2 + 2l are the
  // halves in llama_*_views order, the head is norm and (untied) lm_head.
  const int head = 2 * L + 1;
  Vec e = ref::to_double(b.w[0]), hs = ref::to_double(b.w[head]);
  std::vector<Vec> at, ml;
  for (int l = 0; l < L; ++l)
    at.push_back(ref::to_double(b.w[1 + 2 * l])), ml.push_back(ref::to_double(b.w[2 + 2 * l]));
  const int C = cfg.n_embd;
  auto f = [&] {
    const Vec norm(hs.begin(), hs.begin() + C), lm(hs.begin() + C, hs.end());
    return ref::llama_loss(cfg, e, at, ml, norm, lm, tokens.data(), targets.data(), B, T);
  };
  EXPECT_NEAR(loss, f(), 1e-5);
  constexpr double kTol = 1e-4;
  EXPECT_LT(ref::scaled_max_error(b.g[0], ref::numeric_grad(e, f)), kTol) << "embed_tokens";
  EXPECT_LT(ref::scaled_max_error(b.g[head], ref::numeric_grad(hs, f)), kTol) << "head";
  for (int l = 0; l < L; ++l) {
    EXPECT_LT(ref::scaled_max_error(b.g[1 + 2 * l], ref::numeric_grad(at[l], f)), kTol)
        << "layer " << l << " attn";
    EXPECT_LT(ref::scaled_max_error(b.g[2 + 2 * l], ref::numeric_grad(ml[l], f)), kTol)
        << "layer " << l << " mlp";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LlamaStagesTest,
    ::testing::Values(Variant{"gqa", 2, false, false, AttentionKernel::naive},
                      Variant{"gqa_flash", 2, false, false, AttentionKernel::flash},
                      Variant{"mqa_tied_flash", 1, false, true, AttentionKernel::flash},
                      Variant{"qwen2_biases_tied", 2, true, true, AttentionKernel::naive}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LlamaStages, HuggingFaceNamesAndShapes) {
  const GPTConfig cfg = GPTConfig::preset("llama-tiny");
  const Model model = build_model(cfg);
  std::vector<std::string> names, hf;
  for (int s = 0; s < model.num_stages(); ++s)
    for (const StageParam& p : model.stage(s).params()) {
      names.push_back(p.name);
      hf.push_back(p.hf_name);
    }
  ASSERT_EQ(names.size(), 2u + 9u * cfg.n_layer + (cfg.tie_embeddings ? 0u : 1u));
  EXPECT_EQ(hf.front(), "model.embed_tokens.weight");
  EXPECT_EQ(names[1], "layers.0.input_layernorm.weight");
  EXPECT_EQ(names[3], "layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(hf.back(), "lm_head.weight");  // untied: beside the body, not under model.
  EXPECT_EQ(model.stage(1).params()[2].shape,
            (std::vector<int64_t>{int64_t{cfg.kv_heads()} * cfg.head_dim(), cfg.n_embd}));
  EXPECT_EQ(model.num_params(), cfg.num_params());
}

// The parameters a run ends with, as the bytes of their export (one .safetensors file).
std::string final_params(TrainConfig c, const std::string& name) {
  const std::string dir = testing::TempDir() + "/llama_params_" + name;
  remove_all(dir);
  c.save_every = c.steps;
  c.ckpt_dir = dir;
  train(c);
  export_safetensors(dir, dir + "/params.safetensors", DType::f32);
  return read_text_file(dir + "/params.safetensors");
}

TEST(TrainLlama, EveryStrategyIsBitIdenticalAndFollowsOneRank) {
  const TrainResult one = train(llama_config(Strategy::no_shard, 1));
  const TrainResult ddp = train(llama_config(Strategy::no_shard, 4));
  // Not only the losses: the parameters after the last step, byte for byte.
  const std::string ddp_params = final_params(llama_config(Strategy::no_shard, 4), "ddp");
  for (Strategy s : {Strategy::shard_optim, Strategy::shard_grad_op, Strategy::full_shard})
    EXPECT_EQ(final_params(llama_config(s, 4), strategy_name(s)), ddp_params) << strategy_name(s);
  ASSERT_EQ(one.losses.size(), 6u);
  EXPECT_LT(one.losses.back(), one.losses.front() - 0.5f);
  for (size_t i = 0; i < one.losses.size(); ++i)
    EXPECT_NEAR(ddp.losses[i], one.losses[i], 1e-5) << "step " << i;
  for (Strategy s : {Strategy::shard_optim, Strategy::shard_grad_op, Strategy::full_shard})
    EXPECT_EQ(train(llama_config(s, 4)).losses, ddp.losses) << strategy_name(s);
  // Every wrap policy groups the same stages differently: the same bits.
  for (const char* wrap : {"layer", "whole", "blocks:2", "size:20000"}) {
    TrainConfig c = llama_config(Strategy::full_shard, 4);
    c.engine.wrap = wrap;
    EXPECT_EQ(train(c).losses, ddp.losses) << "--wrap " << wrap;
  }
  TrainConfig h = llama_config(Strategy::hybrid_shard, 4);
  h.engine.hybrid_group = 2;
  const TrainResult hybrid = train(h);
  for (size_t i = 0; i < ddp.losses.size(); ++i)
    EXPECT_NEAR(hybrid.losses[i], ddp.losses[i], 1e-5) << "hybrid_shard step " << i;
}

TEST(TrainLlama, FlashFollowsNaiveAndPlansMatchTheRun) {
  TrainConfig c = llama_config(Strategy::full_shard, 2);
  c.attention = AttentionKernel::flash;
  const TrainResult flash = train(c);
  c.attention = AttentionKernel::naive;
  const TrainResult naive = train(c);
  double worst = 0;
  for (size_t i = 0; i < naive.losses.size(); ++i)
    worst = std::fmax(worst, std::fabs(static_cast<double>(flash.losses[i]) - naive.losses[i]));
  std::printf("llama-tiny: max |loss flash - loss naive| over %zu steps: %.3g\n",
              naive.losses.size(), worst);
  EXPECT_LT(worst, 1e-4);
  for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash}) {
    c.attention = k;
    const TrainResult r = k == AttentionKernel::flash ? flash : naive;
    PlanInput in = plan_input(c.engine, 2, build_model(c.model_config(), c.kernels()), 4, 32, 1);
    in.token_buffers = true;
    EXPECT_EQ(r.peak_bytes, plan_memory(in).peak_total()) << attention_kernel_name(k);
  }
}

TEST(TrainLlama, ActCkptAccumulationAndClippingKeepTheBits) {
  TrainConfig c = llama_config(Strategy::full_shard, 2);
  c.accum = 2;
  c.engine.clip = 0.5f;
  const TrainResult plain = train(c);
  c.engine.act_ckpt = true;
  EXPECT_EQ(train(c).losses, plain.losses) << "--act-ckpt recomputes the same values";
}

TEST(TrainLlama, ExportsASavePretrainedDirectoryThatTrainsOn) {
  const std::string work = testing::TempDir() + "/llama_export";
  remove_all(work);
  TrainConfig c = llama_config(Strategy::full_shard, 2);
  c.steps = 40;
  c.save_every = 40;
  c.ckpt_dir = work + "/ckpt";
  const TrainResult trained = train(c);
  const std::string hf = work + "/hf";
  EXPECT_EQ(export_hf_directory(c.ckpt_dir, hf, DType::f32), 21);
  // config.json gives back the shape; the tensors carry LlamaForCausalLM's names.
  EXPECT_EQ(read_hf_config(hf), c.model_config());
  HfTensors files(hf);
  const SafetensorsFile* where = nullptr;
  EXPECT_NE(files.find("model.layers.1.self_attn.k_proj.weight", &where), nullptr);
  EXPECT_NE(files.find("lm_head.weight", &where), nullptr);
  EXPECT_EQ(files.find("layers.1.self_attn.k_proj.weight", &where), nullptr);
  // A run from the directory starts where the first one ended, far below a fresh model's loss.
  TrainConfig from = llama_config(Strategy::no_shard, 1);
  from.hf_config = hf;
  from.init_from = hf;
  from.steps = 1;
  const TrainResult again = train(from);
  std::printf("llama-tiny: fresh %.4f, after 40 steps %.4f, first step from the export %.4f\n",
              trained.losses.front(), trained.losses.back(), again.losses.front());
  EXPECT_LT(again.losses.front(), trained.losses.front() - 1.0f);
  EXPECT_NEAR(again.losses.front(), trained.losses.back(), 0.3);
}

TEST(TrainLlama, ResumesOnAnotherStrategyAndRankCount) {
  const std::string work = testing::TempDir() + "/llama_resume";
  remove_all(work);
  // A constant rate: a 3-step run's cosine would end where the 6-step run's is halfway.
  TrainConfig straight = llama_config(Strategy::full_shard, 2);
  straight.schedule = LrSchedule::constant;
  const TrainResult whole = train(straight);  // 6 steps
  TrainConfig first = straight;
  first.steps = 3;
  first.save_every = 3;
  first.ckpt_dir = work;
  train(first);
  TrainConfig second = llama_config(Strategy::shard_grad_op, 4);
  second.schedule = LrSchedule::constant;
  second.resume = work;
  const TrainResult rest = train(second);
  ASSERT_EQ(rest.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(rest.losses[i], whole.losses[3 + i], 1e-5) << "step " << 4 + i;
}
