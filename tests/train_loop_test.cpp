// core/train trainer: the learning-rate schedule, config checks, the step line format, the
// trainer's stepper on one rank against a hand-written GPT + AdamW loop, and short end-to-end
// runs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/error.hpp"
#include "core/comm/launcher.hpp"
#include "core/model/gpt.hpp"
#include "core/model/params.hpp"
#include "core/optim/optimizer.hpp"
#include "core/trace/run_reader.hpp"
#include "core/trace/summary.hpp"
#include "core/train/corpus.hpp"
#include "core/train/data_loader.hpp"
#include "core/train/engine_stepper.hpp"
#include "core/train/trainer.hpp"

using namespace shardlab;

namespace {

std::string error_of(const TrainConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A tiny, fast configuration: tiny model on a small synthetic chain.
TrainConfig tiny_config(int64_t steps) {
  TrainConfig c;
  c.model = "tiny";
  c.steps = steps;
  c.batch = 4;
  c.seq = 32;
  c.warmup = 0;
  c.synthetic.vocab = 32;
  c.synthetic.tokens = 50000;
  c.engine.optim.lr = 1e-2f;
  return c;
}

}  // namespace

TEST(TrainSchedule, WarmupThenCosineToTheFloor) {
  TrainConfig c;
  c.steps = 110;
  c.warmup = 10;
  c.engine.optim.lr = 1.0f;
  c.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(c.lr_at(0), 0.1f);  // (0 + 1) / 10
  EXPECT_FLOAT_EQ(c.lr_at(4), 0.5f);
  EXPECT_FLOAT_EQ(c.lr_at(10), 1.0f);               // cosine starts at the peak
  EXPECT_NEAR(c.lr_at(10 + 99 / 2.0), 0.55, 0.01);  // halfway: (1 + 0.1) / 2
  EXPECT_FLOAT_EQ(c.lr_at(109), 0.1f);              // the last step sits on the floor
  for (int s = 11; s < 110; ++s) EXPECT_LE(c.lr_at(s), c.lr_at(s - 1)) << s;
  c.schedule = LrSchedule::constant;
  EXPECT_FLOAT_EQ(c.lr_at(50), 1.0f);
  EXPECT_FLOAT_EQ(c.lr_at(109), 1.0f);
}

TEST(TrainSchedule, PrintIntervalIsEveryStepForShortRuns) {
  TrainConfig c;
  c.steps = 100;
  EXPECT_EQ(c.print_interval(), 1);
  c.steps = 101;
  EXPECT_EQ(c.print_interval(), 5);
  c.steps = 1000;
  EXPECT_EQ(c.print_interval(), 20);
  c.steps = 30000;
  EXPECT_EQ(c.print_interval(), 1000);
  c.print_every = 7;
  EXPECT_EQ(c.print_interval(), 7);
}

TEST(TrainSchedule, PrintIntervalEndsForTheLargestStepCounts) {
  // m * decade * 50 wrapped past int64 here and the search never ended (the run hung before its
  // first step).
  TrainConfig c;
  c.steps = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(c.print_interval(), 200000000000000000);
  c.steps = 5000000000000000000;
  EXPECT_EQ(c.print_interval(), 100000000000000000);
}

TEST(TrainConfig, ThreadsAndSyntheticOptionsAreNamed) {
  // Thousands of BLAS threads exhausted memory and OpenBLAS retried its buffers forever.
  TrainConfig c;
  c.threads = 100000;
  EXPECT_NE(error_of(c).find("--threads 100000: more than the"), std::string::npos) << error_of(c);
  c.threads = 1;
  c.synthetic.tokens = 1;
  EXPECT_NE(error_of(c).find("--corpus-tokens 1: must be >= 2"), std::string::npos) << error_of(c);
  c = TrainConfig{};
  c.synthetic.successors = 0;
  EXPECT_NE(error_of(c).find("--synthetic-successors 0"), std::string::npos) << error_of(c);
  c = TrainConfig{};
  c.synthetic.vocab = 1;
  EXPECT_NE(error_of(c).find("--synthetic-vocab 1: must be in [2, 65536]"), std::string::npos)
      << error_of(c);
  // A corpus larger than memory: a bare "std::bad_alloc" before; now the option and the size.
  // 2^50 tokens (2 PiB) cannot be mapped at all; 2^62 is past the vector's max_size. Under a
  // sanitizer a failed operator new ends the process instead of throwing, so only 2^62 is tried.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const bool sanitized = true;
#else
  const bool sanitized = false;
#endif
  for (const int shift : {50, 62}) {
    if (shift == 50 && sanitized) continue;
    SyntheticSpec spec;
    spec.tokens = int64_t{1} << shift;
    try {
      make_synthetic_corpus(spec);
      FAIL() << "no throw";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--corpus-tokens " + std::to_string(spec.tokens)),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(TrainConfig, BatchSplitChecksDoNotWrap) {
  // --ranks x --accum was an int product: the hint read "use a multiple of -2".
  TrainConfig c;
  c.ranks = 2;
  c.accum = std::numeric_limits<int>::max();
  c.batch = 2;
  EXPECT_NE(error_of(c).find("use a multiple of 4294967294"), std::string::npos) << error_of(c);
  // rows x T past int32: the loader's buffer size wrapped and the run crashed (SIGSEGV).
  c = TrainConfig{};
  c.batch = int64_t{1} << 62;
  EXPECT_NE(error_of(c).find("--batch 4611686018427387904 x --seq 64"), std::string::npos)
      << error_of(c);
  c.batch = int64_t{1} << 31;
  c.seq = 1;
  EXPECT_NE(error_of(c).find("exceeds 2147483647 tokens"), std::string::npos) << error_of(c);
  // The same global batch split over enough ranks passes the split check (what remains may be
  // this machine's memory, which check_sizes compares the token buffers with).
  c.ranks = 2;
  EXPECT_EQ(error_of(c).find("exceeds 2147483647 tokens"), std::string::npos) << error_of(c);
  // Under mpirun only the ranks know the world; they check it the same way.
  EXPECT_THROW(c.check_split(1), InvalidArgument);
  EXPECT_NO_THROW(c.check_split(4));
}

TEST(TrainConfig, ErrorsNameTheOptionAndValue) {
  TrainConfig c;
  EXPECT_EQ(error_of(c), "");
  c.steps = -5;
  EXPECT_NE(error_of(c).find("--steps -5"), std::string::npos) << error_of(c);
  c = TrainConfig{};
  c.seq = 1000;
  EXPECT_NE(error_of(c).find("--seq 1000 exceeds the model's max_seq_len 256"), std::string::npos)
      << error_of(c);
  c = TrainConfig{};
  c.n_head = 5;
  EXPECT_NE(error_of(c).find("n_head 5"), std::string::npos) << error_of(c);
  c = TrainConfig{};
  c.model = "huge";
  EXPECT_NE(error_of(c).find("huge"), std::string::npos) << error_of(c);
  c = TrainConfig{};
  c.synthetic.vocab = 300;
  EXPECT_NE(error_of(c).find("--synthetic-vocab 300"), std::string::npos) << error_of(c);
  EXPECT_THROW(parse_lr_schedule("linear"), InvalidArgument);
}

TEST(TrainConfig, StepLineIsFixedWidth) {
  std::ostringstream a, b, h;
  print_step_line(a, {7, 2.5, 3e-4f, 12345.6, 3 * 1024 * 1024});
  print_step_line(b, {123456, 10.25, 1e-3f, 1.0, 1536LL * 1024 * 1024});
  print_step_header(h);
  EXPECT_EQ(a.str(), "     7 |   2.5000 | 3.00e-04 |      12346 |      3.0\n");
  EXPECT_EQ(a.str().size(), b.str().size());
  // The columns line up with the header's separators.
  std::string head = h.str().substr(0, h.str().find('\n') + 1);
  for (size_t i = 0; i < head.size(); ++i)
    if (head[i] == '|') {
      EXPECT_EQ(a.str()[i], '|') << i;
    }
}

TEST(TrainStepper, OneRankMatchesAHandWrittenGptAndAdamWLoop) {
  // The trainer's stepper on one rank is GPT forward/backward plus one AdamW per unit; written
  // out by hand here on a separate device, the losses and parameters must agree exactly, for
  // every strategy (with one rank none of them shards anything).
  GPTConfig m = GPTConfig::preset("tiny");
  SyntheticSpec spec;
  spec.vocab = 64;
  spec.tokens = 10000;
  auto corpus = std::make_shared<const TokenCorpus>(make_synthetic_corpus(spec));
  DataLoader loader(corpus, {4, 16, 0, 1, 3});
  std::vector<Batch> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(loader.next());

  EngineConfig e;
  e.optim.lr = 3e-3f;
  e.optim.weight_decay = 0.1f;
  e.seed = 11;
  const OptimizerConfig& o = e.optim;
  MemoryTracker t2;
  auto d2 = make_cpu_device(t2);
  GPT ref(*d2, m, e.seed);
  std::vector<std::unique_ptr<Optimizer>> opts;
  for (int u = 0; u < ref.num_units(); ++u)
    opts.push_back(make_optimizer(*d2, o, ref.layout(u).numel));
  std::vector<float> want;
  for (const Batch& b : batches) {
    ref.zero_grad();
    want.push_back(ref.forward(b.inputs.data(), b.targets.data(), 4, 16));
    ref.backward();
    for (int u = 0; u < ref.num_units(); ++u)
      opts[u]->step(ref.unit_params(u), ref.unit_grads(u), ref.layout(u).numel);
  }
  std::vector<std::vector<float>> want_params;
  for (int u = 0; u < ref.num_units(); ++u) {
    std::vector<float> p(ref.layout(u).numel);
    d2->copy_to_host(p.data(), ref.unit_params(u), p.size() * 4);
    want_params.push_back(std::move(p));
  }

  for (Strategy s : {Strategy::no_shard, Strategy::full_shard}) {
    e.strategy = s;
    launch({}, [&](RankContext& ctx) {
      EngineStepper stepper(ctx, m, e, 1);
      EXPECT_EQ(stepper.num_params(), m.num_params());
      for (size_t i = 0; i < batches.size(); ++i)
        EXPECT_EQ(stepper.step(batches[i].inputs.data(), batches[i].targets.data(), 4, 16, o.lr),
                  want[i])
            << strategy_name(s) << " step " << i;
      for (int u = 0; u < stepper.engine().num_units(); ++u)
        EXPECT_EQ(stepper.engine().gather_unit_params(u), want_params[u]) << strategy_name(s);
      // The optimizer state is tracked: 8 bytes per parameter for AdamW.
      EXPECT_EQ(ctx.tracker->current(MemCategory::optimizer_state), 8 * m.num_params());
    });
  }
}

TEST(TrainLoop, ShortRunLearnsAndIsDeterministic) {
  TrainConfig c = tiny_config(80);
  std::ostringstream out1, out2;
  TrainResult r1 = run_training(c, out1);
  TrainResult r2 = run_training(c, out2);
  ASSERT_EQ(r1.losses.size(), 80u);
  EXPECT_EQ(r1.losses, r2.losses);
  // A fresh model predicts nearly uniformly over the model's 256 tokens.
  EXPECT_NEAR(r1.losses[0], std::log(256.0), 0.2);
  // Eighty steps take it clearly below predicting uniformly over the 32 tokens the chain uses
  // (it reaches about 2.95), and never below the floor.
  EXPECT_LT(r1.final_loss, std::log(32.0) - 0.2);
  EXPECT_GT(r1.final_loss, r1.entropy_rate);
  EXPECT_EQ(r1.tokens, 80 * 4 * 32);
  EXPECT_NE(out1.str().find("entropy rate"), std::string::npos);
  // A different seed changes the initial weights and the batch order.
  c.engine.seed = 2;
  c.steps = 3;
  TrainResult r3 = run_training(c, out2);
  EXPECT_NE(r3.losses[2], r1.losses[2]);
}

TEST(TrainLoop, RejectsDataTheModelCannotRepresent) {
  TrainConfig c = tiny_config(1);
  c.vocab_size = 16;  // the chain uses 32 tokens
  c.synthetic.vocab = 16;
  std::ostringstream out;
  EXPECT_NO_THROW(run_training(c, out));
  c.synthetic.vocab = 32;
  try {
    c.validate();
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--synthetic-vocab 32 exceeds the model's vocab_size 16"),
              std::string::npos)
        << e.what();
  }
}

// The two byte measures of core/comm/traffic.hpp, end to end: a real run's summary (computed from
// its run directory, as `shardlab summary` and summary.json give it) and train's printed line
// report, per step and rank, "sent per rank" = 3 Psi_p (N-1)/N elements for full_shard and
// 2 Psi (N-1)/N for DDP (1.5x), and "buffer" = 3 Psi_p against Psi (3x). Psi_p pads each unit to
// a multiple of N. The loss mean over the ranks (one f32 all-reduce per step) is on top.
TEST(TrainLoop, SummaryReportsSentPerRankAndBufferByTheirFormulas) {
  namespace fs = std::filesystem;
  const int n = 4;
  const fs::path root =
      fs::temp_directory_path() / ("shardlab_bytes_" + std::to_string(::getpid()));
  fs::remove_all(root);
  struct Totals {
    double sent = 0, buffer = 0;
  };
  auto run = [&](Strategy s, DType dt, int64_t* psi_out, int64_t* psi_p_out) {
    TrainConfig c = tiny_config(3);
    c.ranks = n;
    c.engine.strategy = s;
    c.engine.param_dtype = c.engine.reduce_dtype = dt;
    c.run_dir = (root / strategy_name(s)).string() + "_" + dtype_name(dt);
    std::ostringstream out;
    const TrainResult r = run_training(c, out);
    const GPTConfig m = c.model_config();
    int64_t psi = 0, psi_p = 0;
    for (int u = 0; u < num_units(m); ++u) {
      psi += unit_layout(m, u).numel;
      psi_p += (unit_layout(m, u).numel + n - 1) / n * n;
    }
    EXPECT_EQ(psi, m.num_params());
    *psi_out = psi;
    *psi_p_out = psi_p;
    // train's end-of-run line: both measures, labelled, from the engine's StepStats.
    const std::string line = "communication per step: sent per rank " +
                             format_bytes(r.comm_bytes_per_step) + ", buffer " +
                             format_bytes(r.comm_buffer_per_step);
    EXPECT_NE(out.str().find(line), std::string::npos) << out.str();
    // The summary of the run directory, as summary.json and `shardlab summary` give it.
    const RunSummary sum = compute_summary(read_run(r.run_dir));
    const nlohmann::json j = summary_to_json(sum);
    std::ostringstream table;
    print_summary_table(sum, nlohmann::json::object(), table);
    EXPECT_NE(table.str().find("sent per rank"), std::string::npos) << table.str();
    EXPECT_NE(table.str().find("buffer"), std::string::npos) << table.str();
    return std::make_pair(r, Totals{j.at("comm_per_step_per_rank").at("sent").get<double>(),
                                    j.at("comm_per_step_per_rank").at("buffer").get<double>()});
  };
  // The loss mean: an all-reduce of one f32 per step.
  const double loss_sent = 2.0 * 4 * (n - 1) / n, loss_buffer = 4;
  for (DType dt : {DType::f32, DType::bf16}) {
    const double e = dtype_size(dt);
    int64_t psi = 0, psi_p = 0;
    const auto [fs_result, fs_tot] = run(Strategy::full_shard, dt, &psi, &psi_p);
    EXPECT_EQ(fs_result.comm_bytes_per_step, 3 * psi_p * dtype_size(dt) * (n - 1) / n);
    EXPECT_EQ(fs_result.comm_buffer_per_step, 3 * psi_p * dtype_size(dt));
    EXPECT_DOUBLE_EQ(fs_tot.sent, 3.0 * psi_p * (n - 1) / n * e + loss_sent) << dtype_name(dt);
    EXPECT_DOUBLE_EQ(fs_tot.buffer, 3.0 * psi_p * e + loss_buffer) << dtype_name(dt);

    const auto [dp_result, dp_tot] = run(Strategy::no_shard, dt, &psi, &psi_p);
    // DDP all-reduces each unit's gradient: 2 numel (N-1)/N per unit, rounded down by the ring.
    int64_t dp_sent = 0;
    const GPTConfig m = tiny_config(1).model_config();
    for (int u = 0; u < num_units(m); ++u)
      dp_sent += 2 * unit_layout(m, u).numel * dtype_size(dt) * (n - 1) / n;
    EXPECT_NEAR(static_cast<double>(dp_sent), 2.0 * psi * (n - 1) / n * e, num_units(m));
    EXPECT_EQ(dp_result.comm_bytes_per_step, dp_sent);
    EXPECT_EQ(dp_result.comm_buffer_per_step, psi * dtype_size(dt));
    EXPECT_DOUBLE_EQ(dp_tot.sent, static_cast<double>(dp_sent) + loss_sent) << dtype_name(dt);
    EXPECT_DOUBLE_EQ(dp_tot.buffer, static_cast<double>(psi) * e + loss_buffer) << dtype_name(dt);

    // The engine's collectives read 1.5x sent per rank and 3x buffer, up to the padding.
    EXPECT_NEAR(static_cast<double>(fs_result.comm_bytes_per_step) / dp_sent, 1.5, 0.01);
    EXPECT_NEAR(
        static_cast<double>(fs_result.comm_buffer_per_step) / dp_result.comm_buffer_per_step, 3.0,
        0.01);
  }
  fs::remove_all(root);
}
