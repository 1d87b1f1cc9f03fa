// The wrap policy: parsing, the stages -> units assignment, and the schedule of one micro-batch.
#include "core/fsdp/wrap_policy.hpp"

#include <algorithm>
#include <cctype>

#include "core/base/error.hpp"

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

namespace {

// Each stage's unit before renumbering by first use; 0 is the root.
std::vector<int> assign_units(const Model& m, const WrapPolicy& p) {
  std::vector<int> owner(static_cast<size_t>(m.num_stages()), 0);
  const std::vector<ModelLayer>& layers = m.layers();
  int next = 1;
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::vector<int>& st = layers[l].stages;
    switch (p.kind) {
      case WrapKind::block:
        for (int s : st) owner[s] = 1 + static_cast<int>(l);
        break;
      case WrapKind::whole: break;
      case WrapKind::layer:
        for (int s : st) owner[s] = next++;
        break;
      case WrapKind::blocks:
        for (int s : st) owner[s] = 1 + static_cast<int>(static_cast<int64_t>(l) / p.n);
        break;
      case WrapKind::size: {
        // size_based_auto_wrap_policy, bottom up: the layer's stages first, then the layer with
        // what its stages left unwrapped; the list of layers is excluded, the root takes the rest.
        int64_t left = 0;
        std::vector<int> unwrapped;
        for (int s : st) {
          if (m.stage(s).numel() >= p.n) {
            owner[s] = next++;
          } else {
            left += m.stage(s).numel();
            unwrapped.push_back(s);
          }
        }
        if (left > 0 && left >= p.n) {
          for (int s : unwrapped) owner[s] = next;
          ++next;
        }
        break;
      }
    }
  }
  return owner;
}

// "block 3", "blocks 0-1", "4 blocks" for whole layers; a stage's name, "3 attn halves", "3 block
// parts" for stages of layers held in part; "root" first when it holds the root's own stages.
std::string unit_name(const Model& m, const std::vector<int>& stages) {
  if (static_cast<int>(stages.size()) == m.num_stages()) return "whole model";
  const std::vector<ModelLayer>& layers = m.layers();
  std::vector<size_t> held(layers.size(), 0);
  for (int s : stages)
    if (m.layer_of(s) >= 0) ++held[static_cast<size_t>(m.layer_of(s))];
  bool root = false, two_stage_layers = true;
  std::vector<int> whole, lone;  // whole layers; stages of layers held in part
  for (const ModelLayer& l : layers) two_stage_layers = two_stage_layers && l.stages.size() == 2;
  for (int s : stages) {
    const int l = m.layer_of(s);
    if (l < 0) {
      root = true;
    } else if (held[static_cast<size_t>(l)] < layers[static_cast<size_t>(l)].stages.size()) {
      lone.push_back(s);
    } else if (whole.empty() || whole.back() != l) {
      whole.push_back(l);
    }
  }
  std::string name;
  auto add = [&](const std::string& part) { name += (name.empty() ? "" : " + ") + part; };
  if (root) add("root");
  const std::string& item = m.layer_item();
  if (whole.size() == 1) {
    add(layers[static_cast<size_t>(whole[0])].name);
  } else if (!whole.empty()) {
    const bool run = whole.back() - whole.front() + 1 == static_cast<int>(whole.size());
    add(run ? item + "s " + std::to_string(whole.front()) + "-" + std::to_string(whole.back())
            : std::to_string(whole.size()) + " " + item + "s");
  }
  if (lone.size() == 1) {
    add(m.stage(lone[0]).name());
  } else if (!lone.empty()) {
    const std::string& role = m.stage(lone[0]).role();
    const bool one_role =
        std::all_of(lone.begin(), lone.end(), [&](int s) { return m.stage(s).role() == role; });
    add(std::to_string(lone.size()) + " " + (one_role ? role : item) +
        (two_stage_layers ? " halves" : " parts"));
  }
  return name;
}

}  // namespace

WrapPlan make_wrap_plan(const Model& m, const WrapPolicy& p) {
  const std::vector<int> owner = assign_units(m, p);
  // Buffer order: the root's own stages, then the layers' stages in forward order. Units are
  // numbered in the same order of first appearance, so the root's is 0.
  std::vector<int> order = m.root_stages();
  for (const ModelLayer& l : m.layers())
    order.insert(order.end(), l.stages.begin(), l.stages.end());
  std::vector<int> renum(order.size() + 1, -1);
  WrapPlan w;
  w.place.resize(static_cast<size_t>(m.num_stages()));
  for (int s : order) {
    int& u = renum[static_cast<size_t>(owner[static_cast<size_t>(s)])];
    if (u < 0) {
      u = static_cast<int>(w.units.size());
      w.units.emplace_back();
    }
    WrapUnit& unit = w.units[static_cast<size_t>(u)];
    w.place[static_cast<size_t>(s)] = {u, unit.numel};
    unit.stages.push_back(s);
    unit.numel += m.stage(s).numel();
  }
  for (WrapUnit& u : w.units) u.name = unit_name(m, u.stages);
  return w;
}

