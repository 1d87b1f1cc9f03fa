// The wrap policy: parsing, the pieces -> units assignment, and the schedule of one micro-batch.
#include "core/fsdp/wrap_policy.hpp"

#include <algorithm>
#include <cctype>

#include "core/base/error.hpp"
#include "core/model/params.hpp"

namespace shardlab {

namespace {

// K or N after "blocks:" / "size:": digits only, >= 1.
int64_t parse_count(const std::string& text, const std::string& digits, const char* what) {
  const bool ok = !digits.empty() && digits.size() <= 15 &&
                  std::all_of(digits.begin(), digits.end(),
                              [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (!ok)
    SL_THROW(InvalidArgument, "--wrap ", text, ": ", what, " must be a whole number >= 1, not '",
             digits, "'");
  const int64_t v = std::stoll(digits);
  if (v < 1) SL_THROW(InvalidArgument, "--wrap ", text, ": ", what, " must be >= 1");
  return v;
}

// Pieces in forward order: 0 = root, 1 + 2l = block l's attention half, 2 + 2l = its MLP half.
int attn_piece(int l) { return 1 + 2 * l; }
int mlp_piece(int l) { return 2 + 2 * l; }

}  // namespace

WrapPolicy parse_wrap_policy(const std::string& text) {
  if (text == "block") return {WrapKind::block, 0};
  if (text == "whole") return {WrapKind::whole, 0};
  if (text == "layer") return {WrapKind::layer, 0};
  const size_t colon = text.find(':');
  const std::string head = text.substr(0, colon);
  const std::string tail = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (head == "blocks") return {WrapKind::blocks, parse_count(text, tail, "K (blocks per unit)")};
  if (head == "size") return {WrapKind::size, parse_count(text, tail, "N (min_num_params)")};
  SL_THROW(InvalidArgument, "--wrap ", text.empty() ? "''" : text,
           ": unknown wrap policy (block, whole, layer, blocks:K, size:N)");
}

std::string wrap_policy_name(const WrapPolicy& p) {
  switch (p.kind) {
    case WrapKind::block: return "block";
    case WrapKind::whole: return "whole";
    case WrapKind::layer: return "layer";
    case WrapKind::blocks: return "blocks:" + std::to_string(p.n);
    case WrapKind::size: return "size:" + std::to_string(p.n);
  }
  return "?";
}

WrapPlan make_wrap_plan(const GPTConfig& cfg, const WrapPolicy& p) {
  const int L = cfg.n_layer;
  SL_CHECK(L >= 1, "wrap: the model has ", L, " blocks");
  WrapPlan w;
  const UnitLayout block0 = unit_layout(cfg, block_unit(0));
  w.attn_numel = block_attn_numel(cfg);  // the layers' split (params.hpp), where ln_2 starts
  SL_CHECK(block0.find("h.0.ln_2.weight").offset == w.attn_numel,
           "wrap: a block's MLP half does not start at ln_2 (core/model/params.hpp)");
  w.mlp_numel = block0.numel - w.attn_numel;
  const int64_t root_numel = unit_layout(cfg, kRootUnit).numel;

  // Each piece's unit, before renumbering by first use (the root's is 0).
  const int n_pieces = 1 + 2 * L;
  std::vector<int> owner(n_pieces, 0);
  int next = 1;
  switch (p.kind) {
    case WrapKind::block:
      for (int l = 0; l < L; ++l) owner[attn_piece(l)] = owner[mlp_piece(l)] = 1 + l;
      break;
    case WrapKind::whole: break;
    case WrapKind::layer:
      for (int l = 0; l < L; ++l) {
        owner[attn_piece(l)] = 1 + 2 * l;
        owner[mlp_piece(l)] = 2 + 2 * l;
      }
      break;
    case WrapKind::blocks:
      for (int l = 0; l < L; ++l)
        owner[attn_piece(l)] = owner[mlp_piece(l)] = 1 + static_cast<int>(l / p.n);
      break;
    case WrapKind::size:
      // size_based_auto_wrap_policy, bottom up: children first, then the block with what its
      // children left unwrapped; the ModuleList of blocks is excluded, the root takes the rest.
      for (int l = 0; l < L; ++l) {
        int64_t left = 0;
        std::vector<int> unwrapped;
        for (int piece : {attn_piece(l), mlp_piece(l)}) {
          const int64_t n = piece == attn_piece(l) ? w.attn_numel : w.mlp_numel;
          if (n >= p.n) {
            owner[piece] = next++;
          } else {
            left += n;
            unwrapped.push_back(piece);
          }
        }
        if (left > 0 && left >= p.n) {
          for (int piece : unwrapped) owner[piece] = next;
          ++next;
        }
      }
      break;
  }

  // Renumber: root 0, then in order of first use (the pieces' forward order).
  std::vector<int> renum(n_pieces + 1, -1);
  renum[0] = 0;
  int count = 1;
  for (int piece = 0; piece < n_pieces; ++piece)
    if (renum[owner[piece]] < 0) renum[owner[piece]] = count++;
  w.units.resize(count);

  auto piece_numel = [&](int piece) {
    return piece == 0 ? root_numel : (piece % 2 == 1 ? w.attn_numel : w.mlp_numel);
  };
  auto piece_segment = [&](int piece) {
    if (piece == 0) return WrapSegment{kRootUnit, 0, root_numel};
    const int l = (piece - 1) / 2;
    return piece % 2 == 1 ? WrapSegment{block_unit(l), 0, w.attn_numel}
                          : WrapSegment{block_unit(l), w.attn_numel, w.mlp_numel};
  };
  w.attn.resize(L);
  w.mlp.resize(L);
  std::vector<std::vector<int>> held(count);
  for (int piece = 0; piece < n_pieces; ++piece) {
    const int u = renum[owner[piece]];
    WrapUnit& unit = w.units[u];
    const PiecePlace place{u, unit.numel};
    const WrapSegment seg = piece_segment(piece);
    // A block's MLP half right after its attention half in the same unit: one segment.
    if (!unit.segments.empty() && unit.segments.back().model_unit == seg.model_unit &&
        unit.segments.back().offset + unit.segments.back().numel == seg.offset)
      unit.segments.back().numel += seg.numel;
    else
      unit.segments.push_back(seg);
    unit.numel += piece_numel(piece);
    held[u].push_back(piece);
    if (piece == 0)
      w.root = place;
    else if (piece % 2 == 1)
      w.attn[(piece - 1) / 2] = place;
    else
      w.mlp[(piece - 1) / 2] = place;
  }

  // Names, by what each unit holds.
  for (int u = 0; u < count; ++u) {
    const std::vector<int>& ps = held[u];
    WrapUnit& unit = w.units[u];
    if (static_cast<int>(ps.size()) == n_pieces) {
      unit.name = "whole model";
      continue;
    }
    std::vector<int> blocks;  // whole blocks, in order
    std::vector<int> halves;  // lone halves
    for (size_t i = 0; i < ps.size(); ++i) {
      if (ps[i] == 0) continue;
      if (ps[i] % 2 == 1 && i + 1 < ps.size() && ps[i + 1] == ps[i] + 1) {
        blocks.push_back((ps[i] - 1) / 2);
        ++i;
      } else {
        halves.push_back(ps[i]);
      }
    }
    std::string name;
    auto add = [&](const std::string& s) { name += (name.empty() ? "" : " + ") + s; };
    if (ps.front() == 0) add("root");
    if (!blocks.empty()) {
      const bool run = blocks.back() - blocks.front() + 1 == static_cast<int>(blocks.size());
      if (blocks.size() == 1)
        add("block " + std::to_string(blocks[0]));
      else if (run)
        add("blocks " + std::to_string(blocks.front()) + "-" + std::to_string(blocks.back()));
      else
        add(std::to_string(blocks.size()) + " blocks");
    }
    if (halves.size() == 1) {
      const int h = halves[0];
      add("block " + std::to_string((h - 1) / 2) + (h % 2 == 1 ? " attn" : " mlp"));
    } else if (!halves.empty()) {
      const bool all_attn =
          std::all_of(halves.begin(), halves.end(), [](int h) { return h % 2 == 1; });
      add(std::to_string(halves.size()) + (all_attn ? " attn halves" : " block halves"));
    }
    unit.name = name;
  }
  return w;
}

// ---- the schedule -----------------------------------------------------------------------------

namespace {

void add_use(PassSchedule& s, UseKind kind, int layer, std::vector<int> units) {
  std::vector<int> uniq;
  for (int u : units)
    if (std::find(uniq.begin(), uniq.end(), u) == uniq.end()) uniq.push_back(u);
  s.uses.push_back({kind, layer, uniq, {}});
}

void block_uses(PassSchedule& s, const WrapPlan& w, int l, bool backward) {
  const int a = w.attn[l].unit, m = w.mlp[l].unit;
  if (a == m) {
    add_use(s, UseKind::block, l, {a});
  } else if (!backward) {
    add_use(s, UseKind::attn, l, {a});
    add_use(s, UseKind::mlp, l, {m});
  } else {
    add_use(s, UseKind::mlp, l, {m});
    add_use(s, UseKind::attn, l, {a});
  }
}

// Fills order, pos and each use's release list from the uses.
void finish(PassSchedule& s, int n_units) {
  s.pos.assign(n_units, -1);
  std::vector<int> last(n_units, -1);
  for (size_t i = 0; i < s.uses.size(); ++i)
    for (int u : s.uses[i].units) {
      if (s.pos[u] < 0) {
        s.pos[u] = static_cast<int>(s.order.size());
        s.order.push_back(u);
      }
      last[u] = static_cast<int>(i);
    }
  for (int u = 0; u < n_units; ++u)
    if (last[u] >= 0) s.uses[last[u]].release.push_back(u);
}

}  // namespace

PassSchedule forward_schedule(const WrapPlan& w, int n_layer, bool keep_root) {
  PassSchedule s;
  add_use(s, UseKind::embed, -1, {w.root.unit});
  for (int l = 0; l < n_layer; ++l) block_uses(s, w, l, false);
  add_use(s, UseKind::head, -1, {w.root.unit});
  finish(s, static_cast<int>(w.units.size()));
  if (keep_root) {
    std::vector<int>& rel = s.uses.back().release;
    rel.erase(std::remove(rel.begin(), rel.end(), w.root.unit), rel.end());
  }
  return s;
}

PassSchedule backward_schedule(const WrapPlan& w, int n_layer, bool act_ckpt) {
  PassSchedule s;
  add_use(s, UseKind::head, -1, {w.root.unit});
  for (int l = n_layer - 1; l >= 0; --l) {
    if (act_ckpt) add_use(s, UseKind::recompute, l, {w.mlp[l].unit, w.attn[l].unit});
    block_uses(s, w, l, true);
  }
  add_use(s, UseKind::embed, -1, {w.root.unit});
  finish(s, static_cast<int>(w.units.size()));
  return s;
}

std::string use_name(const UnitUse& u) {
  const std::string b = "block " + std::to_string(u.layer);
  switch (u.kind) {
    case UseKind::embed: return "embedding";
    case UseKind::block: return b;
    case UseKind::attn: return b + " attn";
    case UseKind::mlp: return b + " mlp";
    case UseKind::recompute: return b;  // part of the block's backward
    case UseKind::head: return "head";
  }
  return "?";
}

}  // namespace shardlab
