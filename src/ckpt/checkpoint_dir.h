// Checkpoint directories under a root: `<root>/step_00000100/`. A checkpoint is written into
// `<root>/.tmp-step_00000100.<host>.<pid>/`, every file fsynced, then the directory is renamed
// into place, so a directory named step_* is always complete and a crash mid-write never damages
// an older one. Rewriting a step that exists swaps the two directories in one atomic rename
// (RENAME_EXCHANGE) where the filesystem has it; elsewhere the old copy is first moved to
// `.tmp-old-step_N`, which recover_checkpoint_dir puts back if a crash came between the renames.
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

// The same in parts, for a checkpoint that several processes write: the temporary directory of
// step N named for the writer that publishes it (its host and pid, as recover_checkpoint_dir
// reads them), created empty; the others write their files into it; publish_checkpoint fsyncs it
// and puts it in place (then prunes as above); discard_checkpoint_temp removes it after a failure.
std::string checkpoint_temp_dir(const std::string& root, int64_t step, const std::string& host,
                                int64_t pid);
void create_checkpoint_temp(const std::string& tmp);
std::string publish_checkpoint(const std::string& root, int64_t step, const std::string& tmp,
                               int keep_last);
void discard_checkpoint_temp(const std::string& tmp) noexcept;

struct CheckpointRef {
  int64_t step;
  std::string dir;
};

// Complete checkpoints under root, oldest first (temporary directories are ignored).
std::vector<CheckpointRef> list_checkpoints(const std::string& root);
std::optional<CheckpointRef> latest_checkpoint(const std::string& root);

// Called by the run directory's lock holder before it reads or writes checkpoints: puts back a
// complete old copy (`.tmp-old-step_N`) whose step_N is missing, and removes the temporary
// directories of writers that are gone. Holding the lock proves no other kiln run writes here;
// a temporary named after a process that is still alive on this host is kept all the same.
// Returns one line per action taken, for the log.
std::vector<std::string> recover_checkpoint_dir(const std::string& root);

}  // namespace kiln
