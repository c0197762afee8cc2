// "Did you mean ...?" for unknown names: the closest known name by edit distance, if close.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

namespace kiln {

inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) prev[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); j++)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The known name within a third of the name's length in edits, or "" when none is that close.
inline std::string closest_name(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const auto& k : known) {
    size_t d = edit_distance(k, name);
    if (d < best_d) best_d = d, best = k;
  }
  return best;
}

// "a, b, c" for messages.
inline std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); i++) out += (i ? ", " : "") + names[i];
  return out;
}

// "a, b and c" (or "a, b or c" with last = "or").
inline std::string join_names(const std::vector<std::string>& names, const std::string& last) {
  std::string out;
  for (size_t i = 0; i < names.size(); i++)
    out += (i == 0 ? "" : i + 1 == names.size() ? " " + last + " " : ", ") + names[i];
  return out;
}

}  // namespace kiln
