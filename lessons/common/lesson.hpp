// The frame around every lesson: parse the options, open the run directory, launch the ranks, then
// print what they measured next to what the lesson predicts (memory by category per rank, bytes
// per step by collective, the loss curve against lesson 1), write the JSON row for the table, and
// turn the checks into the exit code. A lesson's own file holds only its sharding logic.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/comm/launcher.hpp"
#include "core/model/params.hpp"
#include "core/trace/run_dir.hpp"
#include "lessons/common/activations.hpp"
#include "lessons/common/data.hpp"
#include "lessons/common/meter.hpp"
#include "lessons/common/options.hpp"
#include "lessons/common/reference.hpp"

namespace shardlab::lessons {

// `s` padded with spaces to `width` characters (UTF-8 aware: Ψ and · count as one).
inline std::string pad(const std::string& s, int width) {
  int chars = 0;
  for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
  return s + std::string(static_cast<size_t>(std::max(0, width - chars)), ' ');
}

// 1234567 -> "1,234,567".
inline std::string commas(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return n < 0 ? "-" + s : s;
}

class Lesson {
 public:
  Lesson(int argc, char** argv, const LessonInfo& info)
      : info_(info), opt_(parse_options(argc, argv, info)), cfg_(opt_.config()) {
    std::printf("lesson %d: %s\n  %s\n", info_.number, info_.title, info_.idea);
    std::printf("  model %s; %d ranks (local backend); %d steps of %d x %d tokens; seed %" PRIu64
                "\n\n",
                cfg_.describe().c_str(), opt_.ranks, opt_.steps, opt_.batch, opt_.seq, opt_.seed);
  }

  const LessonOptions& options() const { return opt_; }
  const GPTConfig& config() const { return cfg_; }
  int ranks() const { return opt_.ranks; }

  // Runs fn on every rank (threads), recording into the run directory.
  void run(const std::function<void(RankContext&, RankResult&)>& fn) {
    nlohmann::json meta = {
        {"lesson", info_.number},   {"title", info_.title}, {"strategy", info_.strategy},
        {"world_size", opt_.ranks}, {"backend", "local"},   {"params", cfg_.num_params()},
        {"model", cfg_.describe()}, {"steps", opt_.steps},  {"batch", opt_.batch},
        {"seq", opt_.seq},          {"seed", opt_.seed}};
    meta["mesh"] = info_.has_group ? nlohmann::json::array({opt_.ranks / opt_.group, opt_.group})
                                   : nlohmann::json::array({opt_.ranks});
    RunDirOptions ro;
    ro.dir = opt_.run_dir;
    ro.overwrite = true;
    run_ = RunDir::create(meta, ro);
    results_.assign(static_cast<size_t>(opt_.ranks), RankResult{});
    LaunchOptions lo;
    lo.ranks = opt_.ranks;
    lo.make_recorder = [this](int r) { return run_->make_recorder(r); };
    print_step_header();
    launch(lo, [&](RankContext& ctx) { fn(ctx, results_[static_cast<size_t>(ctx.rank)]); });
    run_->finish();
  }

  const std::vector<RankResult>& results() const { return results_; }
  const std::vector<float>& losses() const { return results_.at(0).losses; }

  // ---- what the lesson predicts -------------------------------------------------------------
  // A category's bytes after the last step (`peak` = false) or its peak, on every rank.
  void expect_memory(MemCategory c, bool peak, const std::string& formula, int64_t bytes) {
    mem_.push_back({std::string(mem_category_name(c)), peak ? "peak" : "kept", formula, bytes,
                    [c, peak](const RankResult& r) { return (peak ? r.peak : r.now)[int(c)]; }});
  }
  // params + grads + optimizer_state after the last step.
  void expect_persistent(const std::string& formula, int64_t bytes) {
    mem_.push_back({"persistent total", "kept", formula, bytes, [](const RankResult& r) {
                      return r.now[int(MemCategory::params)] + r.now[int(MemCategory::grads)] +
                             r.now[int(MemCategory::optimizer_state)];
                    }});
  }
  // Bytes a rank sends per step under `key` (see StepBytes), on every rank and every step.
  void expect_comm(const std::string& key, const std::string& formula, int64_t bytes) {
    comm_.push_back({key, formula, bytes});
  }
  // The collectives' full sizes per step (all collectives together: the "buffer" of
  // core/comm/traffic.hpp), on every rank and every step.
  void expect_buffer(const std::string& formula, int64_t bytes) {
    buffer_ = CommRow{"buffer, total", formula, bytes};
  }
  void note(const std::string& line) { notes_.push_back(line); }
  void check(bool ok, const std::string& what) { checks_.push_back({ok, what}); }

