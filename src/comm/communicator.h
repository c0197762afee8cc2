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

#include "comm/shm_options.h"

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
  // The shared-memory engine's own knobs (comm/shm_options.h).
  ShmOptions shm = {};
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
  // True when alloc_shared gives memory the peers read in place (the shared-memory engine), so
  // that buffers reduced again and again are worth placing there.
  virtual bool shares_memory() const { return false; }

  // Memory this rank holds for transfers (the shared-memory engine: its share of the window).
  virtual int64_t buffer_bytes() const { return 0; }
  // Bytes this rank has written into shared memory for its peers so far (the engine's staging
  // and result slots: what docs/collectives.md counts as "sent"); 0 for the other backends.
  virtual int64_t bytes_sent() const { return 0; }

  // Ranks with the same color form a new communicator, ordered by key. Its name (in traces,
  // the flight recorder and watchdog messages) is this one's with "/<name>" appended, or
  // "/<color>" when no name is given.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;
  std::unique_ptr<Communicator> split(int color, int key) { return split(color, key, ""); }
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
