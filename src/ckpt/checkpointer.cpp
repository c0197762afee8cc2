#include "ckpt/checkpointer.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "ckpt/checkpoint_dir.h"
#include "core/error.h"
#include "core/file.h"
#include "core/process.h"

namespace fs = std::filesystem;

namespace kiln {

Checkpointer::Checkpointer(Communicator& world, std::string root, int keep_last)
    : world_(world), root_(std::move(root)), keep_last_(keep_last) {}

void Checkpointer::agree(const std::string& error, const std::string& what,
                         const std::string& discard) {
  double failed = error.empty() ? 0.0 : 1.0;
  if (world_.size() > 1) failed = world_.all_reduce_scalar(failed);
  if (failed == 0) return;
  // Whichever rank failed, the one that made the temporary directory removes it.
  if (!discard.empty()) discard_checkpoint_temp(discard);
  if (!error.empty()) throw Error(error);
  fail("rank {}: another rank failed {} (its message says why)", world_.rank(), what);
}

// Rank 0's string on every rank (a file name: far below the 4 KiB carried).
std::string Checkpointer::from_rank0(const std::string& text) {
  if (world_.size() == 1) return text;
  std::vector<double> buf(512, 0.0);  // 4 KiB of bytes carried in doubles
  if (world_.rank() == 0) {
    KILN_CHECK(text.size() < buf.size() * sizeof(double));
    std::memcpy(buf.data(), text.data(), text.size());
  }
  world_.broadcast(buf.data(), static_cast<int64_t>(buf.size()), DType::F64, 0);
  return std::string(reinterpret_cast<const char*>(buf.data()));
}

std::string Checkpointer::save(int64_t step, const CheckpointContents& c) {
  const bool writer = world_.rank() == 0;
  std::string tmp, error;
  if (writer) {
    tmp = checkpoint_temp_dir(root_, step, host_name(), getpid());
    try {
      create_checkpoint_temp(tmp);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error, fmt::format("opening checkpoint step {}", step), writer ? tmp : "");
  // Its name only: a rank on another node may reach the run directory by another path.
  tmp = (fs::path(root_) / from_rank0(fs::path(tmp).filename().string())).string();

  // Each rank's own shard.
  if (c.writes_shard) {
    try {
      write_state_shard(tmp, c.shard_stem, c.shard_rank, c.shard_ranks, c.shard_tensors,
                        c.shard_begin, c.shard_end, c.shard_buffers, c.shard_metadata);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error, fmt::format("writing its part of checkpoint step {}", step), writer ? tmp : "");

  // The whole tensors, one at a time. After a write error rank 0 goes on through the hooks, so
  // that no peer is left alone in a gather.
  std::optional<SafeTensorsWriter> file;
  if (writer) {
    try {
      file.emplace((fs::path(tmp) / c.model_file).string(), c.model, c.model_metadata);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  for (size_t i = 0; i < c.model.size(); i++) {
    if (c.before_tensor) c.before_tensor(i);
    if (file && error.empty()) {
      try {
        file->write(c.model[i].data);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (c.after_tensor) c.after_tensor(i);
  }
  std::string dir;
  if (writer) {
    try {
      if (error.empty()) {
        file->finish();
        for (const auto& [name, text] : c.files)
          write_file_atomic((fs::path(tmp) / name).string(), text);
        dir = publish_checkpoint(root_, step, tmp, keep_last_);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Nobody goes on before the checkpoint is complete (or has failed everywhere).
  agree(error, fmt::format("publishing checkpoint step {}", step), writer ? tmp : "");
  return dir.empty() ? (fs::path(root_) / checkpoint_name(step)).string() : dir;
}

}  // namespace kiln
