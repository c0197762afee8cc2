#include "plan/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <vector>

#include "core/closest_name.h"
#include "core/error.h"

namespace kiln::plan {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

std::string Layout::to_string() const {
  std::string s = fmt::format("tp={},pp={},", tp, pp);
  if (dp > 0) s += fmt::format("dp={},", dp);  // 0: not chosen yet
  s += fmt::format("mb={},zero={},recompute={}", mb, zero, recompute_name(recompute));
  if (vpp > 1) s += fmt::format(",vpp={}", vpp);
  if (tp > 1 && !sp) s += ",sp=0";
  return s;
}

Layout parse_layout(const std::string& text) {
  Layout l;
  l.dp = 0;
  bool sp_given = false;
  const std::vector<std::string> keys = {"tp", "pp", "dp", "mb", "vpp", "zero", "recompute", "sp"};
  std::set<std::string> seen;
  size_t pos = 0;
  if (text.empty())
    fail("--layout is empty; e.g. --layout tp=8,pp=4,mb=1,zero=1,recompute=selective");
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail("--layout: '{}' is not key=value; e.g. tp=8,pp=4,mb=1,zero=1,recompute=selective", item);
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string close = closest_name(key, keys);
      if (!close.empty()) fail("--layout: unknown key '{}' (did you mean '{}'?)", key, close);
      fail("--layout: unknown key '{}'; the keys are {}", key, join_names(keys));
    }
    if (!seen.insert(key).second) fail("--layout: '{}' is given twice", key);
    if (key == "recompute") {
      if (value == "none")
        l.recompute = Recompute::none;
      else if (value == "selective")
        l.recompute = Recompute::selective;
      else if (value == "full")
        l.recompute = Recompute::full;
      else
        fail("--layout: recompute must be none, selective or full, got '{}'", value);
      continue;
    }
    int v = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || p != value.data() + value.size())
      fail("--layout: {} must be a whole number, got '{}'", key, value);
    if (key == "sp") {
      if (v != 0 && v != 1) fail("--layout: sp is 0 or 1, got {}", v);
      l.sp = v == 1;
      sp_given = true;
      continue;
    }
    if (key == "zero") {
      if (v < 0 || v > 3) fail("--layout: zero is a ZeRO stage 0..3, got {}", v);
      l.zero = v;
      continue;
    }
    if (v < 1) fail("--layout: {} must be at least 1, got {}", key, v);
    if (key == "tp")
      l.tp = v;
    else if (key == "pp")
      l.pp = v;
    else if (key == "dp")
      l.dp = v;
    else if (key == "mb")
      l.mb = v;
    else if (key == "vpp")
      l.vpp = v;
  }
  if (!sp_given) l.sp = l.tp > 1;
  if (l.tp == 1) l.sp = false;
  return l;
}

}  // namespace kiln::plan
