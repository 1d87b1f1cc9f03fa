// The summary panel across runs, two widgets side by side: a table of figures with one column per
// run (strategy, steps and step time, tokens/s, loss, peak, collectives, stragglers, exposed
// communication, the selected step), and the peak memory of every rank stacked by category at the
// moment of its peak, all runs on one scale. Hover a bar: that rank's categories at its peak.
#include <algorithm>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "viewer/app/draw.hpp"
#include "viewer/app/panels/panels.hpp"
#include "viewer/app/tooltips.hpp"
#include "viewer/app/view_control.hpp"
#include "viewer/model/colors.hpp"

namespace shardlab::viewer {

namespace {

// ---- table cells: one function per row whose text takes more than a line -----------------------

// `steps` is a double: steps times ranks passes 2^31 on a long run read with many ranks.
std::string per_step(double total, double steps, bool bytes) {
  double v = steps > 0 ? total / steps : total;
  return bytes ? format_bytes(static_cast<int64_t>(v)) : format_duration(v);
}

// Per-rank figures are divided by steps x ranks.
double rank_steps(const RunModel& m) {
  return std::max(1, m.summary.n_steps) * std::max<double>(1, m.ranks.size());
}

std::string run_cell(const LiveRun& r) {
  const RunInfo& in = r.model().info;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s, %d ranks, %s [%s]",
                in.strategy.empty() ? "?" : in.strategy.c_str(), in.world,
                in.backend.empty() ? "?" : in.backend.c_str(), run_state(r).c_str());
  return buf;
}

std::string peak_cell(const RunModel& m) {
  std::string t = format_bytes(m.summary.max_peak);
  if (m.info.mem_limit > 0) t += " of " + format_bytes(m.info.mem_limit);
  return t;
}

std::string collective_cell(const RunModel& m, OpKind k) {
  const OpStats& o = m.summary.ops[static_cast<int>(k)];
  if (o.count == 0) return "-";
  // Per step and rank, the two measures every report labels the same way (core/comm/traffic.hpp):
  // "sent per rank" (ring traffic) and "buffer" (the collective's full size, busbw's base).
  const std::string buffer = per_step(double(o.bytes), rank_steps(m), true);
  if (o.sent < 0) return "buffer " + buffer + " (sent per rank not recorded: an older run)";
  return "sent per rank " + per_step(double(o.sent), rank_steps(m), true) + ", buffer " + buffer;
}

// busbw of each collective (timing: its own row, apart from the bytes).
std::string busbw_cell(const RunModel& m) {
  std::string t;
  for (OpKind k : {OpKind::all_gather, OpKind::reduce_scatter, OpKind::all_reduce}) {
    const OpStats& o = m.summary.ops[static_cast<int>(k)];
    if (o.count == 0) continue;
    t += (t.empty() ? "" : ", ") + std::string(op_kind_name(k)) + " " +
         format_rate(o.bandwidth.busbw);
  }
  return t.empty() ? "-" : t;
}

// Per-rank time spent waiting for the last rank to arrive.
std::string waiting_cell(const StragglerReport& w) {
  if (w.empty()) return "-";
  std::string t;
  char buf[160];
  for (const RankWait& rw : w.ranks) {
    std::snprintf(buf, sizeof buf, "%sr%d %s", t.empty() ? "" : ", ", rw.rank,
                  format_duration(double(rw.wait_ns)).c_str());
    t += buf;
    if (t.size() > 60) {
      t += ", ...";
      break;
    }
  }
  if (w.estimated) t += " (est.)";
  return t;
}

// The straggler when one stands above the run's noise (core/trace/stragglers.hpp), with its
// lead in the selected step; else that none does.
std::string slowest_rank_cell(const StragglerReport& w, int selected_step) {
  const Straggler& g = w.straggler;
  if (g.rank < 0 || g.steps < 2) return "-";
  char buf[200];
  if (!g.named()) {
    std::snprintf(buf, sizeof buf, "none beyond noise (lead of r%d %s, threshold %s)", g.rank,
                  format_duration(g.lead_ns).c_str(), format_duration(g.threshold_ns).c_str());
    return buf;
  }
  for (const auto& [step, lead] : g.lead_by_step)
    if (step == selected_step) {
      std::snprintf(buf, sizeof buf, "rank %d; step %d: others waited %s longer", g.rank, step,
                    format_duration(lead).c_str());
      return buf;
    }
  std::snprintf(buf, sizeof buf, "rank %d: others waited %s/step longer (median)", g.rank,
                format_duration(g.lead_ns).c_str());
  return buf;
}

std::string imbalance_cell(const StragglerReport& w) {
  if (w.peak_max_rank < 0) return "-";
  if (w.peak_max == w.peak_min) return "none (" + format_bytes(w.peak_max) + " each)";
  char buf[160];
  std::snprintf(buf, sizeof buf, "peak r%d %s vs r%d %s", w.peak_max_rank,
                format_bytes(w.peak_max).c_str(), w.peak_min_rank,
                format_bytes(w.peak_min).c_str());
  return buf;
}

std::string comm_cell(const RunModel& m) {
  double steps = rank_steps(m);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s, %s exposed (%.0f%% overlapped)",
                per_step(double(m.summary.comm_ns), steps, false).c_str(),
                per_step(double(m.summary.exposed_ns), steps, false).c_str(),
                100.0 * m.summary.overlap());
  return buf;
}

