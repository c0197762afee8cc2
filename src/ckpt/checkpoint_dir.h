// Checkpoint directories under a root: `<root>/step_00000100/`. A checkpoint is written into
// `<root>/.tmp-step_00000100/`, every file fsynced, then the directory is renamed into place, so a
// directory named step_* is always complete and a crash mid-write never damages an older one.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

std::string checkpoint_name(int64_t step);

// Calls write(tmp_dir) to fill a fresh temporary directory, then publishes it as step N.
// keep_last > 0 deletes all but the newest keep_last complete checkpoints afterwards.
// Returns the final directory.
std::string commit_checkpoint(const std::string& root, int64_t step,
                              const std::function<void(const std::string& dir)>& write,
                              int keep_last);

struct CheckpointRef {
  int64_t step;
  std::string dir;
};

// Complete checkpoints under root, oldest first (temporary directories are ignored).
std::vector<CheckpointRef> list_checkpoints(const std::string& root);
std::optional<CheckpointRef> latest_checkpoint(const std::string& root);

// Removes temporary directories a crashed writer left behind.
void remove_stale_checkpoint_temps(const std::string& root);

}  // namespace kiln
