// Divergence that stays finite (core/train/divergence.hpp): --lr 1000 took the loss from 5.5 to
// 69 and kept it there, and the run exited 0; with --save-every 1 it moved `latest` to the
// diverged steps. The watch stops such a run (by default) before it saves, warns with --on-
// divergence warn, and never fires on a healthy run.
#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <string>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/load.hpp"
#include "core/train/divergence.hpp"
#include "core/train/trainer.hpp"

using namespace shardlab;

namespace {

TrainConfig runaway(int64_t steps) {
  TrainConfig c;
  c.model = "tiny";
  c.steps = steps;
  c.batch = 4;
  c.seq = 32;
  c.warmup = 0;
  c.schedule = LrSchedule::constant;
  c.synthetic.vocab = 32;
  c.synthetic.tokens = 50000;
  c.engine.optim.lr = 1000.0f;  // AdamW: every parameter moves by about lr each step
  return c;
}

std::string scratch(const std::string& name) {
  const std::string d = std::string(SHARDLAB_BINARY_DIR) + "/test_scratch/divergence/" + name;
  remove_all(d);
  make_dirs(d);
  return d;
}

}  // namespace

TEST(DivergenceWatch, CountsSuspectStepsInARow) {
  DivergenceWatch w({DivergenceMode::stop, 2.0, 3});
  using V = DivergenceWatch::Verdict;
  EXPECT_EQ(w.observe(1, 5.0), V::ok);
  EXPECT_EQ(w.observe(2, 4.0), V::ok);  // a new best
  EXPECT_EQ(w.observe(3, 8.0), V::ok);  // 2x the best exactly: not above
  EXPECT_EQ(w.observe(4, 8.5), V::above);
  EXPECT_EQ(w.observe(5, 9.0), V::above);
  EXPECT_EQ(w.observe(6, 4.5), V::ok);  // recovered: the count starts over
  EXPECT_EQ(w.observe(7, 70.0), V::above);
  EXPECT_EQ(w.observe(8, 70.0), V::above);
  EXPECT_EQ(w.observe(9, 70.0), V::diverged);
  EXPECT_EQ(w.best_step(), 2);
  EXPECT_EQ(w.first_above(), 7);
  EXPECT_NE(w.describe(70.0).find("above 2 x the best loss 4 (step 2), 3 steps in a row "
                                  "(since step 7)"),
            std::string::npos)
      << w.describe(70.0);
  DivergenceWatch off({DivergenceMode::off, 2.0, 1});
  EXPECT_EQ(off.observe(1, 1.0), V::ok);
  EXPECT_EQ(off.observe(2, 1e30), V::ok);
}

TEST(DivergenceWatch, OptionsAreChecked) {
  EXPECT_THROW((DivergenceOptions{DivergenceMode::stop, 1.0, 10}).validate(), InvalidArgument);
  EXPECT_THROW(
      (DivergenceOptions{DivergenceMode::stop, std::numeric_limits<double>::infinity(), 10})
          .validate(),
      InvalidArgument);
  EXPECT_THROW((DivergenceOptions{DivergenceMode::stop, 2.0, 0}).validate(), InvalidArgument);
  EXPECT_THROW(parse_divergence_mode("maybe"), InvalidArgument);
  EXPECT_EQ(parse_divergence_mode("warn"), DivergenceMode::warn);
}

TEST(DivergenceWatch, StopsARunawayRunBeforeItSavesADivergedStep) {
  TrainConfig c = runaway(30);
  c.save_every = 1;
  c.ckpt_dir = scratch("stop");
  std::ostringstream out;
  try {
    run_training(c, out);
    FAIL() << "the diverged run exited normally:\n" << out.str();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the run diverged (lower --lr"), std::string::npos) << m;
    EXPECT_NE(m.find("10 steps in a row"), std::string::npos) << m;
  }
  EXPECT_NE(out.str().find("warning: step "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("not saved: step "), std::string::npos) << out.str();
  // `latest` still names the best step's neighbourhood, never a suspect one: its loss is finite
  // and not above twice the best.
  std::string note;
  const std::string latest = resolve_checkpoint(c.ckpt_dir, &note);
  const int64_t step = std::stoll(latest.substr(latest.rfind('-') + 1));
  EXPECT_LE(step, 2) << latest << "\n" << out.str();
}

TEST(DivergenceWatch, WarnKeepsGoingAndHealthyRunsAreUntouched) {
  TrainConfig c = runaway(14);
  c.divergence.mode = DivergenceMode::warn;
  std::ostringstream out;
  const TrainResult r = run_training(c, out);
  EXPECT_EQ(r.losses.size(), 14u);
  EXPECT_NE(out.str().find("the run diverged"), std::string::npos) << out.str();
  // The default settings on a run that learns: no warning at all.
  TrainConfig healthy = runaway(40);
  healthy.engine.optim.lr = 1e-2f;
  std::ostringstream quiet;
  run_training(healthy, quiet);
  EXPECT_EQ(quiet.str().find("warning"), std::string::npos) << quiet.str();
}
