// The shared-memory engine's tuning (docs/collectives.md), kept apart from the Communicator
// interface: only the engine and its benchmark read these.
#pragma once
#include <cstdint>

namespace kiln {

struct ShmOptions {
  // Shared-memory engine tuning (docs/collectives.md): bytes a rank stages per pipeline step,
  // steps in flight; the tuner's thresholds (algorithm "auto", measured with `kiln bench comm
  // --algorithm all`): one-shot all-reduce up to one_shot_bytes, ring from
  // ring_bytes (all-reduce; below ring_oversubscribed_below with more ranks than cores)
  // and ring_scatter_bytes (reduce-scatter) with 2 to ring_max_ranks ranks, direct
  // otherwise.
  int64_t chunk_bytes = 256 << 10;
  int slots = 4;
  int64_t one_shot_bytes = 4 << 10;
  int64_t ring_bytes = 512 << 10;
  int64_t ring_scatter_bytes = 32 << 10;
  int ring_max_ranks = 4;
  int64_t ring_oversubscribed_below = 4 << 20;  // more ranks than cores: ring below this only
  // Collectives up to this many bytes (a reduce-scatter's input, an all-gather's largest slice)
  // travel in the ranks' 64-byte lines rather than the staging slots (at most 448). With more
  // ranks than cores broadcasts use the lines up to 448 bytes, so a root can run up to 32 of
  // them ahead of peers that are not running.
  int64_t inline_bytes = 128;
  // All-reduces ("auto") of at least shared_bytes and below shared_below whose buffers
  // lie in alloc_shared memory on every rank read the peers' buffers in place instead of staging
  // them (from 256 MiB the ring was twice as fast in every run here; cause not found).
  int64_t shared_bytes = 2 << 20;
  int64_t shared_below = 256 << 20;
  // All-gathers and broadcasts from this size on copy straight from the peers' buffers
  // (process_vm_readv, one copy instead of two) when the kernel allows it; 0: never.
  int64_t direct_bytes = 1 << 20;
  // ... and from this size on when the node has no more ranks than cores (a peer then runs
  // while it is read).
  int64_t direct_cores_bytes = 32 << 10;
  // Broadcasts read the root's buffer directly from this size on, however many ranks: the staged
  // broadcast's speed varied 5-fold from run to run at 16-512 KiB (docs/performance.md).
  int64_t direct_broadcast_bytes = 16 << 10;
  // Point-to-point messages through the window, copied once by the receiver (shm_p2p.h);
  // false: through MPI's own shared-memory transport.
  bool p2p = true;
};

}  // namespace kiln