// One step of a run: its duration, loss, and how much of its communication was exposed.
std::string step_cell(const RunModel& m, int step) {
  int i = find_step(m.steps, step);
  if (i < 0) return "-";
  const StepInfo& st = m.steps[i];
  int64_t comm = 0, exposed = 0;
  for (const RankModel& rm : m.ranks) {
    ExposedComm e = exposed_comm_in(rm.exposed, st.t_begin, st.t_end);
    comm += e.comm_ns;
    exposed += e.exposed_ns;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s, loss %.4f, exposed %.0f%% of comm",
                format_duration(double(st.t_end - st.t_begin)).c_str(), st.loss,
                comm > 0 ? 100.0 * exposed / comm : 0.0);
  return buf;
}

// ---- the two widgets ---------------------------------------------------------------------------

void show_summary_table(ViewerState& s, ImVec2 size) {
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchProp;
  int n_runs = static_cast<int>(s.runs.size());
  s.summary_rows.clear();
  if (!ImGui::BeginTable("summary", 1 + n_runs, flags, size)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, 150);
  // The runs' columns share the width equally: sized by their content, a timing figure one digit
  // longer would move every column to its right (and a picture of the table with it).
  for (const RunView& r : s.runs)
    ImGui::TableSetupColumn(r.run->model().info.name.c_str(), ImGuiTableColumnFlags_WidthStretch,
                            1.0f);
  ImGui::TableHeadersRow();
  auto row = [&](const char* name, auto&& cell) {
    ImGui::TableNextRow();
    ImGui::TableSetColumnIndex(0);
    const ImVec2 top = ImGui::GetCursorScreenPos();  // column 0's cell: the row's left edge
    ImGui::TextUnformatted(name);
    ViewerState::SummaryRow rec{name, {}, {}};
    for (int i = 0; i < n_runs; ++i) {
      ImGui::TableSetColumnIndex(i + 1);
      std::string text = cell(*s.runs[i].run);
      ImGui::TextUnformatted(text.c_str());
      rec.cells.push_back(std::move(text));
    }
    rec.rect = Rect{top.x, top.y, size.x, ImGui::GetTextLineHeightWithSpacing()};
    s.summary_rows.push_back(std::move(rec));
  };
  auto model = [](auto cell) { return [cell](const LiveRun& r) { return cell(r.model()); }; };
  auto stragglers = [](auto cell) {
    return [cell](const LiveRun& r) { return cell(r.model().summary.stragglers); };
  };
  char buf[160];
  row("run", run_cell);
  row("steps, mean time", model([](const RunModel& m) {
        const SummaryFigures& x = m.summary;
        return std::to_string(x.n_steps) + ", " + format_duration(x.mean_step_s * 1e9) +
               (x.warmup_excluded ? " (first step left out)" : "");
      }));
  row("tokens/s (all ranks)", model([&](const RunModel& m) {
        std::snprintf(buf, sizeof buf, "%.0f", m.summary.tokens_per_s);
        return std::string(buf);
      }));
  row("loss at the last step", model([&](const RunModel& m) {
        std::snprintf(buf, sizeof buf, "%.4f", m.summary.last_loss);
        return std::string(buf);
      }));
  row("peak / rank (max)", model(peak_cell));
  for (OpKind k : {OpKind::all_gather, OpKind::reduce_scatter, OpKind::all_reduce}) {
    std::string name = std::string(op_kind_name(k)) + " /step";
    row(name.c_str(), model([k](const RunModel& m) { return collective_cell(m, k); }));
  }
  row("busbw", model(busbw_cell));
  row("waiting for ranks", stragglers(waiting_cell));
  row("straggler",
      stragglers([&](const StragglerReport& w) { return slowest_rank_cell(w, s.selected_step); }));
  row("memory imbalance", stragglers(imbalance_cell));
  row("comm, exposed /step", model(comm_cell));
  if (s.selected_step >= 0) {
    std::string name = "step " + std::to_string(s.selected_step);
    row(name.c_str(), model([&](const RunModel& m) { return step_cell(m, s.selected_step); }));
  }
  ImGui::EndTable();
}

