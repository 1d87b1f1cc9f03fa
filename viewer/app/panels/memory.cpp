// The memory panel of each run: one row per rank with the bytes of every category stacked over
// time (viewer/model/memory_series), the capacity line and the peak marked, and under --offload a
// host row per rank below it (the host tier, on its own scale); with overlay ranks, every rank's
// device total in one plot. Hover: that rank's categories at the cursor's time.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <imgui.h>

#include "viewer/app/draw.hpp"
#include "viewer/app/panels/panels.hpp"
#include "viewer/app/tooltips.hpp"
#include "viewer/app/view_control.hpp"
#include "viewer/model/colors.hpp"

namespace shardlab::viewer {

ValueAxis memory_row_axis(const Rect& canvas, int row, int rows, int64_t v_max) {
  double row_h = canvas.h / rows;
  const double pad = row_h >= kMinLabelledRowPx ? 3 : 0;  // thin rows: no gap between them
  return {static_cast<double>(v_max), canvas.y + (row + 1) * row_h - pad, row_h - 2 * pad};
}

int memory_rows_per_rank(const ViewerState& s, const RunModel& m) {
  return m.has_host_mem && !s.overlay_ranks ? 2 : 1;
}

namespace {

// The host rows' scale: a round number above every run's host peak, shared like the device one.
int64_t shared_host_scale(const ViewerState& s) {
  int64_t v = 0;
  for (const RunView& r : s.runs) v = std::max(v, r.run->model().host_max_peak);
  return nice_bytes_ceiling(static_cast<int64_t>(static_cast<double>(v) * 1.05));
}

}  // namespace

void show_memory_panel(ViewerState& s) {
  const int64_t v_max = shared_memory_scale(s);
  const int64_t host_max = shared_host_scale(s);
  // Every category but unattributed (imported runs only), which is listed where a run holds it.
  int64_t unattributed = 0;
  for (const RunView& r : s.runs)
    for (const auto& rank : r.run->model().ranks)
      unattributed =
          std::max(unattributed, rank.mem.peak_by_cat[static_cast<int>(MemCategory::unattributed)]);
  std::vector<LegendItem> legend;
  for (MemCategory c : kStackOrder)
    if (mem_category_shown(c, unattributed))
      legend.push_back({category_color(c), mem_category_name(c)});
  for (size_t i = 0; i < s.runs.size(); ++i) {
    auto [rv, m, axis, panel] =
        begin_run_panel(s, i, s.layout.runs[i].memory, "Memory by category", "memory");
    if (s.overlay_ranks) {
      std::vector<LegendItem> ranks;
      for (size_t r = 0; r < m.ranks.size(); ++r)
        ranks.push_back({rank_color(static_cast<int>(r)), "rank " + std::to_string(r) + " total"});
      draw_legend(ranks);
    } else {
      draw_legend(legend);
    }
    Rect c = place_canvas("memory_canvas", panel);
    handle_time_canvas(s, axis);
    rv.memory_plot = {axis.x0(), c.y, axis.width(), c.h};
    rv.host_rows.clear();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    int n = static_cast<int>(m.ranks.size());
    if (n == 0 || m.t_last == 0) {
      draw_centered_text(dl, c, rv.run->status().empty() ? "no events yet" : rv.run->status(),
                         kWarn);
      ImGui::End();
      continue;
    }
    ImGuiIO& io = ImGui::GetIO();
    bool hovered = ImGui::IsItemHovered();
    dl->PushClipRect(v2(c.x, c.y), v2(c.x + c.w, c.y + c.h), true);
    // Per rank its device row and, under --offload, its host row below it (the host tier's
    // categories in the same colours, on their own scale).
    const int per = memory_rows_per_rank(s, m);
    int rows = s.overlay_ranks ? 1 : n * per;
    double row_h = c.h / rows;
    // Rows thinner than a line of text (4096 ranks in a few hundred pixels): each row keeps its
    // bands, and the labels, scales and peak markers, which would pile into one white block, give
    // way to one line saying so.
    const bool thin = row_h < kMinLabelledRowPx;
    double y_cursor_row = hovered ? std::floor((io.MousePos.y - c.y) / row_h) : -1;
    for (int row = 0; row < rows; ++row) {
      const int rank = row / per;
      const bool host = per == 2 && row % 2 == 1;
      const int64_t row_max = host ? host_max : v_max;
      double top = c.y + row * row_h;
      ValueAxis va = memory_row_axis(c, row, rows, row_max);
      if (host) rv.host_rows.push_back({axis.x0(), top, axis.width(), row_h});
      dl->AddRectFilled(v2(axis.x0(), va.to_y(row_max)), v2(axis.x0() + axis.width(), va.y_bottom),
                        host ? IM_COL32(255, 255, 255, 18) : IM_COL32(255, 255, 255, 10));
      std::string label = s.overlay_ranks ? "all ranks"
                          : host          ? "rank " + std::to_string(rank) + " host"
                                          : "rank " + std::to_string(rank);
      if (!thin) dl->AddText(v2(c.x, top + 2), col(kText), label.c_str());
      if (!s.overlay_ranks && row_h >= 34) {
        const MemorySeries& own = host ? m.ranks[rank].host_mem : m.ranks[rank].mem;
        std::string peak = "peak " + format_bytes_short(own.peak_total);
        dl->AddText(v2(c.x, top + 16), col(kDim), peak.c_str());
      }
      std::string scale = format_bytes_short(row_max);
      if (!thin)
        dl->AddText(v2(axis.x0() + axis.width() - ImGui::CalcTextSize(scale.c_str()).x - 2,
                       va.to_y(row_max)),
                    col(kDim), scale.c_str());
      dl->PushClipRect(v2(axis.x0(), top), v2(axis.x0() + axis.width(), top + row_h), true);
      draw_steps(dl, axis, m.steps, s.selected_step, va.to_y(row_max), va.y_bottom, false);
      for (int r = 0; r < n; ++r) {
        if (!s.overlay_ranks && r != rank) continue;
        const MemorySeries& ms = host ? m.ranks[r].host_mem : m.ranks[r].mem;
        auto cols = memory_columns(ms, axis, m.ranks[r].t_last);
        if (!s.overlay_ranks) {
          for (const BandRect& b : memory_bands(cols, va))
            dl->AddRectFilled(v2(b.x0, b.y_top), v2(b.x1, b.y_bottom),
                              col(category_color(b.category)));
        } else {
          ImU32 rc = col(rank_color(r));
          for (size_t j = 0; j < cols.size(); ++j) {
            double y = va.to_y(double(cols[j].total));
            dl->AddLine(v2(cols[j].x0, y), v2(cols[j].x1, y), rc, 1.5f);
            if (j + 1 < cols.size())
              dl->AddLine(v2(cols[j].x1, y), v2(cols[j].x1, va.to_y(double(cols[j + 1].total))), rc,
                          1.5f);
          }
        }
        if (ms.samples.empty() || thin) continue;
        // Peak marker: a white tick and triangle above the highest point.
        double px = axis.to_x(double(ms.t_peak)), py = va.to_y(double(ms.peak_total));
        dl->AddLine(v2(px, py), v2(px, va.y_bottom), col(kPeakColor.with_alpha(140)));
        dl->AddTriangleFilled(v2(px - 4, py - 7), v2(px + 4, py - 7), v2(px, py - 1),
                              col(kPeakColor));
      }
      if (m.info.mem_limit > 0 && !host && !thin) {
        double y = va.to_y(double(m.info.mem_limit));
        dl->AddLine(v2(axis.x0(), y), v2(axis.x0() + axis.width(), y), col(kCapacityColor), 1.5f);
        dl->AddText(v2(axis.x0() + 4, y - 14), col(kCapacityColor), "capacity");
      }
      dl->PopClipRect();
    }
    if (thin) {
      const std::string note = std::to_string(n) + " ranks, one row each (" +
                               std::to_string(row_h).substr(0, 4) +
                               " px): too thin for labels; --overlay shows their totals";
      dl->AddText(v2(c.x, c.y + 2), col(kWarn), note.c_str());
    }
    draw_cursor_line(dl, s, axis, c.y, c.y + c.h);
    dl->PopClipRect();
    if (hovered && io.MousePos.x >= axis.x0()) {
      const int row = std::clamp(static_cast<int>(y_cursor_row), 0, rows - 1);
      int rank = s.overlay_ranks ? 0 : row / per;
      const bool host = !s.overlay_ranks && per == 2 && row % 2 == 1;
      if (s.overlay_ranks) {
        // Overlaid: the rank whose total is closest to the cursor.
        int64_t t = static_cast<int64_t>(axis.to_t(io.MousePos.x));
        ValueAxis va = memory_row_axis(c, 0, 1, v_max);
        double best = 1e300;
        for (int r = 0; r < n; ++r) {
          double d = std::abs(va.to_y(double(m.ranks[r].mem.at(t).total)) - io.MousePos.y);
          if (d < best) best = d, rank = r;
        }
      }
      memory_tooltip(m, rank, static_cast<int64_t>(axis.to_t(io.MousePos.x)), host);
    }
    ImGui::End();
  }
}

}  // namespace shardlab::viewer
