// The intra-node engine as a Communicator: the ranks of one node share one MPI-3 shared window
// and move data with plain loads and stores (docs/collectives.md). The parts:
//   shm_engine.{h,cpp}     the window, the step discipline and the waiting policy
//   shm_algorithm.h        the interface every algorithm implements
//   shm_algo_<name>.cpp    one algorithm each (one_shot, direct, ring, halving_doubling, shared,
//                          lines, staged, cma)
//   shm_tuner.{h,cpp}      which algorithm runs an operation; the table of algorithms
//   shm_kernels.h          the reduction kernels (fixed summation orders: the same bits each run)
//   shm_shared.h           the registry of alloc_shared memory
//   shm_p2p.{h,cpp}        point-to-point messages (one copy, by the receiver)
// This file: the queue and the engine thread, and alloc_shared.
//
// Operations run in issue order on one engine thread; a caller that waits for an operation that
// has not started yet (and is next in line) runs it itself, which saves the hand-over for the
// synchronous calls.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_internal.h"
#include "comm/op_desc.h"
#include "comm/shm_engine.h"
#include "comm/shm_p2p.h"
#include "comm/shm_shared.h"
#include "comm/shm_tuner.h"
#include "core/error.h"

namespace kiln::detail {
namespace {

using namespace shm;

class ShmCommunicator;

struct ShmWork : public Work {
  ShmCommunicator* owner = nullptr;
  OpDesc desc;
  std::function<void()> body;
  enum { kQueued, kRunning, kFinished } state = kQueued;
  std::string error;
  void wait() override;
  bool test() override;
};

class ShmCommunicator : public Communicator {
 public:
  // The tuner first: an unknown algorithm fails before the window is allocated.
  ShmCommunicator(std::unique_ptr<Communicator> mpi, const CommOptions& o)
      : mpi_(std::move(mpi)),
        opts_(o),
        rank_(mpi_->rank()),
        size_(mpi_->size()),
        tuner_(o.algorithm),
        engine_(std::make_unique<ShmEngine>(*mpi_, o)) {
    if (engine_->peers_readable() && o.shm.p2p) p2p_ = std::make_unique<ShmP2p>(*engine_);
    thread_ = std::thread([this] { loop(); });
  }

  // The thread stops first; then the engine frees the window (shm_engine.cpp), before mpi_.
  ~ShmCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "shm"; }
  int64_t buffer_bytes() const override { return engine_->window_bytes() / size_; }
  int64_t bytes_sent() const override { return engine_->bytes_sent(); }

