// The real viewer under xvfb-run: it opens a synthetic run directory, writes a screenshot and a
// JSON report of where it drew each panel, and the test checks the pixels: the picture is not
// blank, each panel's own colours are inside its rectangle (memory categories in the memory plot,
// ops and the exposed-comm red in the timeline, unit states in the units strip) and not in the
// others. Also: no display gives a clear message and a non-zero exit; a run that starts after the
// viewer is picked up live. Skipped when xvfb-run is missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <stb_image.h>
#include <nlohmann/json.hpp>

namespace shardlab::viewer {

namespace fs = std::filesystem;

namespace {

bool have_xvfb_run() { return std::system("command -v xvfb-run >/dev/null 2>&1") == 0; }

std::string work_dir(const std::string& name) {
  std::string d = std::string(SHARDLAB_VIEWER_WORK_DIR) + "/" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

int run(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string make_run(const std::string& dir, const std::string& args) {
  std::string cmd = std::string(SHARDLAB_MAKE_RUN_EXE) + " " + dir + " " + args + " >/dev/null";
  EXPECT_EQ(run(cmd), 0) << cmd;
  return dir;
}

// Runs the viewer under a virtual display; returns its exit code, output in <out>.log.
int screenshot(const std::string& runs, const std::string& png, const std::string& extra = "") {
  std::string cmd = "xvfb-run -a -s '-screen 0 1920x1080x24' " + std::string(SHARDLAB_VIEWER_EXE) +
                    " " + runs + " --screenshot " + png + " --width 1600 --height 1000 " + extra +
                    " >" + png + ".log 2>&1";
  return run(cmd);
}

struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> rgb;
  bool load(const std::string& path) {
    int n = 0;
    unsigned char* p = stbi_load(path.c_str(), &w, &h, &n, 3);
    if (!p) return false;
    rgb.assign(p, p + static_cast<size_t>(w) * h * 3);
    stbi_image_free(p);
    return true;
  }
  // Pixels of exactly this colour inside [x, x+w) x [y, y+h).
  int count(const nlohmann::json& rect, const nlohmann::json& color) const {
    int x0 = std::max(0, rect[0].get<int>()), y0 = std::max(0, rect[1].get<int>());
    int x1 = std::min(w, x0 + rect[2].get<int>()), y1 = std::min(h, y0 + rect[3].get<int>());
    int r = color[0], g = color[1], b = color[2], n = 0;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        const unsigned char* p = &rgb[(static_cast<size_t>(y) * w + x) * 3];
        n += p[0] == r && p[1] == g && p[2] == b;
      }
    return n;
  }
};

nlohmann::json whole(const Image& im) { return {0, 0, im.w, im.h}; }

}  // namespace

TEST(ViewerScreenshot, PanelsShowTheirColoursWhereTheAppSaysTheyAre) {
  if (!have_xvfb_run()) GTEST_SKIP() << "xvfb-run not found (Debian: apt-get install xvfb xauth)";
  std::string dir = work_dir("shot_single");
  make_run(dir + "/fsdp", "--ranks 4 --steps 6 --units 4 --mem-limit 160MiB");
  std::string png = dir + "/fsdp.png";
  ASSERT_EQ(screenshot(dir + "/fsdp", png, "--frames 4"), 0) << read_text(png + ".log");
  Image im;
  ASSERT_TRUE(im.load(png)) << png;
  ASSERT_EQ(im.w, 1600);
  ASSERT_EQ(im.h, 1000);
  nlohmann::json rep = nlohmann::json::parse(read_text(dir + "/fsdp.json"));
  const auto& colors = rep["colors"];
  const auto& r0 = rep["panels"]["runs"][0];
  EXPECT_EQ(r0["steps"], 6);
  EXPECT_EQ(r0["ranks"], 4);
  EXPECT_EQ(r0["status"], "");

  // Not blank: many colours, none covering nearly everything.
  std::map<int, int> hist;
  for (size_t i = 0; i < im.rgb.size(); i += 3)
    ++hist[(im.rgb[i] << 16) | (im.rgb[i + 1] << 8) | im.rgb[i + 2]];
  int most = 0;
  for (auto& [c, n] : hist) most = std::max(most, n);
  EXPECT_GT(hist.size(), 40u);
  EXPECT_LT(most, im.w * im.h * 8 / 10);

  // Panels stack top to bottom: memory, timeline, units, summary.
  auto bottom = [](const nlohmann::json& r) { return r[1].get<double>() + r[3].get<double>(); };
  EXPECT_LE(bottom(r0["memory_plot"]), r0["timeline_plot"][1].get<double>());
  EXPECT_LE(bottom(r0["timeline_plot"]), r0["units_plot"][1].get<double>());
  EXPECT_LE(bottom(r0["units_plot"]), rep["panels"]["summary"][1].get<double>());

  // Memory plot: the FSDP categories are there; no op colour is (except "other"'s plain grey,
  // which blended lines can produce).
  for (const char* c :
       {"params", "params_unsharded", "grads", "grads_unsharded", "optimizer_state", "activations"})
    EXPECT_GT(im.count(r0["memory_plot"], colors["categories"][c]), 20) << c;
  for (auto& [op, c] : colors["ops"].items()) {
    if (op == "other") continue;
    EXPECT_EQ(im.count(r0["memory_plot"], c), 0) << op << " in the memory plot";
  }
  // Timeline: compute and collective ops and exposed communication; no memory colour.
  for (const char* op : {"forward", "backward", "optimizer", "all_gather", "reduce_scatter"})
    EXPECT_GT(im.count(r0["timeline_plot"], colors["ops"][op]), 20) << op;
  EXPECT_EQ(im.count(r0["timeline_plot"], colors["ops"]["all_reduce"]), 0);
  EXPECT_GT(im.count(r0["timeline_plot"], colors["exposed"]), 5);
  for (auto& [cat, c] : colors["categories"].items())
    EXPECT_EQ(im.count(r0["timeline_plot"], c), 0) << cat << " in the timeline";
  // Unit states in the units strip, and the same colours nowhere in the memory plot.
  for (const char* st : {"gathering", "unsharded", "resharded"})
    EXPECT_GT(im.count(r0["units_plot"], colors["unit_states"][st]), 20) << st;
  // Summary: the peak bars use the category colours.
  EXPECT_GT(im.count(rep["panels"]["summary_plot"], colors["categories"]["optimizer_state"]), 20);
  // A category colour appears only in the memory plot, the summary's bars and the legend above.
  const auto& pu = colors["categories"]["params_unsharded"];
  int all = im.count(whole(im), pu);
  int placed = im.count(r0["memory_plot"], pu) + im.count(rep["panels"]["summary_plot"], pu);
  int legend = im.count({0, 0, im.w, r0["memory_plot"][1].get<int>()}, pu);
  EXPECT_EQ(all, placed + legend);
}

TEST(ViewerScreenshot, OffloadRunGetsAHostMemoryRowAndACopyLanePerRank) {
  if (!have_xvfb_run()) GTEST_SKIP() << "xvfb-run not found (Debian: apt-get install xvfb xauth)";
  std::string dir = work_dir("shot_offload");
  make_run(dir + "/off", "--ranks 2 --steps 4 --units 3 --offload");
  make_run(dir + "/plain", "--ranks 2 --steps 4 --units 3");
  for (const char* name : {"off", "plain"}) {
    const bool off = std::string(name) == "off";
    std::string png = dir + "/" + name + ".png";
    ASSERT_EQ(screenshot(dir + "/" + name, png, "--frames 4"), 0) << read_text(png + ".log");
    Image im;
    ASSERT_TRUE(im.load(png)) << png;
    nlohmann::json rep = nlohmann::json::parse(read_text(dir + "/" + name + ".json"));
    const auto& colors = rep["colors"];
    const auto& r0 = rep["panels"]["runs"][0];
    if (!off) {  // no host tier, no copies: nothing extra drawn, no copy colour anywhere
      EXPECT_TRUE(r0["host_rows"].empty());
      EXPECT_TRUE(r0["copy_lanes"].empty());
      EXPECT_EQ(im.count(whole(im), colors["ops"]["h2d"]), 0);
      continue;
    }
    ASSERT_EQ(r0["host_rows"].size(), 2u) << "a host memory row per rank";
    ASSERT_EQ(r0["copy_lanes"].size(), 2u) << "a copy lane per rank";
    for (int r = 0; r < 2; ++r) {
      const auto& host = r0["host_rows"][r];
      const auto& lane = r0["copy_lanes"][r];
      // Inside their panels' canvases.
      EXPECT_GE(host[1].get<double>(), r0["memory_plot"][1].get<double>());
      EXPECT_GE(lane[1].get<double>(), r0["timeline_plot"][1].get<double>());
      // The host row holds the host tier's categories, in the device rows' colours; the device
      // rows of this run hold no parameter shards, gradients or optimizer state (all on the host).
      for (const char* c : {"params", "grads", "optimizer_state"})
        EXPECT_GT(im.count(host, colors["categories"][c]), 20) << "rank " << r << " host " << c;
      EXPECT_EQ(im.count(host, colors["categories"]["params_unsharded"]), 0) << r;
      // The copy lane holds the copies up and down, and nothing of compute or collectives.
      EXPECT_GT(im.count(lane, colors["ops"]["h2d"]), 3) << "rank " << r;
      EXPECT_GT(im.count(lane, colors["ops"]["d2h"]), 3) << "rank " << r;
      for (const char* op : {"forward", "backward", "all_gather", "reduce_scatter"})
        EXPECT_EQ(im.count(lane, colors["ops"][op]), 0) << op << " in rank " << r << "'s copy lane";
    }
    EXPECT_EQ(im.count(r0["memory_plot"], colors["categories"]["optimizer_state"]),
              im.count(r0["host_rows"][0], colors["categories"]["optimizer_state"]) +
                  im.count(r0["host_rows"][1], colors["categories"]["optimizer_state"]))
        << "optimizer state is drawn only in the host rows";
    // Copies only in the copy lanes.
    const auto& h2d = colors["ops"]["h2d"];
    EXPECT_EQ(im.count(r0["timeline_plot"], h2d),
              im.count(r0["copy_lanes"][0], h2d) + im.count(r0["copy_lanes"][1], h2d));
  }
}

TEST(ViewerScreenshot, CompareModeShowsTwoRunsSideBySideOnOneScale) {
  if (!have_xvfb_run()) GTEST_SKIP() << "xvfb-run not found (Debian: apt-get install xvfb xauth)";
  std::string dir = work_dir("shot_compare");
  make_run(dir + "/dp", "--ranks 2 --steps 4 --units 3 --strategy no_shard");
  make_run(dir + "/fsdp", "--ranks 2 --steps 4 --units 3");
  std::string png = dir + "/compare.png";
  ASSERT_EQ(screenshot(dir + "/dp " + dir + "/fsdp", png, "--at-step 2"), 0)
      << read_text(png + ".log");
  Image im;
  ASSERT_TRUE(im.load(png));
  nlohmann::json rep = nlohmann::json::parse(read_text(dir + "/compare.json"));
  const auto& colors = rep["colors"];
  const auto& dp = rep["panels"]["runs"][0];
  const auto& fsdp = rep["panels"]["runs"][1];
  EXPECT_EQ(rep["selected_step"], 2);
  // Side by side, the same width, and one time scale.
  EXPECT_GE(fsdp["timeline_plot"][0].get<double>(),
            dp["timeline_plot"][0].get<double>() + dp["timeline_plot"][2].get<double>());
  EXPECT_EQ(dp["timeline_plot"][2], fsdp["timeline_plot"][2]);
  double dp_span = dp["axis_t_end"].get<double>() - dp["axis_t_begin"].get<double>();
  double fsdp_span = fsdp["axis_t_end"].get<double>() - fsdp["axis_t_begin"].get<double>();
  EXPECT_DOUBLE_EQ(dp_span, fsdp_span);
  // DP all-reduces; FSDP all-gathers and reduce-scatters: each in its own column only.
  EXPECT_GT(im.count(dp["timeline_plot"], colors["ops"]["all_reduce"]), 20);
  EXPECT_EQ(im.count(dp["timeline_plot"], colors["ops"]["all_gather"]), 0);
  EXPECT_GT(im.count(fsdp["timeline_plot"], colors["ops"]["all_gather"]), 20);
  EXPECT_EQ(im.count(fsdp["timeline_plot"], colors["ops"]["all_reduce"]), 0);
  // Both hold Adam state; only FSDP gathers parameters into params_unsharded.
  EXPECT_GT(im.count(dp["memory_plot"], colors["categories"]["optimizer_state"]), 20);
  EXPECT_GT(im.count(fsdp["memory_plot"], colors["categories"]["optimizer_state"]), 20);
  EXPECT_EQ(im.count(dp["memory_plot"], colors["categories"]["params_unsharded"]), 0);
  EXPECT_GT(im.count(fsdp["memory_plot"], colors["categories"]["params_unsharded"]), 20);
  // Each summary row's rectangle spans the whole row, its label and every run's cell (docs-check
  // leaves the timed rows' pixels out by these rectangles): it starts at the summary panel's
  // left edge, not in the last run's column (where the cursor is after the header row).
  const auto& panel = rep["panels"]["summary"];
  ASSERT_FALSE(rep["summary_rows"].empty());
  for (const auto& row : rep["summary_rows"]) {
    EXPECT_LE(row["rect"][0].get<double>(), panel[0].get<double>() + 16) << row["name"];
  }
}

TEST(ViewerScreenshot, WaitsForARunThatHasNotStartedAndFollowsItLive) {
  if (!have_xvfb_run()) GTEST_SKIP() << "xvfb-run not found (Debian: apt-get install xvfb xauth)";
  std::string dir = work_dir("shot_live");
  std::string run_dir = dir + "/live";
  // The writer starts a second after the viewer and writes a step every 100 ms, leaving a
  // half-written line between steps; the viewer captures once it has seen 4 steps. One shell runs
  // both and waits for the writer, so nothing outlives the test.
  std::string png = dir + "/live.png";
  std::string cmd = "(sleep 1; " + std::string(SHARDLAB_MAKE_RUN_EXE) + " " + run_dir +
                    " --ranks 2 --steps 20 --units 3 --step-ms 100 --partial >/dev/null) & " +
                    "xvfb-run -a -s '-screen 0 1920x1080x24' " + SHARDLAB_VIEWER_EXE + " " +
                    run_dir + " --screenshot " + png + " --until-steps 4 --timeout 60 >" + png +
                    ".log 2>&1; rc=$?; wait; exit $rc";
  int rc = run(cmd);  // std::system's shell runs both and waits for the writer
  ASSERT_EQ(rc, 0) << read_text(png + ".log");
  nlohmann::json rep = nlohmann::json::parse(read_text(dir + "/live.json"));
  const auto& r0 = rep["panels"]["runs"][0];
  EXPECT_GE(r0["steps"].get<int>(), 4);
  EXPECT_EQ(r0["ranks"], 2);
}

TEST(ViewerScreenshot, MarksLandOnTheSpanTheMemoryAndTheUnitTheyName) {
  if (!have_xvfb_run()) GTEST_SKIP() << "xvfb-run not found (Debian: apt-get install xvfb xauth)";
  std::string dir = work_dir("shot_marks");
  make_run(dir + "/fsdp", "--ranks 2 --steps 4 --units 3");
  // Rank 1's first all-gather, from the events, as a page's script would pick it.
  std::ifstream events(dir + "/fsdp/rank1.jsonl");
  int64_t t_ag = -1;
  for (std::string line; t_ag < 0 && std::getline(events, line);) {
    auto e = nlohmann::json::parse(line);
    if (e["kind"] == "span" && e["op"] == "all_gather") t_ag = e["t_start"].get<int64_t>();
  }
  ASSERT_GE(t_ag, 0);
  std::string t = std::to_string(t_ag);
  std::string png = dir + "/marks.png";
  ASSERT_EQ(screenshot(dir + "/fsdp", png,
                       "--mark 1:comm:1:" + t + " --mark 2:memory:0:" + t +
                           " --mark 3:units:2:" + t + " --mark 4:compute:9:" + t),
            0)
      << read_text(png + ".log");
  Image im;
  ASSERT_TRUE(im.load(png));
  nlohmann::json rep = nlohmann::json::parse(read_text(dir + "/marks.json"));
  const auto& marks = rep["marks"];
  ASSERT_EQ(marks.size(), 4u);
  const auto& r0 = rep["panels"]["runs"][0];
  const char* plot[] = {"timeline_plot", "memory_plot", "units_plot"};
  for (int k = 0; k < 3; ++k) {
    const auto& m = marks[k];
    EXPECT_EQ(m["number"], k + 1);
    ASSERT_TRUE(m["shown"].get<bool>()) << m.dump();
    const auto& r = r0[plot[k]];
    double x = m["x"], y = m["y"];
    EXPECT_GE(x, r[0].get<double>()) << m.dump();
    EXPECT_LT(x, r[0].get<double>() + r[2].get<double>()) << m.dump();
    EXPECT_GE(y, r[1].get<double>()) << m.dump();
    EXPECT_LT(y, r[1].get<double>() + r[3].get<double>()) << m.dump();
    // The disc is drawn above the point (right of it in the units strip): white pixels around
    // its number.
    int cx = static_cast<int>(x), cy = static_cast<int>(y) - 22;
    if (k == 2) cx += 22, cy += 22;
    EXPECT_GT(im.count({cx - 9, cy - 9, 18, 18}, {255, 255, 255}), 40) << m.dump();
  }
  // The same time on all three: one x.
  EXPECT_DOUBLE_EQ(marks[0]["x"].get<double>(), marks[1]["x"].get<double>());
  EXPECT_DOUBLE_EQ(marks[0]["x"].get<double>(), marks[2]["x"].get<double>());
  // No rank 9: reported, not drawn.
  EXPECT_FALSE(marks[3]["shown"].get<bool>());
}

TEST(ViewerCommandLine, AMalformedMarkIsRefusedBeforeAnyWindow) {
  std::string dir = work_dir("bad_mark");
  std::string err = dir + "/err.txt";
  for (const char* spec : {"1:network:0:5", "1:comm:0:5:3"}) {
    int rc = run("env -u DISPLAY " + std::string(SHARDLAB_VIEWER_EXE) + " " + dir + " --mark " +
                 spec + " 2>" + err + " >/dev/null");
    EXPECT_EQ(rc, 2) << spec;
    std::string text = read_text(err);
    EXPECT_NE(text.find(std::string("--mark '") + spec + "'"), std::string::npos) << text;
    EXPECT_EQ(text.find("no display"), std::string::npos) << "checked before GLFW: " << text;
  }
}

TEST(ViewerCommandLine, NoDisplayIsAClearErrorNotACrash) {
  std::string dir = work_dir("no_display");
  std::string err = dir + "/err.txt";
  int rc = run("env -u DISPLAY -u WAYLAND_DISPLAY " + std::string(SHARDLAB_VIEWER_EXE) + " " + dir +
               " 2>" + err + " >/dev/null");
  EXPECT_NE(rc, 0);
  EXPECT_NE(
      read_text(err).find("no display (GLFW error 65544): run under xvfb-run or with DISPLAY set"),
      std::string::npos)
      << read_text(err);
}

TEST(ViewerCommandLine, HelpListsTheOptions) {
  std::string dir = work_dir("help");
  std::string out = dir + "/help.txt";
  ASSERT_EQ(run(std::string(SHARDLAB_VIEWER_EXE) + " --help >" + out + " 2>&1"), 0);
  std::string text = read_text(out);
  for (const char* opt : {"--screenshot", "--frames", "--at-step", "--overlay", "compare"})
    EXPECT_NE(text.find(opt), std::string::npos) << opt;
}

}  // namespace shardlab::viewer

