#include "obs/progress.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/clock.h"
#include "core/process.h"

namespace kiln {

namespace {
constexpr size_t kRecordBytes = 256;  // every record is padded to this, so none leaves a tail
std::string progress_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "progress.json").string();
}
}  // namespace

ProgressFile::ProgressFile(const std::string& out_dir, double run_started)
    : path_(progress_path(out_dir)), run_started_(run_started), host_(host_name()) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fmt::print(stderr, "kiln: warning: cannot write {}: {} (kiln launch will not know the step)\n",
               path_, std::strerror(errno));
}

ProgressFile::~ProgressFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ProgressFile::write(int64_t step) {
  if (fd_ < 0) return;
  nlohmann::json j = {{"step", step},
                      {"run_started", run_started_},
                      {"time", unix_seconds()},
                      {"pid", static_cast<int64_t>(getpid())},
                      {"host", host_}};
  std::string s = j.dump();
  if (s.size() + 1 > kRecordBytes) s = s.substr(0, kRecordBytes - 1);  // an absurd host name
  s.resize(kRecordBytes - 1, ' ');
  s += '\n';
  if (::pwrite(fd_, s.data(), s.size(), 0) != static_cast<ssize_t>(s.size())) {
    fmt::print(stderr, "kiln: warning: cannot write {}: {}; not updating it again\n", path_,
               std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
  }
}

std::optional<ProgressRecord> read_progress(const std::string& out_dir) {
  std::ifstream f(progress_path(out_dir));
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    auto j = nlohmann::json::parse(ss.str());
    ProgressRecord r;
    r.step = j.at("step").get<int64_t>();
    r.run_started = j.at("run_started").get<double>();
    r.time = j.at("time").get<double>();
    r.pid = j.value("pid", int64_t{0});
    r.host = j.value("host", std::string());
    return r;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace kiln
