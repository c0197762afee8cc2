#include "ckpt/checkpoint_dir.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"

namespace fs = std::filesystem;

namespace kiln {

std::string checkpoint_name(int64_t step) {
  return fmt::format("step_{:08d}", step);
}

namespace {
std::optional<int64_t> parse_step(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); i++) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}
}  // namespace

std::vector<CheckpointRef> list_checkpoints(const std::string& root) {
  std::vector<CheckpointRef> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory()) continue;
    auto step = parse_step(e.path().filename().string());
    if (step) out.push_back({*step, e.path().string()});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointRef& a, const CheckpointRef& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointRef> latest_checkpoint(const std::string& root) {
  auto all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

void remove_stale_checkpoint_temps(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path(), ec);
}

std::string commit_checkpoint(const std::string& root, int64_t step,
                              const std::function<void(const std::string& dir)>& write,
                              int keep_last) {
  fs::create_directories(root);
  std::string name = checkpoint_name(step);
  std::string tmp = (fs::path(root) / (".tmp-" + name + "-" + std::to_string(::getpid()))).string();
  std::string final_dir = (fs::path(root) / name).string();
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    write(tmp);
    fsync_path(tmp);
    if (fs::exists(final_dir)) {
      // The same step written again (a resumed run): move the old copy aside first, so that at
      // every instant one complete step_N exists.
      std::string old = (fs::path(root) / (".tmp-old-" + name)).string();
      fs::remove_all(old);
      fs::rename(final_dir, old);
      fs::rename(tmp, final_dir);
      fs::remove_all(old);
    } else {
      fs::rename(tmp, final_dir);
    }
    fsync_path(root);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  if (keep_last > 0) {
    auto all = list_checkpoints(root);
    for (size_t i = 0; i + keep_last < all.size(); i++) fs::remove_all(all[i].dir);
  }
  return final_dir;
}

}  // namespace kiln