namespace shardlab::viewer {

// 4096 ranks in a few hundred pixels: each row's label, scale and peak marker used to pile into
// one solid white block over the memory plot. Now thin rows keep only their bands, and one line
// says why the labels are gone.
TEST(ViewerScreenshot, ThousandsOfRanksDoNotWhiteOutTheMemoryPanel) {
  if (!have_xvfb_run()) GTEST_SKIP() << "xvfb-run not found (Debian: apt-get install xvfb xauth)";
  std::string dir = work_dir("shot_4096");
  make_run(dir + "/wide", "--ranks 4096 --steps 2 --units 2");
  std::string png = dir + "/wide.png";
  ASSERT_EQ(screenshot(dir + "/wide", png, "--frames 3"), 0) << read_text(png + ".log");
  Image im;
  ASSERT_TRUE(im.load(png)) << png;
  nlohmann::json rep = nlohmann::json::parse(read_text(dir + "/wide.json"));
  const auto& plot = rep["panels"]["runs"][0]["memory_plot"];
  EXPECT_EQ(rep["panels"]["runs"][0]["ranks"], 4096);
  int x0 = plot[0].get<int>(), y0 = plot[1].get<int>();
  int x1 = std::min(im.w, x0 + plot[2].get<int>()), y1 = std::min(im.h, y0 + plot[3].get<int>());
  int64_t white = 0, all = 0;
  for (int y = std::max(0, y0); y < y1; ++y)
    for (int x = std::max(0, x0); x < x1; ++x) {
      const unsigned char* p = &im.rgb[(static_cast<size_t>(y) * im.w + x) * 3];
      white += p[0] >= 200 && p[1] >= 200 && p[2] >= 200;
      ++all;
    }
  ASSERT_GT(all, 0);
  EXPECT_LT(static_cast<double>(white) / static_cast<double>(all), 0.05)
      << white << " of " << all << " pixels of the memory plot are near white";
}

}  // namespace shardlab::viewer