  std::shared_ptr<Work> all_reduce_async(void* buf, int64_t n, DType t) override {
    KILN_CHECK(n >= 0);
    // Whether shared buffers may be in play is decided when the operation is issued, in issue
    // order like alloc_shared itself, so every rank decides alike.
    const bool shared = shared_allocs_.load(std::memory_order_relaxed) > 0;
    return issue({"all_reduce", n}, [=, this] { do_all_reduce(buf, n, t, shared); });
  }
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out,
                                             const std::vector<int64_t>& counts, DType t) override {
    KILN_CHECK(static_cast<int>(counts.size()) == size_);
    const bool shared = shared_allocs_.load(std::memory_order_relaxed) > 0;
    return issue({"reduce_scatter", counts[rank_]},
                 [=, this] { do_reduce_scatter(in, out, counts, t, shared); });
  }
  std::shared_ptr<Work> all_gather_async(void* buf, const std::vector<int64_t>& counts,
                                         DType t) override {
    KILN_CHECK(static_cast<int>(counts.size()) == size_);
    return issue({"all_gather", ShmEngine::total(counts)},
                 [=, this] { do_all_gather(buf, counts, t); });
  }
  std::shared_ptr<Work> broadcast_async(void* buf, int64_t n, DType t, int root) override {
    KILN_CHECK(root >= 0 && root < size_ && n >= 0);
    return issue({"broadcast", n, "from rank", root}, [=, this] { do_broadcast(buf, n, t, root); });
  }
  // The synchronous forms run on the calling thread when nothing is queued before them.
  void all_reduce(void* buf, int64_t n, DType t) override {
    KILN_CHECK(n >= 0);
    const bool shared = shared_allocs_.load(std::memory_order_relaxed) > 0;
    run_now({"all_reduce", n}, [&] { do_all_reduce(buf, n, t, shared); });
  }
  void reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts,
                      DType t) override {
    KILN_CHECK(static_cast<int>(counts.size()) == size_);
    const bool shared = shared_allocs_.load(std::memory_order_relaxed) > 0;
    run_now({"reduce_scatter", counts[rank_]},
            [&] { do_reduce_scatter(in, out, counts, t, shared); });
  }
  void all_gather(void* buf, const std::vector<int64_t>& counts, DType t) override {
    KILN_CHECK(static_cast<int>(counts.size()) == size_);
    run_now({"all_gather", ShmEngine::total(counts)}, [&] { do_all_gather(buf, counts, t); });
  }
  void broadcast(void* buf, int64_t n, DType t, int root) override {
    KILN_CHECK(root >= 0 && root < size_ && n >= 0);
    run_now({"broadcast", n, "from rank", root}, [&] { do_broadcast(buf, n, t, root); });
  }
  void barrier() override {
    run_now({"barrier", -1}, [&] { engine_->barrier(); });
  }
  // Point-to-point messages: through the window, one copy by the receiver (shm_p2p.h), never
  // behind a collective of this engine; through MPI when the ranks cannot read each other's
  // memory or shm.p2p is off.
  std::shared_ptr<Work> send_async(const void* buf, int64_t n, DType t, int peer,
                                   int tag) override {
    if (!p2p_) return mpi_->send_async(buf, n, t, peer, tag);
    return p2p_->send(buf, n * static_cast<int64_t>(dtype_bytes(t)), n, peer, tag);
  }
  std::shared_ptr<Work> recv_async(void* buf, int64_t n, DType t, int peer, int tag) override {
    if (!p2p_) return mpi_->recv_async(buf, n, t, peer, tag);
    return p2p_->recv(buf, n * static_cast<int64_t>(dtype_bytes(t)), n, peer, tag);
  }
  std::shared_ptr<Work> barrier_async() override {
    return issue({"barrier", -1}, [this] { engine_->barrier(); });
  }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return std::make_unique<ShmCommunicator>(mpi_->split(color, key, name), opts_);
  }

  // A memfd of this rank, mapped by every peer through /proc/<pid>/fd (which needs the same
  // right as process_vm_readv). If any rank cannot map every other's, each keeps its own memory
  // as ordinary memory and all-reduces of it are staged.
  bool shares_memory() const override { return true; }
  std::unique_ptr<SharedMemory> alloc_shared(int64_t bytes) override {
    KILN_CHECK(bytes >= 0);
    SharedRegistry& reg = SharedRegistry::instance();
    const int64_t mapped = ShmEngine::align_page(std::max<int64_t>(bytes, 1));
    // A rank that cannot make its memfd still takes part, with region id 0, and then every rank
    // keeps ordinary memory.
    int fd = memfd_create("kiln-shared", MFD_CLOEXEC);
    void* base = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, mapped) == 0)
      base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    std::unique_ptr<MappedShared> mem;
    uint32_t id = 0;
    if (base != MAP_FAILED) {
      mem = std::make_unique<MappedShared>(static_cast<char*>(base), bytes, mapped);
      id = reg.add_own(static_cast<char*>(base), mapped);
    }
    // Every rank's (pid, fd, region id, mapped bytes, the memfd's inode), exactly representable
    // as doubles (inode numbers of memfds are small).
    struct stat st {};
    if (mem && fstat(fd, &st) != 0) st.st_ino = 0;
    std::vector<double> who(5 * size_, 0.0);
    who[5 * rank_] = getpid();
    who[5 * rank_ + 1] = fd;
    who[5 * rank_ + 2] = id;
    who[5 * rank_ + 3] = static_cast<double>(mapped);
    who[5 * rank_ + 4] = static_cast<double>(st.st_ino);
    mpi_->all_gather(who.data(), std::vector<int64_t>(size_, 5), DType::F64);
    double ok = mem ? 1 : 0;
    for (int q = 0; q < size_ && ok == 1; q++) {
      if (q == rank_) continue;
      const auto pid = static_cast<pid_t>(who[5 * q]);
      const auto peer_id = static_cast<uint32_t>(who[5 * q + 2]);
      const auto peer_bytes = static_cast<int64_t>(who[5 * q + 3]);
      if (peer_id == 0) {
        ok = 0;
        break;
      }
      const std::string path = fmt::format("/proc/{}/fd/{}", pid, static_cast<int>(who[5 * q + 1]));
      const int pfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      // The file must be the peer's memfd (not another process's file behind a reused pid or in
      // another pid namespace), and as long as the peer said.
      struct stat ps {};
      const bool same = pfd >= 0 && fstat(pfd, &ps) == 0 && ps.st_ino != 0 &&
                        static_cast<double>(ps.st_ino) == who[5 * q + 4] &&
                        ps.st_size >= peer_bytes;
      void* p = same ? mmap(nullptr, peer_bytes, PROT_READ, MAP_SHARED, pfd, 0) : MAP_FAILED;
      if (pfd >= 0) close(pfd);
      if (p == MAP_FAILED) {
        ok = 0;
        break;
      }
      mem->peers_.push_back({static_cast<const char*>(p), peer_bytes});
      reg.add_peer(pid, peer_id, static_cast<const char*>(p), peer_bytes);
    }
    ok = mpi_->all_reduce_scalar(ok) == size_ ? 1 : 0;  // also: every peer has opened the fd
    if (fd >= 0) close(fd);
    if (!mem) return Communicator::alloc_shared(bytes);
    if (ok != 1) {  // ordinary memory on every rank
      for (auto& [p, b] : mem->peers_) {
        reg.remove(p);
        munmap(const_cast<char*>(p), b);
      }
      mem->peers_.clear();
      reg.remove(static_cast<char*>(base));
    } else {
      shared_allocs_++;
    }
    return mem;
  }

  // ---- used by ShmWork
  void wait_for(ShmWork* w) {
    std::unique_lock<std::mutex> lock(mu_);
    while (w->state != ShmWork::kFinished) {
      if (w->state == ShmWork::kQueued && !running_ && !queue_.empty() &&
          queue_.front().get() == w) {
        queue_.pop_front();
        run_locked(w, lock);
        continue;
      }
      cv_.wait(lock);
    }
  }
  bool finished(ShmWork* w) {
    std::lock_guard<std::mutex> lock(mu_);
    return w->state == ShmWork::kFinished;
  }

 private:
  std::shared_ptr<Work> issue(OpDesc desc, std::function<void()> body) {
    auto w = std::make_shared<ShmWork>();
    w->owner = this;
    w->desc = desc;
    w->body = std::move(body);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(w);
    }
    cv_.notify_all();
    return w;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !running_); });
      if (queue_.empty() || running_) {
        if (stop_) return;
        continue;
      }
      // Leave a synchronous caller, about to wait, the time to run the operation itself.
      cv_.wait_for(lock, std::chrono::microseconds(50),
                   [&] { return stop_ || queue_.empty() || running_; });
      if (queue_.empty() || running_) continue;
      auto w = queue_.front();
      queue_.pop_front();
      run_locked(w.get(), lock);
    }
  }

  // Runs w with the lock released; ops run one at a time, in issue order.
  void run_locked(ShmWork* w, std::unique_lock<std::mutex>& lock) {
    running_ = true;
    w->state = ShmWork::kRunning;
    lock.unlock();
    std::string err = execute(w->desc, w->body);
    w->body = nullptr;
    lock.lock();
    w->error = std::move(err);
    w->state = ShmWork::kFinished;
    running_ = false;
    cv_.notify_all();
  }

  // A synchronous operation: on this thread if nothing is queued or running, else in line.
  template <class F>
  void run_now(OpDesc desc, F&& body) {
    std::unique_lock<std::mutex> lock(mu_);
    if (running_ || !queue_.empty()) {
      lock.unlock();
      issue(desc, std::function<void()>(std::forward<F>(body)))->wait();
      return;
    }
    running_ = true;
    lock.unlock();
    std::string err = execute(desc, body);
    lock.lock();
    running_ = false;
    if (!queue_.empty()) cv_.notify_all();  // issued meanwhile by another thread
    lock.unlock();
    if (!err.empty()) throw Error(err);
  }

  // Runs one operation (the caller holds the running_ flag); returns its error, if any.
  template <class F>
  std::string execute(const OpDesc& desc, F& body) {
    if (!broken_ && p2p_ && p2p_->broken()) {
      broken_ = true;
      broken_reason_ = p2p_->broken_reason();
    }
    if (broken_)
      return fmt::format("rank {}: {} not run: an earlier operation failed ({})", rank_,
                         desc.text(), broken_reason_);
    engine_->set_current(&desc);
    std::string err;
    try {
      body();
    } catch (const Error& e) {
      broken_ = true;
      broken_reason_ = e.what();
      err = e.what();
      if (p2p_) p2p_->mark_broken(err);
    }
    engine_->set_current(nullptr);
    return err;
  }

  // ---- the operations, handed to the tuner (shm_tuner.cpp)

  // shared: alloc_shared had succeeded on this communicator when the operation was issued.
  void do_all_reduce(void* buf, int64_t n, DType t, bool shared) {
    tuner_.run(*engine_, {Coll::kAllReduce, buf, buf, n, nullptr, t, -1, shared});
  }
  void do_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, DType t,
                         bool shared) {
    tuner_.run(*engine_,
               {Coll::kReduceScatter, in, out, ShmEngine::total(counts), &counts, t, -1, shared});
  }
  void do_all_gather(void* buf, const std::vector<int64_t>& counts, DType t) {
    tuner_.run(*engine_,
               {Coll::kAllGather, buf, buf, ShmEngine::total(counts), &counts, t, -1, false});
  }
  void do_broadcast(void* buf, int64_t n, DType t, int root) {
    tuner_.run(*engine_, {Coll::kBroadcast, buf, buf, n, nullptr, t, root, false});
  }

  std::unique_ptr<Communicator> mpi_;  // set-up, point-to-point, split
  CommOptions opts_;
  int rank_, size_;
  ShmTuner tuner_;                     // touched only by the running operation
  std::unique_ptr<ShmEngine> engine_;  // after mpi_: destroyed (the window freed) before it
  std::unique_ptr<ShmP2p> p2p_;        // after engine_: destroyed before it
  // Successful alloc_shared calls so far: collective and agreed, so the same on every rank.
  std::atomic<int> shared_allocs_{0};

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ShmWork>> queue_;
  bool running_ = false;
  bool stop_ = false;
  // Touched only by the running operation (one at a time, ordered by mu_).
  bool broken_ = false;
  std::string broken_reason_;
};

