// Nearest names by edit distance (suggest.hpp).
#include "core/base/suggest.hpp"

#include <algorithm>

namespace shardlab {

int edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: the distance between a[0, i) and b[0, j).
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > 256) return "";  // not a typo of a name; and keeps the table small
  const int limit = std::max<int>(1, static_cast<int>(word.size()) / 3);
  std::string best;
  int best_d = limit + 1;
  for (const std::string& c : candidates) {
    const int d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string n = nearest_name(word, candidates);
  return n.empty() ? "" : " (did you mean '" + n + "'?)";
}

}  // namespace shardlab