  // Checks this run's loss curve against `ref`: bit for bit when tol == 0, else |diff| <= tol.
  void compare_losses(const std::string& against, const std::vector<float>& ref, double tol) {
    double worst = 0;
    bool same = ref.size() == losses().size();
    for (size_t i = 0; same && i < ref.size(); ++i) {
      worst = std::max(worst, std::fabs(double(ref[i]) - double(losses()[i])));
      same = same && (tol == 0 ? ref[i] == losses()[i] : std::fabs(ref[i] - losses()[i]) <= tol);
    }
    char buf[256];
    if (tol == 0)
      std::snprintf(buf, sizeof buf,
                    "loss curve equals %s bit for bit (%zu steps; largest difference %.3g)",
                    against.c_str(), ref.size(), worst);
    else
      std::snprintf(buf, sizeof buf,
                    "loss curve matches %s within %.1e (%zu steps; largest difference %.3g)",
                    against.c_str(), tol, ref.size(), worst);
    check(same, buf);
  }

  // Prints the tables and checks, writes the JSON, returns the exit code.
  int finish() {
    nlohmann::json out = {{"lesson", info_.number},
                          {"title", info_.title},
                          {"strategy", info_.strategy},
                          {"ranks", opt_.ranks},
                          {"group", info_.has_group ? opt_.group : opt_.ranks},
                          {"model", opt_.model},
                          {"params", cfg_.num_params()},
                          {"steps", opt_.steps},
                          {"losses", losses()}};
    for (const std::string& n : notes_) std::printf("%s\n", n.c_str());
    print_memory(out);
    print_comm(out);
    const float first = losses().front(), last = losses().back();
    check(opt_.steps < 2 || last < first, "loss went down: " + fmt(first) + " -> " + fmt(last) +
                                              " (best possible " +
                                              fmt(lesson_corpus()->entropy_rate) + ")");
    int failed = 0;
    std::printf("\nchecks\n");
    for (const auto& [ok, what] : checks_) {
      std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", what.c_str());
      failed += ok ? 0 : 1;
      out["checks"].push_back({{"ok", ok}, {"what", what}});
    }
    std::printf("\nrun directory: %s (open it in the viewer: build/bin/shardlab-viewer %s)\n",
                run_->path().c_str(), run_->path().c_str());
    if (!opt_.json.empty()) write_file_atomic(opt_.json, out.dump(1) + "\n", "--json");
    if (failed) std::printf("%d check(s) FAILED\n", failed);
    return failed ? 1 : 0;
  }

 private:
  struct MemRow {
    std::string label, when, formula;
    int64_t expected;
    std::function<int64_t(const RankResult&)> measure;
  };
  struct CommRow {
    std::string key, formula;
    int64_t expected;
  };

  static std::string fmt(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4f", x);
    return b;
  }

  void print_memory(nlohmann::json& out) {
    std::printf(
        "\nmemory per rank in bytes (each rank's MemoryTracker; kept = after the last step)\n");
    std::printf("  %-17s %-4s", "category", "");
    for (int r = 0; r < opt_.ranks; ++r)
      std::printf(" | %11s", ("rank " + std::to_string(r)).c_str());
    std::printf(" | %-26s | %11s\n", "formula", "expected");
    std::vector<MemRow> rows = mem_;
    // The categories the lesson does not predict, at their peak, and the overall peak.
    for (int c = 0; c < kNumMemCategories; ++c) {
      if (MemCategory(c) == MemCategory::unattributed) continue;  // imported runs only
      bool predicted = false;
      for (const MemRow& m : mem_) predicted |= m.label == mem_category_name(MemCategory(c));
      if (!predicted)
        rows.push_back({mem_category_name(MemCategory(c)), "peak", "", -1,
                        [c](const RankResult& r) { return r.peak[c]; }});
    }
    rows.push_back({"total", "peak", "", -1, [](const RankResult& r) { return r.peak_total; }});
    bool all_ok = true;
    for (const MemRow& m : rows) {
      bool ok = true;
      std::printf("  %-17s %-4s", m.label.c_str(), m.when.c_str());
      nlohmann::json row = {
          {"label", m.label}, {"when", m.when}, {"formula", m.formula}, {"expected", m.expected}};
      for (const RankResult& r : results_) {
        const int64_t v = m.measure(r);
        ok = ok && (m.expected < 0 || v == m.expected);
        std::printf(" | %11s", commas(v).c_str());
        row["measured"].push_back(v);
      }
      if (m.expected >= 0)
        std::printf(" | %s | %11s %s\n", pad(m.formula, 26).c_str(), commas(m.expected).c_str(),
                    ok ? "ok" : "DIFFERENT");
      else
        std::printf(" |\n");
      all_ok = all_ok && ok;
      out["memory"].push_back(row);
    }
    check(all_ok, "memory on every rank equals the formulas (exactly, padding included)");
  }