void ShmWork::wait() {
  owner->wait_for(this);
  if (!error.empty()) throw Error(error);
}

bool ShmWork::test() {
  return owner->finished(this);
}

}  // namespace

std::unique_ptr<Communicator> make_shm_communicator(std::unique_ptr<Communicator> mpi,
                                                    const CommOptions& o) {
  return std::make_unique<ShmCommunicator>(std::move(mpi), o);
}

}  // namespace kiln::detail

namespace kiln {

namespace {

// comm.algorithm's values: "auto" and the algorithms of the table it may name.
struct Named {
  const char* name;
  bool configured;
};
constexpr Named kNamed[] = {
#define SHM_ALGORITHM(name, colls, configured) {#name, configured},
#include "comm/shm_algorithms.inc"
#undef SHM_ALGORITHM
};

// "\"auto\", \"one_shot\", ... or \"halving_doubling\"".
const std::string& choices_text() {
  static const std::string text = [] {
    std::vector<std::string> names{"auto"};
    for (const Named& x : kNamed)
      if (x.configured) names.push_back(x.name);
    std::string s;
    for (size_t i = 0; i < names.size(); i++)
      s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + ("\"" + names[i] + "\"");
    return s;
  }();
  return text;
}

}  // namespace

const char* const kShmAlgorithmChoices = choices_text().c_str();

bool is_shm_algorithm(const std::string& name) {
  if (name == "auto") return true;
  for (const Named& x : kNamed)
    if (x.configured && name == x.name) return true;
  return false;
}

namespace {
class PlainMemory : public SharedMemory {
 public:
  explicit PlainMemory(int64_t bytes) {
    const size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
    data_ = std::aligned_alloc(64, rounded);
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, rounded);
    bytes_ = bytes;
  }
  ~PlainMemory() override { std::free(data_); }
};
}  // namespace

std::unique_ptr<SharedMemory> Communicator::alloc_shared(int64_t bytes) {
  KILN_CHECK(bytes >= 0);
  return std::make_unique<PlainMemory>(bytes);
}

}  // namespace kiln
