// Hover tooltips (see tooltips.hpp).
#include "viewer/app/tooltips.hpp"

#include <imgui.h>

#include "viewer/model/colors.hpp"

namespace shardlab::viewer {

void memory_tooltip(const RunModel& m, int rank, int64_t t, bool host) {
  const MemorySeries& ms = host ? m.ranks[rank].host_mem : m.ranks[rank].mem;
  MemSample v = ms.at(t);
  ImGui::BeginTooltip();
  ImGui::Text("%s rank %d%s at %s", m.info.name.c_str(), rank, host ? " host memory" : "",
              format_duration(double(t)).c_str());
  for (auto it = kStackOrder.rbegin(); it != kStackOrder.rend(); ++it) {  // top of the stack first
    int k = static_cast<int>(*it);
    if (v.cat[k] == 0) continue;
    Rgba c = category_color(*it);
    ImGui::TextColored(ImVec4(c.r / 255.f, c.g / 255.f, c.b / 255.f, 1), "%-17s %s",
                       mem_category_name(*it), format_bytes(v.cat[k]).c_str());
  }
  ImGui::Text("%-17s %s", "total", format_bytes(v.total).c_str());
  ImGui::Text("%-17s %s at %s", "peak", format_bytes(ms.peak_total).c_str(),
              format_duration(double(ms.t_peak)).c_str());
  if (m.info.mem_limit > 0 && !host)
    ImGui::Text("%-17s %s", "capacity", format_bytes(m.info.mem_limit).c_str());
  ImGui::EndTooltip();
}

void span_tooltip(const RunModel& m, const RunData& data, int rank, const Bar& bar) {
  if (rank >= static_cast<int>(data.ranks.size()) ||
      bar.span >= static_cast<int>(data.ranks[rank].spans.size()))
    return;
  const SpanEvent& sp = data.ranks[rank].spans[bar.span];
  int64_t dur = sp.t_end - sp.t_start;
  ImGui::BeginTooltip();
  Rgba c = op_color(bar.op);
  ImGui::TextColored(ImVec4(c.r / 255.f, c.g / 255.f, c.b / 255.f, 1), "%s", sp.op.c_str());
  ImGui::Text("rank %d, %s lane, unit %d", rank, lane_name(sp.lane), sp.unit);
  ImGui::Text("start %s, duration %s", format_duration(double(sp.t_start)).c_str(),
              format_duration(double(dur)).c_str());
  if (sp.bytes > 0 && sp.lane == Lane::comm && sp.sent >= 0)
    ImGui::Text("sent per rank %s, buffer %s (%s)", format_bytes(sp.sent).c_str(),
                format_bytes(sp.bytes).c_str(), dtype_name(sp.dtype));
  else if (sp.bytes > 0 && sp.lane == Lane::comm)
    ImGui::Text("buffer %s (%s)", format_bytes(sp.bytes).c_str(), dtype_name(sp.dtype));
  else if (sp.bytes > 0)
    ImGui::Text("%s (%s)", format_bytes(sp.bytes).c_str(), dtype_name(sp.dtype));
  if (sp.lane == Lane::comm) {
    if (sp.t_start > sp.t_issue)
      ImGui::Text("queued %s after issue",
                  format_duration(double(sp.t_start - sp.t_issue)).c_str());
    if (sp.t_wait >= 0) ImGui::Text("waited on at %s", format_duration(double(sp.t_wait)).c_str());
    if (is_collective(bar.op)) {
      Bandwidth bw = collective_bandwidth(bar.op, sp.bytes, dur, m.info.job_ranks());
      ImGui::Text("algbw %s, busbw %s (n=%d)", format_rate(bw.algbw).c_str(),
                  format_rate(bw.busbw).c_str(), m.info.job_ranks());
    }
    int64_t exposed = total_length(clip(m.ranks[rank].exposed.exposed, sp.t_start, sp.t_end));
    ImGui::TextColored(exposed > 0 ? ImVec4(1, 0.35f, 0.35f, 1) : ImVec4(0.6f, 0.8f, 0.6f, 1),
                       "exposed %s of %s", format_duration(double(exposed)).c_str(),
                       format_duration(double(dur)).c_str());
  }
  ImGui::EndTooltip();
}

}  // namespace shardlab::viewer
