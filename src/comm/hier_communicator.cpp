// Across nodes: the hierarchical all-reduce, and how comm.backend = "auto" chooses a backend.
//
// With L ranks on each of N nodes, an all-reduce of n elements runs in three stages (the
// buffer cut into L even slices, local rank i owning slice i):
//   1. reduce-scatter inside the node (shared-memory engine): local rank i gets its node's sum
//      of slice i;
//   2. all-reduce of slice i over MPI among the N ranks with local index i (one per node), so
//      every link between nodes carries n/L elements per rank instead of n;
//   3. all-gather inside the node (shared-memory engine).
// The other collectives go to MPI over the whole group (they move a rank's own slice, which the
// hierarchy would not shorten). Point-to-point messages to a rank of the same node go through
// the node's engine (shm_p2p.h), others through MPI. Stages run on one thread per communicator,
// in issue order.
#include <mpi.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "comm/communicator.h"
#include "comm/completion_work.h"
#include "comm/mpi_internal.h"
#include "core/error.h"

namespace kiln::detail {
namespace {

// Runs jobs in issue order on one thread; after a failure the rest fail without running.
class OrderedRunner {
 public:
  OrderedRunner() : thread_([this] { loop(); }) {}
  ~OrderedRunner() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::shared_ptr<Work> issue(std::string name, std::function<void()> fn) {
    auto j = std::make_shared<Job>();
    j->name = std::move(name);
    j->fn = std::move(fn);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(j);
    }
    cv_.notify_all();
    return j;
  }

 private:
  struct Job : public CompletionWork {
    std::string name;
    std::function<void()> fn;
  };

  void loop() {
    while (true) {
      std::shared_ptr<Job> j;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        j = std::move(queue_.front());
        queue_.pop_front();
      }
      std::string err;
      if (!broken_.empty()) {
        err = fmt::format("{} not run: an earlier operation failed ({})", j->name, broken_);
      } else {
        try {
          j->fn();
        } catch (const Error& e) {
          err = broken_ = e.what();
        }
      }
      j->fn = nullptr;
      j->finish(std::move(err));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::string broken_;  // touched by the runner thread only
  std::thread thread_;
};

class HierCommunicator : public Communicator {
 public:
  HierCommunicator(std::unique_ptr<Communicator> world, std::unique_ptr<Communicator> local,
                   std::unique_ptr<Communicator> cross, const CommOptions& o)
      : world_(std::move(world)), local_(std::move(local)), cross_(std::move(cross)), opts_(o) {
    // Which ranks share this node, and their index in it: every rank's node (its node's first
    // rank) and local index, gathered over the world.
    const int R = world_->size(), me = world_->rank();
    double first = me;
    local_->broadcast(&first, 1, DType::F64, 0);
    std::vector<double> who(2 * R, 0.0);
    who[2 * me] = first;
    who[2 * me + 1] = local_->rank();
    world_->all_gather(who.data(), std::vector<int64_t>(R, 2), DType::F64);
    local_of_.assign(R, -1);
    for (int q = 0; q < R; q++)
      if (who[2 * q] == first) local_of_[q] = static_cast<int>(who[2 * q + 1]);
  }
  ~HierCommunicator() override { runner_.reset(); }  // finish the queue before the groups go

  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  std::string backend() const override { return "hier"; }
  // The node's window (stage 2's slice, n/L elements of the largest bucket, is not counted).
  int64_t buffer_bytes() const override { return local_->buffer_bytes(); }

