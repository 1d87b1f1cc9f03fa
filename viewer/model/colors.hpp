// The viewer's one colour table: memory categories, span ops, unit states, ranks, and the red that
// marks exposed communication. Plain RGBA so the model, the app and the screenshot test agree.
#pragma once

#include <cstdint>

#include "core/memory/tracker.hpp"
#include "core/trace/recorder.hpp"
#include "viewer/model/ops.hpp"

namespace shardlab::viewer {

struct Rgba {
  uint8_t r = 0, g = 0, b = 0, a = 255;
  // Dear ImGui's IM_COL32 packing (A in the top byte, R in the bottom one).
  uint32_t packed() const {
    return (static_cast<uint32_t>(a) << 24) | (static_cast<uint32_t>(b) << 16) |
           (static_cast<uint32_t>(g) << 8) | r;
  }
  Rgba with_alpha(uint8_t alpha) const { return {r, g, b, alpha}; }
  bool operator==(const Rgba& o) const { return r == o.r && g == o.g && b == o.b && a == o.a; }
};

Rgba category_color(MemCategory c);
Rgba op_color(OpKind k);
Rgba unit_state_color(UnitState s);
Rgba rank_color(int rank);  // for overlaid per-rank lines
inline constexpr Rgba kExposedColor{230, 30, 30, 255};
inline constexpr Rgba kCapacityColor{255, 64, 64, 255};
inline constexpr Rgba kPeakColor{255, 255, 255, 255};

}  // namespace shardlab::viewer
