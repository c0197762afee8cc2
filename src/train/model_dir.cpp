#include "train/model_dir.h"

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/file.h"
#include "train/hf_weights.h"

namespace fs = std::filesystem;

namespace kiln {

std::string resolve_model_dir(const std::string& dir, const std::string& what) {
  if (fs::exists(fs::path(dir) / "model.safetensors")) return dir;
  for (auto root : {fs::path(dir), fs::path(dir) / "checkpoints"})
    if (auto ck = latest_checkpoint(root.string())) return ck->dir;
  if (!fs::exists(fs::path(dir) / "config.json"))
    fail(
        "{} {}: no config.json and model.safetensors there (give a checkpoint directory such as "
        "runs/tiny/checkpoints/step_00000050, or a run directory)",
        what, dir);
  return dir;
}

LoadedModel load_model_dir(const std::string& dir, int vocab_multiple) {
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  nlohmann::json hf;
  try {
    hf = nlohmann::json::parse(read_file(cfg_path, "config"));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", cfg_path, e.what());
  }
  LoadedModel m;
  m.dir = dir;
  m.config = config_from_hf(hf, cfg_path, vocab_multiple);
  const ParamLayout layout = param_layout(m.config);
  m.params.resize(layout.total);
  load_tensors(TensorFiles(dir), layout, m.config, m.params.data());
  return m;
}

std::string export_model(const std::string& from, const std::string& out) {
  const std::string dir = resolve_model_dir(from, "ckpt export");
  std::error_code ec;
  if (fs::exists(out) && !(fs::is_directory(out) && fs::is_empty(out, ec)))
    fail("ckpt export: {} exists and is not an empty directory; give a new directory", out);
  const LoadedModel m = load_model_dir(dir);
  // Written beside `out` and renamed into place, so a failed export leaves nothing half-done.
  fs::path target = fs::absolute(out).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/": the directory out
  const fs::path tmp = target.parent_path() / (".tmp-export-" + target.filename().string() + "." +
                                               std::to_string(::getpid()));
  fs::create_directories(target.parent_path());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    write_safetensors((tmp / "model.safetensors").string(),
                      named_tensors(param_layout(m.config), m.config, m.params.data()),
                      {{"format", "pt"}});
    write_file_atomic((tmp / "config.json").string(), hf_config(m.config).dump(2) + "\n");
    fsync_path(tmp.string());
    if (fs::exists(target)) fs::remove(target);  // the empty directory it replaces
    fs::rename(tmp, target);
    fsync_path(target.parent_path().string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return dir;
}

}  // namespace kiln