  void print_comm(nlohmann::json& out) {
    std::printf(
        "\nbytes per step: sent per rank (ring traffic) by collective, and buffer (the "
        "collectives'\nfull size, nccl-tests' convention), as core/comm/traffic.hpp counts them\n");
    std::printf("  %-28s", "collective");
    for (int r = 0; r < opt_.ranks; ++r)
      std::printf(" | %11s", ("rank " + std::to_string(r)).c_str());
    std::printf(" | %-26s | %11s\n", "formula", "expected");
    bool all_ok = true;
    std::string why;
    for (const CommRow& c : comm_) {
      std::printf("  %-28s", c.key.c_str());
      nlohmann::json row = {{"key", c.key}, {"formula", c.formula}, {"expected", c.expected}};
      bool ok = true;
      for (size_t r = 0; r < results_.size(); ++r) {
        const std::vector<StepBytes>& steps = results_[r].bytes;
        for (size_t s = 0; s < steps.size(); ++s) {
          auto it = steps[s].find(c.key);
          const int64_t v = it == steps[s].end() ? 0 : it->second;
          if (v != c.expected && ok)
            why = " (rank " + std::to_string(r) + ", step " + std::to_string(s + 1) + ": " + c.key +
                  " " + commas(v) + ")";
          ok = ok && v == c.expected;
        }
        const int64_t last = steps.back().count(c.key) ? steps.back().at(c.key) : 0;
        std::printf(" | %11s", commas(last).c_str());
        row["measured"].push_back(last);
      }
      std::printf(" | %s | %11s %s\n", pad(c.formula, 26).c_str(), commas(c.expected).c_str(),
                  ok ? "ok" : "DIFFERENT");
      all_ok = all_ok && ok;
      out["comm"].push_back(row);
    }
    // The last step's total in both measures (from lesson 1 to full sharding: 1.5x sent per rank,
    // 3x buffer). The buffer is checked on every rank and step when the lesson predicts it.
    std::printf("  %-28s", "sent per rank, total");
    for (const RankResult& r : results_) {
      int64_t n = 0;
      for (const auto& kv : r.bytes.back()) n += kv.second;
      std::printf(" | %11s", commas(n).c_str());
      out["sent"].push_back(n);
    }
    std::printf(" |\n  %-28s", buffer_.key.c_str());
    bool buffer_ok = true;
    std::string buffer_why;
    for (size_t r = 0; r < results_.size(); ++r) {
      const std::vector<int64_t>& steps = results_[r].buffer;
      for (size_t k = 0; k < steps.size(); ++k) {
        if (buffer_.expected >= 0 && steps[k] != buffer_.expected && buffer_ok)
          buffer_why = " (rank " + std::to_string(r) + ", step " + std::to_string(k + 1) + ": " +
                       commas(steps[k]) + ")";
        buffer_ok = buffer_ok && (buffer_.expected < 0 || steps[k] == buffer_.expected);
      }
      std::printf(" | %11s", commas(steps.back()).c_str());
      out["buffer"].push_back(steps.back());
    }
    if (buffer_.expected >= 0) {
      std::printf(" | %s | %11s %s\n", pad(buffer_.formula, 26).c_str(),
                  commas(buffer_.expected).c_str(), buffer_ok ? "ok" : "DIFFERENT");
    } else {
      std::printf(" |\n");
    }
    // Nothing may be sent that the lesson did not predict.
    for (const RankResult& r : results_)
      for (const StepBytes& s : r.bytes)
        for (const auto& [key, n] : s) {
          bool known = false;
          for (const CommRow& c : comm_) known |= c.key == key;
          if (!known && all_ok) why = " (unexpected " + key + ": " + commas(n) + ")";
          all_ok = all_ok && known;
        }
    check(all_ok, "bytes sent per step equal the formulas on every rank and step" + why);
    if (buffer_.expected >= 0)
      check(buffer_ok, "buffer per step equals the formula on every rank and step" + buffer_why);
  }

  LessonInfo info_;
  LessonOptions opt_;
  GPTConfig cfg_;
  std::optional<RunDir> run_;
  std::vector<RankResult> results_;
  std::vector<MemRow> mem_;
  std::vector<CommRow> comm_;
  CommRow buffer_{"buffer, total", "", -1};
  std::vector<std::string> notes_;
  std::vector<std::pair<bool, std::string>> checks_;
};

// main()'s body for every lesson: errors become one line on stderr and exit code 2.
inline int lesson_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lesson: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace shardlab::lessons
