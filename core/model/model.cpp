// Model: checks a model's definition and resolves its ties.
#include "core/model/model.hpp"

#include <map>

#include "core/base/error.hpp"

namespace shardlab {

namespace {

// Where each parameter of the model lives: (stage, offset in its flat range, the parameter).
struct ParamPlace {
  int stage;
  int64_t offset;
  const StageParam* param;
};

std::map<std::string, ParamPlace> place_params(const ModelDef& d) {
  std::map<std::string, ParamPlace> at;
  for (size_t s = 0; s < d.stages.size(); ++s) {
    int64_t off = 0;
    for (const StageParam& p : d.stages[s]->params()) {
      SL_CHECK(at.emplace(p.name, ParamPlace{static_cast<int>(s), off, &p}).second, "model ",
               d.family, ": parameter ", p.name, " is in two stages");
      off += p.numel();
    }
  }
  return at;
}

}  // namespace

Model::Model(ModelDef def) : def_(std::make_shared<const ModelDef>(std::move(def))) {
  const ModelDef& d = *def_;
  const int S = static_cast<int>(d.stages.size());
  SL_CHECK(S > 0, "model ", d.family, ": no stages");
  SL_CHECK(static_cast<bool>(d.begin), "model ", d.family, ": no pass factory");
  for (const auto& s : d.stages) SL_CHECK(s != nullptr, "model ", d.family, ": a null stage");
  layer_of_.assign(static_cast<size_t>(S), -1);
  int next = 0;  // layers run in forward order and do not overlap
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const std::vector<int>& st = d.layers[l].stages;
    SL_CHECK(!st.empty(), "model ", d.family, ": layer ", d.layers[l].name, " has no stages");
    for (size_t i = 0; i < st.size(); ++i) {
      SL_CHECK(st[i] >= next && st[i] < S && (i == 0 || st[i] == st[i - 1] + 1), "model ", d.family,
               ": layer ", d.layers[l].name,
               " is not a run of consecutive stages after the layer before it");
      layer_of_[static_cast<size_t>(st[i])] = static_cast<int>(l);
    }
    next = st.back() + 1;
  }
  for (int s = 0; s < S; ++s)
    if (layer_of_[static_cast<size_t>(s)] < 0) root_stages_.push_back(s);

  const std::map<std::string, ParamPlace> at = place_params(d);
  ties_.resize(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    num_params_ += d.stages[static_cast<size_t>(s)]->numel();
    for (const std::string& name : d.stages[static_cast<size_t>(s)]->ties()) {
      auto it = at.find(name);
      SL_CHECK(it != at.end(), "model ", d.family, ": stage ", stage(s).name(),
               " is tied to a parameter no stage has: ", name);
      SL_CHECK(it->second.stage != s, "model ", d.family, ": stage ", stage(s).name(),
               " is tied to its own parameter ", name);
      ties_[static_cast<size_t>(s)].push_back(
          {it->second.stage, it->second.offset, it->second.param->numel()});
    }
  }
}

}  // namespace shardlab
