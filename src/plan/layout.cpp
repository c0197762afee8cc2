#include "plan/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <vector>

#include "core/closest_name.h"
#include "core/error.h"

namespace kiln::plan {

std::string Layout::recompute_text() const {
  if (recompute_op) return "op";
  if (recompute == Recompute::full && full_every > 1) return fmt::format("full/{}", full_every);
  return recompute_name(recompute);
}

std::string Layout::to_string() const {
  std::string s = fmt::format("tp={},pp={},", tp, pp);
  if (dp > 0) s += fmt::format("dp={},", dp);  // 0: not chosen yet
  s += fmt::format("mb={},zero={},recompute={}", mb, zero, recompute_text());
  if (vpp > 1) s += fmt::format(",vpp={}", vpp);
  if (cp > 1) s += fmt::format(",cp={}", cp);
  if (async_tp) s += ",asynctp=1";
  if (tp > 1 && !sp) s += ",sp=0";
  if (shard > 0 && dp > 0 && shard != dp_cp()) s += fmt::format(",shard={}", shard);
  return s;
}

std::string LayoutKeys::given(const Layout& l) const {
  std::vector<std::string> parts;
  if (tp) parts.push_back(fmt::format("tp={}", l.tp));
  if (cp) parts.push_back(fmt::format("cp={}", l.cp));
  if (pp) parts.push_back(fmt::format("pp={}", l.pp));
  if (dp) parts.push_back(fmt::format("dp={}", l.dp));
  if (mb) parts.push_back(fmt::format("mb={}", l.mb));
  if (vpp) parts.push_back(fmt::format("vpp={}", l.vpp));
  if (zero) parts.push_back(fmt::format("zero={}", l.zero));
  if (recompute) parts.push_back(fmt::format("recompute={}", l.recompute_text()));
  if (sp) parts.push_back(fmt::format("sp={:d}", l.sp));
  if (async_tp) parts.push_back(fmt::format("asynctp={:d}", l.async_tp));
  if (shard) parts.push_back(fmt::format("shard={}", l.shard));
  std::string s;
  for (size_t i = 0; i < parts.size(); i++) s += (i ? "," : "") + parts[i];
  return s;
}

Layout parse_layout(const std::string& text, LayoutKeys* given) {
  LayoutKeys keys_given;
  Layout l;
  l.dp = 0;
  bool sp_given = false;
  const std::vector<std::string> keys = {"tp",   "cp",        "pp", "dp",      "mb",   "vpp",
                                         "zero", "recompute", "sp", "asynctp", "shard"};
  std::set<std::string> seen;
  size_t pos = 0;
  if (text.find_first_not_of(", \t") == std::string::npos)
    fail(
        "--layout gives no key=value pair; e.g. --layout "
        "tp=8,pp=4,mb=1,zero=1,recompute=attention, "
        "or leave --layout out to search every layout");
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail("--layout: '{}' is not key=value; e.g. tp=8,pp=4,mb=1,zero=1,recompute=attention", item);
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string close = closest_name(key, keys);
      if (!close.empty()) fail("--layout: unknown key '{}' (did you mean '{}'?)", key, close);
      fail("--layout: unknown key '{}'; the keys are {}", key, join_names(keys));
    }
    if (!seen.insert(key).second) fail("--layout: '{}' is given twice", key);
    bool* flag = key == "tp"          ? &keys_given.tp
                 : key == "cp"        ? &keys_given.cp
                 : key == "pp"        ? &keys_given.pp
                 : key == "dp"        ? &keys_given.dp
                 : key == "mb"        ? &keys_given.mb
                 : key == "vpp"       ? &keys_given.vpp
                 : key == "zero"      ? &keys_given.zero
                 : key == "recompute" ? &keys_given.recompute
                 : key == "asynctp"   ? &keys_given.async_tp
                 : key == "shard"     ? &keys_given.shard
                                      : &keys_given.sp;
    *flag = true;
    if (key == "recompute") {
      // torchtitan's selective checkpointing (plan/recompute.h), then the trainer's names.
      if (value == "op") {
        l.recompute_op = true;
      } else if (value.rfind("full/", 0) == 0) {
        const std::string n = value.substr(5);
        auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), l.full_every);
        if (ec != std::errc() || p != n.data() + n.size() || l.full_every < 1)
          fail(
              "--layout: recompute=full/N recomputes one block in N; N must be a whole number "
              "of at least 1, got '{}'",
              n);
        l.recompute = Recompute::full;
      } else if (value == "none" || value == "attention" || value == "selective" ||
                 value == "full") {
        l.recompute = parse_recompute(value, "--layout: recompute");
      } else {
        fail(
            "--layout: recompute must be none, attention (also called selective), full, op or "
            "full/N (torchtitan's per-op and every-N-th-block checkpointing), got '{}'",
            value);
      }
      continue;
    }
    int v = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || p != value.data() + value.size())
      fail("--layout: {} must be a whole number, got '{}'", key, value);
    if (key == "asynctp") {
      if (v != 0 && v != 1) fail("--layout: asynctp is 0 or 1, got {}", v);
      l.async_tp = v == 1;
      continue;
    }
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
    else if (key == "cp")
      l.cp = v;
    else if (key == "pp")
      l.pp = v;
    else if (key == "dp")
      l.dp = v;
    else if (key == "mb")
      l.mb = v;
    else if (key == "vpp")
      l.vpp = v;
    else if (key == "shard")
      l.shard = v;
  }
  if (!sp_given) l.sp = l.tp > 1;
  if (l.tp == 1) l.sp = false;
  if (given) *given = keys_given;
  return l;
}

}  // namespace kiln::plan
