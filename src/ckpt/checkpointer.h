// Writing a checkpoint as a job: every rank writes what it alone holds, no rank gathers the whole,
// and the checkpoint appears (one rename) only once every part is durable. What goes in is
// described by the caller, in logical terms:
//   - whole tensors that rank 0 streams into model.safetensors one at a time; around each one
//     every rank runs the caller's hooks (ZeRO-3 gathers the tensor there and drops it after);
//   - this rank's shard of sharded state (ckpt/sharded_state.h), when it holds one of its own;
//   - small text files rank 0 writes last, in order (the last marks the checkpoint complete).
// A failure on any rank ends the save on every rank with an error (the failing rank's own, the
// others naming what another rank could not do); the temporary directory is removed and the
// newest checkpoint stays the newest.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/safetensors.h"
#include "ckpt/sharded_state.h"
#include "comm/communicator.h"

namespace kiln {

struct CheckpointContents {
  std::string model_file = "model.safetensors";
  std::vector<SafeTensorOut> model;  // rank 0's views; their data is read between the hooks
  std::map<std::string, std::string> model_metadata;
  std::function<void(size_t tensor)> before_tensor, after_tensor;  // run on every rank

  bool writes_shard = false;  // this rank holds a shard of its own
  std::string shard_stem = "optimizer";
  int shard_rank = 0, shard_ranks = 1;
  std::vector<FlatTensor> shard_tensors;
  int64_t shard_begin = 0, shard_end = 0;
  std::vector<StateBuffer> shard_buffers;
  std::map<std::string, std::string> shard_metadata;

  std::vector<std::pair<std::string, std::string>> files;  // name, text; rank 0, in order
};

class Checkpointer {
 public:
  Checkpointer(Communicator& world, std::string root, int keep_last);
  // Collective: every rank of `world` calls it for the same step. Returns the published
  // directory.
  std::string save(int64_t step, const CheckpointContents& c);

 private:
  // Every rank learns whether any failed; then `discard` (rank 0's temporary directory) is
  // removed, the failing ranks throw their own error and the others one naming `what` failed.
  void agree(const std::string& error, const std::string& what, const std::string& discard);
  std::string from_rank0(const std::string& text);
  Communicator& world_;
  std::string root_;
  int keep_last_;
};

}  // namespace kiln
