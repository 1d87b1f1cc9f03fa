// "Did you mean ...?" for a mistyped name (a subcommand, a key of a cluster spec): the known name
// nearest by edit distance, when it is near enough to be a typo.
#pragma once

#include <string>
#include <vector>

namespace shardlab {

// Edit distance with adjacent transpositions (optimal string alignment): "trian" is 1 from
// "train", "devices_per_nod" 1 from "devices_per_node".
int edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word`, if it is at most max(1, |word| / 3) edits away (a typo, not
// another word); "" when none is.
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

// " (did you mean 'X'?)" for nearest_name's X, or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace shardlab