// ---- the schedule -----------------------------------------------------------------------------

namespace {

// The units stage s needs gathered: its own, then those of the parameters it is tied to.
std::vector<int> stage_units(const Model& m, const WrapPlan& w, int s) {
  std::vector<int> units{w.place[static_cast<size_t>(s)].unit};
  for (const TieRef& t : m.ties(s)) {
    const int u = w.place[static_cast<size_t>(t.owner)].unit;
    if (std::find(units.begin(), units.end(), u) == units.end()) units.push_back(u);
  }
  return units;
}

// Appends stage s to the last use when it continues it (same layer, same units), else a new use.
void add_stage(PassSchedule& sch, const Model& m, const WrapPlan& w, int s) {
  const std::vector<int> units = stage_units(m, w, s);
  const int l = m.layer_of(s);
  if (!sch.uses.empty()) {
    StageUse& last = sch.uses.back();
    if (!last.recompute && l >= 0 && last.layer == l && last.units == units) {
      last.stages.push_back(s);
      return;
    }
  }
  StageUse use;
  use.stages = {s};
  use.layer = l;
  use.units = units;
  sch.uses.push_back(std::move(use));
}

// Act-ckpt: layer l's forward again, its stages' units gathered in the order backward uses them.
void add_recompute(PassSchedule& sch, const Model& m, const WrapPlan& w, int l) {
  StageUse use;
  use.stages = m.layers()[static_cast<size_t>(l)].stages;
  use.layer = l;
  use.recompute = true;
  for (auto it = use.stages.rbegin(); it != use.stages.rend(); ++it)
    for (int u : stage_units(m, w, *it))
      if (std::find(use.units.begin(), use.units.end(), u) == use.units.end())
        use.units.push_back(u);
  sch.uses.push_back(std::move(use));
}

// Fills order, pos, each use's release list, and whether it ends its layer: the last stage the
// pass runs of it is `last_of(layer)`.
template <typename LastOf>
void finish(PassSchedule& s, int n_units, LastOf last_of) {
  s.pos.assign(static_cast<size_t>(n_units), -1);
  std::vector<int> last(static_cast<size_t>(n_units), -1);
  for (size_t i = 0; i < s.uses.size(); ++i) {
    StageUse& use = s.uses[i];
    use.ends_layer = !use.recompute && (use.layer < 0 || use.stages.back() == last_of(use.layer));
    for (int u : use.units) {
      if (s.pos[static_cast<size_t>(u)] < 0) {
        s.pos[static_cast<size_t>(u)] = static_cast<int>(s.order.size());
        s.order.push_back(u);
      }
      last[static_cast<size_t>(u)] = static_cast<int>(i);
    }
  }
  for (int u = 0; u < n_units; ++u)
    if (last[static_cast<size_t>(u)] >= 0)
      s.uses[static_cast<size_t>(last[u])].release.push_back(u);
}

}  // namespace

PassSchedule forward_schedule(const Model& m, const WrapPlan& w, bool keep_root) {
  PassSchedule s;
  for (int st = 0; st < m.num_stages(); ++st) add_stage(s, m, w, st);
  finish(s, static_cast<int>(w.units.size()),
         [&](int l) { return m.layers()[static_cast<size_t>(l)].stages.back(); });
  if (keep_root && !m.root_stages().empty()) {
    const int root = w.place[static_cast<size_t>(m.root_stages().front())].unit;
    for (StageUse& use : s.uses)
      use.release.erase(std::remove(use.release.begin(), use.release.end(), root),
                        use.release.end());
  }
  return s;
}

PassSchedule backward_schedule(const Model& m, const WrapPlan& w, bool act_ckpt) {
  PassSchedule s;
  for (int st = m.num_stages() - 1; st >= 0; --st) {
    const int l = m.layer_of(st);
    if (act_ckpt && l >= 0 && st == m.layers()[static_cast<size_t>(l)].stages.back())
      add_recompute(s, m, w, l);
    add_stage(s, m, w, st);
  }
  finish(s, static_cast<int>(w.units.size()),
         [&](int l) { return m.layers()[static_cast<size_t>(l)].stages.front(); });
  return s;
}

}  // namespace shardlab
