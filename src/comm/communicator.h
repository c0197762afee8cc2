// Communication between the processes of a job. Every collective is asynchronous (a Work handle
// to wait on) with a synchronous shorthand; every wait has a timeout, after which it throws an
// error naming the operation and the rank (a peer that died or hangs must not hang the job).
//
// The MPI backend runs every operation on one communication thread, in the order they were
// issued, so reductions progress while the caller computes. A process started without a
// launcher gets a one-rank communicator and never touches MPI.
//
// Error policy (gloo's split): a timeout or a transport failure is an Error thrown from wait();
// the job cannot continue, and the launcher restarts it from a checkpoint. Misuse (sizes that do
// not add up) is an internal error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

enum class DType { F32, BF16, F64 };  // BF16 is stored as uint16 and summed in fp32

size_t dtype_bytes(DType t);

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // rethrows the operation's error (timeout, transport)
  virtual bool test() = 0;  // finished (or failed), without waiting
};

struct CommOptions {
  double timeout_seconds = 600;
  // "mpi": MPI for everything. "shm": the shared-memory engine (all ranks on one node).
  // "hier": all-reduce in shared memory inside each node and over MPI across nodes (the same
  // number of ranks on every node). "auto": shm on one node, hier across nodes of equal rank
  // counts (more than one each), MPI otherwise. See docs/collectives.md.
  std::string backend = "mpi";
  // Shared-memory engine tuning (docs/collectives.md): bytes a rank stages per pipeline step,
  // steps in flight; the tuner's thresholds (algorithm "auto", measured with `kiln bench comm
  // --algorithm all`): one-shot all-reduce up to shm_one_shot_bytes, ring from
  // shm_ring_bytes (all-reduce; below shm_ring_oversubscribed_below with more ranks than cores)
  // and shm_ring_scatter_bytes (reduce-scatter) with 2 to shm_ring_max_ranks ranks, direct
  // otherwise.
  int64_t shm_chunk_bytes = 256 << 10;
  int shm_slots = 4;
  int64_t shm_one_shot_bytes = 4 << 10;
  int64_t shm_ring_bytes = 512 << 10;
  int64_t shm_ring_scatter_bytes = 32 << 10;
  int shm_ring_max_ranks = 4;
  int64_t shm_ring_oversubscribed_below = 4 << 20;  // more ranks than cores: ring below this only
  // Collectives up to this many bytes (a reduce-scatter's input, an all-gather's largest slice)
  // travel in the ranks' 64-byte lines rather than the staging slots (at most 448). With more
  // ranks than cores broadcasts use the lines up to 448 bytes, so a root can run up to 32 of
  // them ahead of peers that are not running.
  int64_t shm_inline_bytes = 128;
  // All-reduces ("auto") of at least shm_shared_bytes and below shm_shared_below whose buffers
  // lie in alloc_shared memory on every rank read the peers' buffers in place instead of staging
  // them (from 256 MiB the ring was twice as fast in every run here; cause not found).
  int64_t shm_shared_bytes = 2 << 20;
  int64_t shm_shared_below = 256 << 20;
  // All-gathers and broadcasts from this size on copy straight from the peers' buffers
  // (process_vm_readv, one copy instead of two) when the kernel allows it; 0: never.
  int64_t shm_direct_bytes = 1 << 20;
  // ... and from this size on when the node has no more ranks than cores (a peer then runs
  // while it is read).
  int64_t shm_direct_cores_bytes = 32 << 10;
  // Broadcasts read the root's buffer directly from this size on, however many ranks: the staged
  // broadcast's speed varied 5-fold from run to run at 16-512 KiB (docs/performance.md).
  int64_t shm_direct_broadcast_bytes = 16 << 10;
  // The engine's all-reduce and reduce-scatter algorithm (docs/collectives.md): "auto" (chosen
  // by size and rank count), "one_shot", "direct", "ring" or "halving_doubling".
  std::string algorithm = "auto";
  // "bf16": the inter-node stage of "hier" sends fp32 all-reduces as bf16, with the rounding
  // error fed back locally into the next reduction of the same buffer. "none": as they are.
  std::string compress = "none";
};

