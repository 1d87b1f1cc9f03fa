// Checkpoints through run_training (the code `shardlab train --save-every/--resume/--init-from`
// runs): a run resumed from `latest` continues with the same losses and ends with the same
// checkpoint files as the uninterrupted run; what does not fit is refused before any rank starts,
// naming the option; --init-from loads exactly the exported parameters.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/hf_safetensors.hpp"
#include "core/checkpoint/index.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/comm/launcher.hpp"
#include "core/train/engine_stepper.hpp"
#include "core/train/train_checkpoint.hpp"
#include "core/train/trainer.hpp"

using namespace shardlab;

namespace {

std::string scratch_dir(const std::string& name) {
  const std::string d = (std::filesystem::temp_directory_path() /
                         ("shardlab_trainckpt_" + name + "_" + std::to_string(::getpid())))
                            .string();
  remove_all(d);
  make_dirs(d);
  return d;
}

TrainConfig ckpt_config(const std::string& ckpt_dir) {
  TrainConfig c;
  c.model = "tiny";
  c.steps = 12;
  c.batch = 4;
  c.seq = 32;
  c.warmup = 3;
  c.synthetic.vocab = 32;
  c.synthetic.tokens = 3000;
  c.engine.optim.lr = 1e-2f;
  c.ranks = 2;
  c.save_every = 6;
  c.ckpt_dir = ckpt_dir;
  return c;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TrainCheckpoint, ResumeFromLatestContinuesTheSameRun) {
  const std::string dir = scratch_dir("latest");
  std::ostringstream log_a;
  const TrainConfig a = ckpt_config(dir);
  const TrainResult ra = run_training(a, log_a);
  ASSERT_EQ(ra.losses.size(), 12u);
  EXPECT_EQ(ra.last_checkpoint, join_path(dir, "step-12"));
  EXPECT_NE(log_a.str().find("saved " + join_path(dir, "step-6")), std::string::npos)
      << log_a.str();
  const std::string want0 = read_text_file(join_path(dir, "step-12/shard-0.bin"));
  const std::string want1 = read_text_file(join_path(dir, "step-12/shard-1.bin"));
  const CheckpointIndex ix = read_index(join_path(dir, "step-12"));
  EXPECT_EQ(ix.meta.step, 12);
  EXPECT_EQ(ix.meta.optimizer_step, 12);
  EXPECT_EQ(ix.meta.world_size, 2);
  EXPECT_EQ(ix.meta.loader.at("position"), 12);
  EXPECT_EQ(ix.meta.extra.at("train").at("lr"), a.engine.optim.lr);

  // As if the run died after step 6's checkpoint: `latest` names step-6 again.
  write_file_atomic(join_path(dir, "latest"), "step-6\n");
  TrainConfig b = a;
  b.resume = "latest";
  std::ostringstream log_b;
  const TrainResult rb = run_training(b, log_b);
  EXPECT_EQ(rb.start_step, 6);
  EXPECT_NE(log_b.str().find("resumed from " + join_path(dir, "step-6") + " at step 6"),
            std::string::npos)
      << log_b.str();
  ASSERT_EQ(rb.losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i)
    EXPECT_EQ(std::memcmp(&rb.losses[i], &ra.losses[6 + i], 4), 0)
        << "step " << 7 + i << ": " << rb.losses[i] << " vs " << ra.losses[6 + i];
  // The resumed run's step-12 checkpoint replaced the first one: byte for byte the same shards.
  EXPECT_TRUE(read_text_file(join_path(dir, "step-12/shard-0.bin")) == want0);
  EXPECT_TRUE(read_text_file(join_path(dir, "step-12/shard-1.bin")) == want1);
  EXPECT_EQ(read_text_file(join_path(dir, "latest")), "step-12\n");
  remove_all(dir);
}

TEST(TrainCheckpoint, ResumeRefusesWhatDoesNotFitBeforeStarting) {
  const std::string dir = scratch_dir("refuse");
  TrainConfig a = ckpt_config(dir);
  a.steps = 6;
  std::ostringstream log;
  run_training(a, log);
  const int64_t n = 3000;
  const std::string step6 = join_path(dir, "step-6");

  TrainConfig b = a;
  b.steps = 12;
  EXPECT_EQ(check_resume(dir, b, n), step6);  // a root resolves through `latest`
  EXPECT_EQ(check_resume(step6, b, n), step6);

  TrainConfig other = b;
  other.n_layer = 3;
  EXPECT_NE(error_of([&] { check_resume(dir, other, n); })
                .find("model_config.n_layer: "
                      "checkpoint 2, this run 3"),
            std::string::npos);
  other = b;
  other.batch = 8;
  EXPECT_NE(
      error_of([&] { check_resume(dir, other, n); }).find("batch 4, this run has 8 (--batch)"),
      std::string::npos)
      << error_of([&] { check_resume(dir, other, n); });
  other = b;
  other.engine.seed = 7;
  EXPECT_NE(error_of([&] { check_resume(dir, other, n); }).find("(--seed)"), std::string::npos);
  EXPECT_NE(error_of([&] { check_resume(dir, b, n + 1); }).find("(--data)"), std::string::npos);
  other = b;
  other.steps = 5;
  EXPECT_NE(error_of([&] { check_resume(dir, other, n); }).find("at step 6, past --steps 5"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { check_resume(join_path(dir, "nothing"), b, n); }).find("not a checkpoint"),
      std::string::npos);
  // And run_training refuses the same way, as one error.
  other = b;
  other.resume = "latest";
  other.batch = 8;
  EXPECT_NE(error_of([&] { run_training(other, log); }).find("--batch"), std::string::npos);
  remove_all(dir);
}

TEST(TrainCheckpoint, OptionsThatNeedEachOtherAreChecked) {
  TrainConfig c;
  auto err = [&] { return error_of([&] { c.validate(); }); };
  EXPECT_EQ(err(), "");
  c.save_every = 5;
  EXPECT_NE(err().find("--save-every 5 needs --ckpt-dir"), std::string::npos) << err();
  c = TrainConfig{};
  c.resume = "latest";
  EXPECT_NE(err().find("--resume latest needs --ckpt-dir"), std::string::npos) << err();
  c.ckpt_dir = "ckpt";
  EXPECT_EQ(err(), "");
  EXPECT_EQ(c.resume_path(), "ckpt");
  c.init_from = "x.safetensors";
  EXPECT_NE(err().find("--resume and --init-from"), std::string::npos) << err();
  c = TrainConfig{};
  c.device = "cuda";
  EXPECT_NE(err().find("--device cuda needs --backend nccl"), std::string::npos) << err();
  c.backend = "nccl";
  EXPECT_EQ(err(), "");
  c.device = "cpu";
  EXPECT_NE(err().find("--backend nccl needs --device cuda"), std::string::npos) << err();
  c.device = "tpu";
  EXPECT_NE(err().find("--device 'tpu'"), std::string::npos) << err();
}

TEST(TrainCheckpoint, InitFromAnExportLoadsExactlyItsParameters) {
  const std::string dir = scratch_dir("init");
  TrainConfig a = ckpt_config(dir);
  a.steps = 6;
  std::ostringstream log;
  const TrainResult ra = run_training(a, log);
  const std::string file = join_path(dir, "model.safetensors");
  export_safetensors(dir, file, DType::f32);

  // On 4 ranks with shard_grad_op (other padding, other ranges): every unit's gathered parameters
  // are the file's tensors, the optimizer state is zero and the step count 0.
  TrainConfig b = ckpt_config("");
  b.save_every = 0;
  b.ranks = 4;
  b.engine.strategy = Strategy::shard_grad_op;
  const SafetensorsFile st(file);
  int tensors = 0;
  LaunchOptions lo;
  lo.ranks = 4;
  launch(lo, [&](RankContext& ctx) {
    EngineStepper stepper(ctx, b.model_config(), b.engine, 1);
    Engine& e = stepper.engine();
    init_engine_from_safetensors(e, file);
    EXPECT_EQ(e.steps_done(), 0);
    for (int u = 0; u < e.num_units(); ++u) {
      const std::vector<float> p = e.gather_unit_params(u);
      for (const FlatEntry& t : e.layout(u).entries()) {
        const SafetensorsEntry* f = st.find(t.name);
        ASSERT_NE(f, nullptr) << t.name;
        std::vector<float> want(static_cast<size_t>(t.numel));
        st.read_f32(*f, 0, t.numel, want.data());
        EXPECT_EQ(std::memcmp(want.data(), p.data() + t.offset, want.size() * 4), 0) << t.name;
        if (ctx.rank == 0) ++tensors;
      }
      for (const auto& [name, v] : e.get_shard(u).states) {
        if (name == "params") continue;
        for (float x : v) ASSERT_EQ(x, 0.0f) << name;
      }
    }
  });
  EXPECT_EQ(tensors, 2 + 2 * 12 + 2);  // wte, wpe; 12 per block; ln_f weight and bias

  // Through run_training: a model that starts from trained weights starts at a lower loss.
  TrainConfig c = b;
  c.steps = 1;
  c.init_from = file;
  const TrainResult rc = run_training(c, log);
  ASSERT_EQ(rc.losses.size(), 1u);
  EXPECT_LT(rc.losses[0], ra.losses[0] - 0.1f) << "fresh start " << ra.losses[0];
  c.init_from = join_path(dir, "absent.safetensors");
  EXPECT_NE(error_of([&] { run_training(c, log); }).find("absent.safetensors"), std::string::npos);
  remove_all(dir);
}