// Peak memory per rank, stacked by category at the moment of the peak, on one scale; a row per
// rank of every run inside `bars`.
void show_peak_bars(ViewerState& s, const Rect& bars) {
  s.summary_plot = bars;
  ImGui::InvisibleButton("peaks", v2(std::max(1.0, bars.w), std::max(1.0, bars.h)));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  int total_rows = 0;
  for (const RunView& r : s.runs) total_rows += static_cast<int>(r.run->model().ranks.size());
  dl->AddText(v2(bars.x, bars.y), col(kText), "peak memory per rank, by category at the peak");
  if (total_rows == 0) return;
  int64_t v_max = shared_memory_scale(s);
  // Row labels: "r0" alone for one run, "<name> r0" when comparing.
  auto row_label = [&](const RunModel& m, size_t k) {
    return (s.runs.size() > 1 ? m.info.name + " " : std::string()) + "r" + std::to_string(k);
  };
  double label_w = 0;
  for (const RunView& r : s.runs)
    for (size_t k = 0; k < r.run->model().ranks.size(); ++k)
      label_w =
          std::max<double>(label_w, ImGui::CalcTextSize(row_label(r.run->model(), k).c_str()).x);
  label_w = std::min(label_w + 8, bars.w * 0.4);
  double top = bars.y + 18;
  double row_h = std::clamp((bars.h - 20) / total_rows, 4.0, 24.0);
  double w = std::max(1.0, bars.w - label_w - 70);
  int row = 0;
  for (const RunView& r : s.runs) {
    const RunModel& m = r.run->model();
    for (size_t k = 0; k < m.ranks.size(); ++k, ++row) {
      double y = top + row * row_h;
      const MemorySeries& ms = m.ranks[k].mem;
      Stack st = stack_categories(ms.at_peak);
      if (row_h >= 12) {
        std::string label = row_label(m, k);
        dl->PushClipRect(v2(bars.x, y), v2(bars.x + label_w - 4, y + row_h), true);
        dl->AddText(v2(bars.x, y + (row_h - 13) / 2), col(kDim), label.c_str());
        dl->PopClipRect();
      }
      for (int c = 0; c < kNumMemCategories; ++c) {
        if (ms.at_peak[c] == 0) continue;
        double x0 = bars.x + label_w + w * double(st.bottom[c]) / double(v_max);
        double x1 = bars.x + label_w + w * double(st.top(c, ms.at_peak)) / double(v_max);
        dl->AddRectFilled(v2(x0, y + 1), v2(std::max(x1, x0 + 1), y + row_h - 1),
                          col(category_color(static_cast<MemCategory>(c))));
      }
      if (row_h >= 12) {
        std::string t = format_bytes(ms.peak_total);
        dl->AddText(v2(bars.x + label_w + w * double(ms.peak_total) / double(v_max) + 4,
                       y + (row_h - 13) / 2),
                    col(kText), t.c_str());
      }
      if (m.info.mem_limit > 0) {
        double x = bars.x + label_w + w * double(m.info.mem_limit) / double(v_max);
        dl->AddLine(v2(x, y), v2(x, y + row_h), col(kCapacityColor), 2);
      }
    }
  }
  if (ImGui::IsItemHovered()) {
    int rrow = static_cast<int>((ImGui::GetIO().MousePos.y - top) / row_h);
    int i = 0;
    for (const RunView& r : s.runs) {
      const RunModel& m = r.run->model();
      if (rrow >= i && rrow < i + static_cast<int>(m.ranks.size()))
        memory_tooltip(m, rrow - i, m.ranks[rrow - i].mem.t_peak);
      i += static_cast<int>(m.ranks.size());
    }
  }
}

}  // namespace

void show_summary_panel(ViewerState& s) {
  const Rect& panel = s.layout.summary;
  begin_panel("Summary", panel);
  ImVec2 avail = ImGui::GetContentRegionAvail();
  float table_w = std::min(avail.x * 0.58f, 260.0f + 300.0f * s.runs.size());
  show_summary_table(s, ImVec2(table_w, avail.y));
  // The bars fill the rest of the row, up to the panel's right padding.
  ImGui::SameLine(0, 12);
  ImVec2 p = ImGui::GetCursorScreenPos();
  show_peak_bars(s, Rect{p.x, p.y, panel.x + panel.w - kPad - p.x, avail.y});
  ImGui::End();
}

}  // namespace shardlab::viewer
