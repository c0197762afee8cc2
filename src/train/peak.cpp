#include "train/peak.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "kernels/matmul.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// The file's format, so that a later kiln can tell its own files from anything else.
constexpr const char* kFormat = "kiln peak cache";
constexpr int kVersion = 1;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

PeakEntry entry_from_json(const nlohmann::json& j) {
  PeakEntry e;
  e.cpu = j.at("cpu").get<std::string>();
  e.threads = j.at("threads").get<int>();
  e.dtype = j.at("dtype").get<std::string>();
  e.gflops = j.at("gflops").get<double>();
  e.date = j.at("date").get<std::string>();
  if (e.threads < 1) throw std::runtime_error(fmt::format("threads = {}", e.threads));
  if (e.dtype != "fp32" && e.dtype != "bf16")
    throw std::runtime_error(fmt::format("dtype \"{}\"", e.dtype));
  if (!std::isfinite(e.gflops) || e.gflops <= 0)
    throw std::runtime_error(fmt::format("gflops = {}", e.gflops));
  return e;
}

}  // namespace

std::string peak_cache_path() {
  if (std::string d = env("KILN_CACHE_DIR"); !d.empty())
    return (fs::path(d) / "peak.json").string();
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty())
    return (fs::path(d) / "kiln" / "peak.json").string();
  if (std::string d = env("HOME"); !d.empty())
    return (fs::path(d) / ".cache" / "kiln" / "peak.json").string();
  return "";
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (!name.empty()) return name;
  }
  return "unknown CPU";
}

std::string local_date() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

std::vector<PeakEntry> read_peak_cache(const std::string& path, std::string* note) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return {};
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  std::vector<PeakEntry> out;
  try {
    if (!f) throw std::runtime_error("cannot be read");
    auto j = nlohmann::json::parse(text.str());
    if (!j.is_object() || j.value("format", "") != kFormat)
      throw std::runtime_error("not a file `kiln bench peak` writes");
    if (j.at("version").get<int>() != kVersion)
      throw std::runtime_error(
          fmt::format("version {}, this kiln reads {}", j.at("version").dump(), kVersion));
    if (!j.at("entries").is_array()) throw std::runtime_error("\"entries\" is not a list");
    for (const auto& e : j.at("entries")) out.push_back(entry_from_json(e));
  } catch (const std::exception& e) {
    if (note)
      *note = fmt::format(
          "ignoring the peak cache {} ({}); `kiln bench peak` on an idle machine writes a new one",
          path, e.what());
    return {};
  }
  return out;
}

void store_peak(const std::string& path, const PeakEntry& e, std::string* note) {
  if (path.empty())
    fail("kiln bench peak: no cache directory (set KILN_CACHE_DIR, XDG_CACHE_HOME or HOME)");
  std::vector<PeakEntry> entries = read_peak_cache(path, note);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& old : entries)
    if (old.cpu != e.cpu || old.threads != e.threads || old.dtype != e.dtype)
      list.push_back({{"cpu", old.cpu},
                      {"threads", old.threads},
                      {"dtype", old.dtype},
                      {"gflops", old.gflops},
                      {"date", old.date}});
  list.push_back({{"cpu", e.cpu},
                  {"threads", e.threads},
                  {"dtype", e.dtype},
                  {"gflops", e.gflops},
                  {"date", e.date}});
  nlohmann::json j = {{"format", kFormat}, {"version", kVersion}, {"entries", list}};
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec)
    fail("kiln bench peak: cannot create {}: {}", fs::path(path).parent_path().string(),
         ec.message());
  write_file_atomic(path, j.dump(2) + "\n");
}

std::optional<PeakEntry> find_peak(const std::vector<PeakEntry>& entries, const std::string& cpu,
                                   int threads, const std::string& dtype) {
  for (const auto& e : entries)
    if (e.cpu == cpu && e.threads == threads && e.dtype == dtype) return e;
  return std::nullopt;
}

std::string Peak::describe() const {
  std::string from = source == "kiln bench peak" ? "cached by kiln bench peak on " + date : source;
  if (raised_at_step < 0) return from;
  return fmt::format("raised to step {}'s rate; was {}", raised_at_step, from);
}

Peak resolve_peak(double configured_gflops, const std::string& dtype, int threads, bool probe,
                  std::vector<std::string>* notes) {
  Peak p;
  if (configured_gflops > 0) {
    p.gflops = configured_gflops;
    p.source = "hardware.peak_gflops";
    return p;
  }
  if (!probe) return p;
  std::string note;
  auto cached =
      find_peak(read_peak_cache(peak_cache_path(), &note), cpu_model_name(), threads, dtype);
  if (!note.empty() && notes) notes->push_back(note);
  if (cached) {
    p.gflops = cached->gflops;
    p.source = "kiln bench peak";
    p.date = cached->date;
    return p;
  }
  // Three rounds of ~40 ms per shape: a moment of load shrinks some rounds, not the best.
  p.gflops = measure_peak_gflops(0.12, dtype == "bf16", 3);
  p.source = "start-up probe";
  return p;
}

}  // namespace kiln
