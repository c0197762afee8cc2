// Writing a checkpoint as a job: every rank writes what it alone holds, no rank gathers the whole,
// and the checkpoint appears (one rename) only once every part is durable. What goes in is
// described by the caller, in logical terms:
//   - whole tensors that rank 0 streams into model.safetensors one at a time; around each one
//     every rank runs the caller's hooks (ZeRO-3 gathers the tensor there and drops it after);
//   - this rank's shard of sharded state (ckpt/sharded_state.h), when it holds one of its own;
//   - small text files rank 0 writes last, in order (the last marks the checkpoint complete).
// A failure on any rank ends the save on every rank with an error (the failing rank's own, the
// others naming what another rank could not do); the temporary directory is removed and the
// newest checkpoint stays the newest. Before the rename rank 0 writes manifest.json: every
// rank's files with their sizes and SHA-256 (ckpt/checkpoint_manifest.h), gathered in the
// collective that agrees that every part is durable.
//
// Two ways to save:
//   - save(): everything on the calling thread; returns once the checkpoint is published.
//   - save_async(): at the step boundary, on the training thread, the collective parts (the
//     temporary directory's name, ZeRO-3's gathers) run and each rank copies what it will write
//     into host memory; a writer thread per rank then writes and fsyncs its files while training
//     goes on. The writer runs no collective: publishing needs every rank's word, so it happens
//     on the training thread, in complete(), which the trainer calls at each step boundary
//     (publishing once every writer is done) and before the next save or the end of the run
//     (waiting for them). At most one save is in flight; until it is published the previous
//     checkpoint stays the newest complete one, and a crash leaves only a temporary directory.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ckpt/checkpoint_manifest.h"
#include "ckpt/safetensors.h"
#include "ckpt/sharded_state.h"
#include "comm/communicator.h"

namespace kiln {

struct CheckpointContents {
  std::string model_file = "model.safetensors";
  std::vector<SafeTensorOut> model;  // rank 0's views; their data is read between the hooks
  std::map<std::string, std::string> model_metadata;
  std::function<void(size_t tensor)> before_tensor, after_tensor;  // run on every rank

  // This rank's shards of sharded state, each written as file `rank` of `ranks` of the stem:
  // none, one, or one per range it owns (a pipeline rank holding several model chunks).
  struct Shard {
    int rank = 0, ranks = 1;
    int64_t begin = 0, end = 0;
    std::vector<StateBuffer> buffers;
  };
  std::vector<Shard> shards;
  std::string shard_stem = "optimizer";
  std::vector<FlatTensor> shard_tensors;
  std::map<std::string, std::string> shard_metadata;

  std::vector<std::pair<std::string, std::string>> files;  // name, text; rank 0, in order
};

class Checkpointer {
 public:
  Checkpointer(Communicator& world, std::string root, int keep_last);
  // A save still in flight is abandoned: its writer is joined and its temporary directory
  // removed (it was never published).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective: every rank of `world` calls it for the same step. Completes a pending save
  // first. Returns the published directory.
  std::string save(int64_t step, const CheckpointContents& c);

  // Collective, on the training thread: completes a pending save (waiting for it), opens this
  // one, copies this rank's part into host memory (running the hooks, which may gather), and
  // starts the writer thread. `c`'s buffers may change as soon as it returns.
  void save_async(int64_t step, const CheckpointContents& c);
  bool pending() const { return pending_ != nullptr; }
  int64_t pending_step() const;
  // Collective over the ranks with a pending save (all of them: saves start at the same step).
  // wait = false: publishes if every rank's writer has finished, else returns "" at once (one
  // scalar all-reduce); wait = true: waits for the writers, then publishes. Returns the
  // published directory; "" when nothing was published. A failed write throws on every rank,
  // as save() does.
  std::string complete(bool wait);
  // Bytes of host memory the last save_async's copy held on this rank.
  int64_t snapshot_bytes() const { return snapshot_bytes_; }
  // Seconds the last published async save spent in its writer thread (this rank's).
  double last_write_seconds() const { return last_write_seconds_; }

 private:
  struct Pending;
  // Rank 0 makes the temporary directory; every rank learns its path.
  std::string open(int64_t step);
  // Every rank's part is durable (or one failed): agree, gather the manifest, and rank 0 writes
  // it and publishes.
  std::string finish(int64_t step, const std::string& tmp, const std::string& error,
                     const std::vector<ManifestEntry>& mine);
  std::vector<ManifestEntry> gather_entries(const std::vector<ManifestEntry>& mine);

  // Every rank learns whether any failed; then `discard` (rank 0's temporary directory) is
  // removed, the failing ranks throw their own error and the others one naming `what` failed.
  void agree(const std::string& error, const std::string& what, const std::string& discard);
  std::string from_rank0(const std::string& text);
  Communicator& world_;
  std::string root_;
  int keep_last_;
  std::unique_ptr<Pending> pending_;
  int64_t snapshot_bytes_ = 0;
  double last_write_seconds_ = 0;
};

}  // namespace kiln