// Memory from Communicator::alloc_shared: 64-byte aligned, zeroed, owned, freed when destroyed;
// destroy it only once every collective on it has finished (as any buffer).
class SharedMemory {
 public:
  virtual ~SharedMemory() = default;
  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  // True when data() starts a page-aligned shared mapping whose whole pages can be handed back
  // with madvise(MADV_REMOVE) (they read as zero after); false for ordinary memory.
  bool removable() const { return removable_; }

 protected:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  bool removable_ = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // Sum over ranks, in place (n elements).
  virtual std::shared_ptr<Work> all_reduce_async(void* buf, int64_t n, DType t) = 0;
  // `in` holds sum(counts) elements; rank r receives the sum over ranks of its counts[r]-long
  // slice (slices in rank order) into `out`.
  virtual std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out,
                                                     const std::vector<int64_t>& counts,
                                                     DType t) = 0;
  // In place: `buf` holds sum(counts) elements; rank r's slice (at the offset of counts[0..r))
  // is sent to every rank.
  virtual std::shared_ptr<Work> all_gather_async(void* buf, const std::vector<int64_t>& counts,
                                                 DType t) = 0;
  virtual std::shared_ptr<Work> broadcast_async(void* buf, int64_t n, DType t, int root) = 0;
  virtual std::shared_ptr<Work> send_async(const void* buf, int64_t n, DType t, int peer,
                                           int tag) = 0;
  virtual std::shared_ptr<Work> recv_async(void* buf, int64_t n, DType t, int peer, int tag) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;

  // The synchronous forms (a backend may run them on the calling thread when nothing is queued).
  virtual void all_reduce(void* buf, int64_t n, DType t) { all_reduce_async(buf, n, t)->wait(); }
  virtual void reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts,
                              DType t) {
    reduce_scatter_async(in, out, counts, t)->wait();
  }
  virtual void all_gather(void* buf, const std::vector<int64_t>& counts, DType t) {
    all_gather_async(buf, counts, t)->wait();
  }
  virtual void broadcast(void* buf, int64_t n, DType t, int root) {
    broadcast_async(buf, n, t, root)->wait();
  }
  void send(const void* buf, int64_t n, DType t, int peer, int tag) {
    send_async(buf, n, t, peer, tag)->wait();
  }
  void recv(void* buf, int64_t n, DType t, int peer, int tag) {
    recv_async(buf, n, t, peer, tag)->wait();
  }
  virtual void barrier() { barrier_async()->wait(); }
  double all_reduce_scalar(double v) {
    all_reduce(&v, 1, DType::F64);
    return v;
  }

  // Memory for buffers that collectives use again and again (gradient buckets). The shared-
  // memory engine maps it into every rank of the node, so that an all-reduce of a buffer inside
  // it reads the peers' buffers where they lie, with no staging copies (docs/collectives.md,
  // "Shared buffers"); the other backends return ordinary memory. Collective: every rank calls
  // it, in the same order, with the same size.
  virtual std::unique_ptr<SharedMemory> alloc_shared(int64_t bytes);

  // Memory this rank holds for transfers (the shared-memory engine: its share of the window).
  virtual int64_t buffer_bytes() const { return 0; }
  // Bytes this rank has written into shared memory for its peers so far (the engine's staging
  // and result slots: what docs/collectives.md counts as "sent"); 0 for the other backends.
  virtual int64_t bytes_sent() const { return 0; }

  // Ranks with the same color form a new communicator, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// The values of CommOptions::algorithm, and the words an error message lists them with.
bool is_shm_algorithm(const std::string& name);
extern const char* const kShmAlgorithmChoices;  // "\"auto\", \"one_shot\", ... or ..."

// The communicator of all processes of the job: MPI when launched by mpirun or srun, otherwise
// a single rank.
std::unique_ptr<Communicator> make_world_communicator(const CommOptions& o = {});
std::unique_ptr<Communicator> make_self_communicator();

// bf16 <-> fp32 (round to nearest even), used by the bf16 reductions.
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);

}  // namespace kiln