  std::shared_ptr<Work> all_reduce_async(void* buf, int64_t n, DType t) override {
    KILN_CHECK(n >= 0);
    return runner_->issue(fmt::format("rank {}: all_reduce of {} elements", rank(), n),
                          [=, this] { hierarchical_all_reduce(buf, n, t); });
  }
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out,
                                             const std::vector<int64_t>& counts, DType t) override {
    return world_->reduce_scatter_async(in, out, counts, t);
  }
  std::shared_ptr<Work> all_gather_async(void* buf, const std::vector<int64_t>& counts,
                                         DType t) override {
    return world_->all_gather_async(buf, counts, t);
  }
  std::shared_ptr<Work> broadcast_async(void* buf, int64_t n, DType t, int root) override {
    return world_->broadcast_async(buf, n, t, root);
  }
  // A peer on this node through the node's shared-memory engine, any other through MPI (both
  // ends agree which: they know the same node layout).
  std::shared_ptr<Work> send_async(const void* buf, int64_t n, DType t, int peer,
                                   int tag) override {
    KILN_CHECK(peer >= 0 && peer < size());
    if (local_of_[peer] >= 0) return local_->send_async(buf, n, t, local_of_[peer], tag);
    return world_->send_async(buf, n, t, peer, tag);
  }
  std::shared_ptr<Work> recv_async(void* buf, int64_t n, DType t, int peer, int tag) override {
    KILN_CHECK(peer >= 0 && peer < size());
    if (local_of_[peer] >= 0) return local_->recv_async(buf, n, t, local_of_[peer], tag);
    return world_->recv_async(buf, n, t, peer, tag);
  }
  std::shared_ptr<Work> barrier_async() override { return world_->barrier_async(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    CommOptions o = opts_;
    o.backend = "auto";
    return make_node_communicator(world_->split(color, key, name), o);
  }

 private:
  void hierarchical_all_reduce(void* buf, int64_t n, DType t) {
    const int L = local_->size(), i = local_->rank();
    const int64_t es = static_cast<int64_t>(dtype_bytes(t));
    std::vector<int64_t> counts(L);
    int64_t offset = 0;
    for (int r = 0; r < L; r++) {
      counts[r] = n / L + (r < n % L ? 1 : 0);
      if (r < i) offset += counts[r];
    }
    slice_.resize(static_cast<size_t>(counts[i] * es));
    local_->reduce_scatter(buf, slice_.data(), counts, t);
    if (opts_.compress == "bf16" && t == DType::F32 && cross_->size() > 1)
      compressed_all_reduce(reinterpret_cast<float*>(slice_.data()), counts[i], buf, n);
    else
      cross_->all_reduce(slice_.data(), counts[i], t);
    std::memcpy(static_cast<char*>(buf) + offset * es, slice_.data(), slice_.size());
    local_->all_gather(buf, counts, t);
  }

  // Stage 2 in bf16 with error feedback: this rank sends bf16(x + e) and keeps
  // e = (x + e) - bf16(x + e) for the next all-reduce of the same buffer (identified by its
  // address and length, as gradient buckets are), so what rounding drops is sent later rather
  // than lost. The peers' bf16 values are summed in fp32 and rounded to bf16 by MPI.
  void compressed_all_reduce(float* x, int64_t m, const void* buf, int64_t n) {
    std::vector<float>& e = residual_[{buf, n}];
    if (static_cast<int64_t>(e.size()) != m) e.assign(static_cast<size_t>(m), 0.0f);
    half_.resize(static_cast<size_t>(m));
    for (int64_t j = 0; j < m; j++) {
      const float c = x[j] + e[j];
      half_[j] = float_to_bf16(c);
      e[j] = c - bf16_to_float(half_[j]);
    }
    cross_->all_reduce(half_.data(), m, DType::BF16);
    for (int64_t j = 0; j < m; j++) x[j] = bf16_to_float(half_[j]);
    compressed_elements_ += m;
  }

  std::unique_ptr<Communicator> world_;  // MPI over every rank
  std::unique_ptr<Communicator> local_;  // shared memory, the ranks of this node
  std::unique_ptr<Communicator> cross_;  // MPI, the ranks with this local index on every node
  CommOptions opts_;
  std::vector<int> local_of_;  // per world rank: its index on this node, or -1 on another node
  std::vector<char> slice_;    // stage 2's slice (runner thread only)
  std::vector<uint16_t> half_;
  std::map<std::pair<const void*, int64_t>, std::vector<float>> residual_;
  int64_t compressed_elements_ = 0;
  std::unique_ptr<OrderedRunner> runner_ = std::make_unique<OrderedRunner>();
};

// How the ranks of `mpi` sit on nodes: this rank's node group and local index, and whether
// every node has the same number of ranks.
struct NodeLayout {
  MPI_Comm node = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  int local_rank = 0, local_size = 1, min_local = 1, max_local = 1;
};

NodeLayout node_layout(Communicator& mpi) {
  NodeLayout l;
  run_on_mpi_thread(mpi, "finding the ranks of each node", [&](MPI_Comm comm) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    int rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &l.node);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Comm_set_errhandler(l.node, MPI_ERRORS_RETURN);
    MPI_Comm_rank(l.node, &l.local_rank);
    MPI_Comm_size(l.node, &l.local_size);
    rc = MPI_Allreduce(&l.local_size, &l.min_local, 1, MPI_INT, MPI_MIN, comm);
    if (rc == MPI_SUCCESS)
      rc = MPI_Allreduce(&l.local_size, &l.max_local, 1, MPI_INT, MPI_MAX, comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_split(comm, l.local_rank, rank, &l.cross);
    if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(l.cross, MPI_ERRORS_RETURN);
    return rc;
  });
  return l;
}

}  // namespace

std::unique_ptr<Communicator> make_node_communicator(std::unique_ptr<Communicator> mpi,
                                                     const CommOptions& o) {
  const std::string& b = o.backend;
  if (b != "shm" && b != "hier" && b != "auto")
    fail("comm.backend = \"{}\": expected \"auto\", \"mpi\", \"shm\" or \"hier\"", b);
  NodeLayout l = node_layout(*mpi);
  const bool one_node = l.local_size == mpi->size();
  const bool uniform = l.min_local == l.max_local;
  bool hier = b == "hier" || (b == "auto" && !one_node && uniform && l.local_size > 1);
  if (b == "shm" && !one_node)
    fail(
        "comm.backend = \"shm\" needs every rank on one node, but this job spans several; use "
        "\"auto\", \"hier\" or \"mpi\"");
  if (b == "hier" && !uniform)
    fail(
        "comm.backend = \"hier\" needs the same number of ranks on every node (this job has "
        "{} to {}); use \"auto\" or \"mpi\"",
        l.min_local, l.max_local);
  if (hier) {
    auto local = make_shm_communicator(make_mpi_communicator(l.node, o, true, "mpi-node"), o);
    auto cross = make_mpi_communicator(l.cross, o, true, "mpi-cross");
    return std::make_unique<HierCommunicator>(std::move(mpi), std::move(local), std::move(cross),
                                              o);
  }
  run_on_mpi_thread(*mpi, "freeing the node groups", [&](MPI_Comm) {
    MPI_Comm_free(&l.node);
    return MPI_Comm_free(&l.cross);
  });
  if (one_node) return make_shm_communicator(std::move(mpi), o);
  return mpi;  // "auto" with one rank per node, or nodes of different sizes: MPI throughout
}

}  // namespace kiln::detail
