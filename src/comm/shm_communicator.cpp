// The intra-node engine: the ranks of one node share one MPI-3 shared window and move data with
// plain loads and stores, synchronised by counters in that window. See docs/collectives.md for
// the algorithms, the bytes each moves and why the results are bitwise reproducible.
//
// Window layout (rank 0 allocates it all, the others map it; every piece on its own cache lines):
//   control[r]:   counters per rank: posted, reduced, done (the last step it reached), closing,
//                 and the address and process of a buffer peers read directly
//   lines[r][i]:  rank r's small-message line sets (32; 8 lines of tag + 56 bytes each)
//   staging[r][s]: rank r's staging slot s (chunk_bytes each, `slots` of them)
//   result[s]:    the reduced chunk of step s, each owner writing its part (direct all-reduce)
//
// All-reduce and reduce-scatter have four algorithms (one-shot, direct, ring, halving-doubling),
// chosen by comm.algorithm or by size and rank count (choose()); each sums in a fixed order.
//
// Every operation is a sequence of steps numbered identically on every rank (step_). A step uses
// slot step % slots (a small step: line set step % 32); before writing into it a rank waits
// until every rank is done with the step that used it last, so up to `slots` steps pipeline.
// Counters are stored with release and read with acquire, which orders the data written before a
// store with the reads after the load.
//
// Operations run in issue order on one engine thread; a caller that waits for an operation that
// has not started yet (and is next in line) runs it itself, which saves the hand-over for the
// synchronous calls. Waiting for peers spins briefly, then yields, then sleeps.
#include <fcntl.h>
#include <immintrin.h>
#include <mpi.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_internal.h"
#include "comm/op_desc.h"
#include "comm/shm_kernels.h"
#include "comm/shm_shared.h"
#include "core/clock.h"
#include "core/error.h"

namespace kiln::detail {
namespace {

using namespace shm;  // the reduction kernels and the shared-buffer registry

constexpr int64_t kLine = 128;  // two cache lines: adjacent-line prefetch does not false-share

struct alignas(kLine) Counter {
  std::atomic<uint64_t> value;
  char pad[kLine - sizeof(std::atomic<uint64_t>)];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters must work across processes");

// Small messages travel with their flag: a line holds a step tag and 56 bytes of data, so a
// peer that sees the tag has the data in the same cache-line transfer (NCCL's "LL" protocol).
// Rank 0 zeroes the window's lines (MPI_Win_allocate_shared memory is zero-filled by the OS).
struct alignas(64) Line {
  std::atomic<uint64_t> tag;
  char data[56];
};
constexpr int kInlineLines = 8;
// Small steps have their own ring of line sets, longer than the slots': a broadcast root can run
// this many small operations ahead of its peers (with more ranks than cores, it fills a time
// slice instead of handing the core over after each).
constexpr int kInlineSlots = 32;
constexpr int64_t kInlineBytes = kInlineLines * sizeof(Line::data);  // 448

// Per rank: three progress counters, the closing flag, what a direct copy needs to know of
// this rank's buffer (its address and the process id), and for an all-reduce of shared buffers
// where this rank's buffer lies, whether it can read every peer's, and the chunks it has summed.
enum Phase {
  kPosted = 0,
  kReduced = 1,
  kDone = 2,
  kClosing = 3,
  kAddr = 4,
  kPid = 5,
  kShared = 6,
  kSharedOk = 7,
  kChunk = 8,
  kPhases = 9
};

// The all-reduce / reduce-scatter algorithms (docs/collectives.md); kAuto: the tuner chooses.
enum class Algorithm { kAuto, kOneShot, kDirect, kRing, kHalvingDoubling };
constexpr const char* kAlgorithmNames[] = {"auto", "one_shot", "direct", "ring",
                                           "halving_doubling"};

Algorithm parse_algorithm(const std::string& name) {
  for (int i = 0; i < 5; i++)
    if (name == kAlgorithmNames[i]) return static_cast<Algorithm>(i);
  fail("comm.algorithm must be {}, got '{}'", kShmAlgorithmChoices, name);
}

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
  ShmCommunicator(std::unique_ptr<Communicator> mpi, const CommOptions& o)
      : mpi_(std::move(mpi)), opts_(o), rank_(mpi_->rank()), size_(mpi_->size()) {
    if (o.shm.chunk_bytes < 4096 || o.shm.chunk_bytes % 4096)
      fail("comm: the shared-memory chunk ({} bytes) must be a positive multiple of 4096",
           o.shm.chunk_bytes);
    if (o.shm.slots < 2) fail("comm: the shared-memory engine needs at least 2 slots");
    if (o.shm.inline_bytes < 0 || o.shm.inline_bytes > kInlineBytes)
      fail("comm: shm.inline_bytes = {} is outside 0..{} (the bytes a rank's lines carry)",
           o.shm.inline_bytes, kInlineBytes);
    inline_max_ = o.shm.inline_bytes;
    chunk_ = o.shm.chunk_bytes;
    slots_ = o.shm.slots;
    algorithm_ = parse_algorithm(o.algorithm);
    scratch_.resize(chunk_ / sizeof(double));
    src_.resize(size_);
    // MPI's window starts a few bytes into a page (osc/sm puts a header first), so the parts are
    // placed at page boundaries past it: with the staging 8 bytes off a cache line every vector
    // store split across two lines (and some across two pages), and in about half of all
    // launches three of the four slots took 4-5x longer to fill (docs/performance.md).
    const int64_t control = align_page(int64_t{size_} * kPhases * kLine);
    const int64_t lines = align_page(int64_t{size_} * kInlineSlots * kInlineLines * sizeof(Line));
    const int64_t staging = int64_t{size_} * slots_ * chunk_;
    const int64_t result = int64_t{slots_} * chunk_;
    const int64_t total = control + lines + staging + result + kPage;
    window_bytes_ = total;
    run_on_mpi_thread(*mpi_, "allocation of the shared-memory window", [&](MPI_Comm comm) {
      MPI_Info info;
      MPI_Info_create(&info);
      MPI_Info_set(info, "alloc_shared_noncontig", "false");
      void* mine = nullptr;
      int rc = MPI_Win_allocate_shared(rank_ == 0 ? total : 0, 1, info, comm, &mine, &win_);
      MPI_Info_free(&info);
      if (rc != MPI_SUCCESS) return rc;
      MPI_Aint bytes = 0;
      int disp = 0;
      rc = MPI_Win_shared_query(win_, 0, &bytes, &disp, &base_);
      if (rc != MPI_SUCCESS) return rc;
      // Every process maps the window at the same offset within a page, so all of them find
      // the same aligned start.
      base_ = reinterpret_cast<void*>(align_page(reinterpret_cast<int64_t>(base_)));
      if (rank_ == 0) {
        auto* c = static_cast<Counter*>(base_);
        for (int64_t i = 0; i < int64_t{size_} * kPhases; i++)
          new (&c[i].value) std::atomic<uint64_t>(0);
        auto* l = reinterpret_cast<Line*>(static_cast<char*>(base_) + control);
        for (int64_t i = 0; i < lines / static_cast<int64_t>(sizeof(Line)); i++)
          new (&l[i].tag) std::atomic<uint64_t>(0);
      }
      rc = MPI_Barrier(comm);
      if (rc != MPI_SUCCESS) return rc;
      // Direct copies between processes (process_vm_readv) need the right to trace the peer;
      // find out once, together, whether every rank can read its neighbour.
      auto* c = static_cast<Counter*>(base_);
      static const uint64_t probe = 0x6b696c6eu;
      c[int64_t{rank_} * kPhases + kAddr].value.store(reinterpret_cast<uint64_t>(&probe));
      c[int64_t{rank_} * kPhases + kPid].value.store(static_cast<uint64_t>(getpid()));
      rc = MPI_Barrier(comm);
      if (rc != MPI_SUCCESS) return rc;
      const int next = (rank_ + 1) % size_;
      uint64_t got = 0;
      int ok = read_from(next, &got, c[int64_t{next} * kPhases + kAddr].value.load(), 8, c) &&
               got == probe;
      int all_ok = 0;
      rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
      direct_ = all_ok == 1 && o.shm.direct_bytes > 0;
      return rc;
    });
    control_ = static_cast<Counter*>(base_);
    lines_ = reinterpret_cast<Line*>(static_cast<char*>(base_) + control);
    staging_ = static_cast<char*>(base_) + control + lines;
    result_ = staging_ + staging;
    // More ranks than cores: a waiting rank holds the core its peer needs, so yield at once.
    oversubscribed_ = node_ranks_exceed_cores();
    thread_ = std::thread([this] { loop(); });
  }

  ~ShmCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    // MPI_Win_free is collective: free only when every rank got here (a rank that died or hangs
    // would otherwise hang this one too); otherwise the window stays until the process ends.
    // While an exception unwinds (this rank failed; the job is about to be aborted) do not wait.
    if (std::uncaught_exceptions() > 0) return;
    counter(rank_, kClosing).store(1, std::memory_order_release);
    const double start = now_seconds(), limit = std::min(opts_.timeout_seconds, 30.0);
    bool all = false;
    while (!all && now_seconds() - start < limit) {
      all = true;
      for (int q = 0; q < size_; q++)
        all = all && counter(q, kClosing).load(std::memory_order_acquire) >= 1;
      if (!all) backoff(now_seconds() - start);
    }
    if (!all) return;
    try {
      run_on_mpi_thread(*mpi_, "freeing the shared-memory window",
                        [this](MPI_Comm) { return MPI_Win_free(&win_); });
    } catch (const Error&) {
      // Nothing more to do at shutdown.
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "shm"; }
  int64_t buffer_bytes() const override { return window_bytes_ / size_; }
  int64_t bytes_sent() const override { return sent_.load(std::memory_order_relaxed); }

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
    return issue({"all_gather", total(counts)}, [=, this] { do_all_gather(buf, counts, t); });
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
    run_now({"all_gather", total(counts)}, [&] { do_all_gather(buf, counts, t); });
  }
  void broadcast(void* buf, int64_t n, DType t, int root) override {
    KILN_CHECK(root >= 0 && root < size_ && n >= 0);
    run_now({"broadcast", n, "from rank", root}, [&] { do_broadcast(buf, n, t, root); });
  }
  void barrier() override {
    run_now({"barrier", -1}, [&] { do_barrier(); });
  }
  // Point-to-point messages go through MPI (on its own thread, so they never wait behind a
  // collective of this engine).
  std::shared_ptr<Work> send_async(const void* buf, int64_t n, DType t, int peer,
                                   int tag) override {
    return mpi_->send_async(buf, n, t, peer, tag);
  }
  std::shared_ptr<Work> recv_async(void* buf, int64_t n, DType t, int peer, int tag) override {
    return mpi_->recv_async(buf, n, t, peer, tag);
  }
  std::shared_ptr<Work> barrier_async() override {
    return issue({"barrier", -1}, [this] { do_barrier(); });
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<ShmCommunicator>(mpi_->split(color, key), opts_);
  }

  // A memfd of this rank, mapped by every peer through /proc/<pid>/fd (which needs the same
  // right as process_vm_readv). If any rank cannot map every other's, each keeps its own memory
  // as ordinary memory and all-reduces of it are staged.
  bool shares_memory() const override { return true; }
  std::unique_ptr<SharedMemory> alloc_shared(int64_t bytes) override {
    KILN_CHECK(bytes >= 0);
    SharedRegistry& reg = SharedRegistry::instance();
    const int64_t mapped = align_page(std::max<int64_t>(bytes, 1));
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
  static int64_t total(const std::vector<int64_t>& counts) {
    int64_t t = 0;
    for (auto c : counts) t += c;
    return t;
  }

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
    if (broken_)
      return fmt::format("rank {}: {} not run: an earlier operation failed ({})", rank_,
                         desc.text(), broken_reason_);
    current_ = &desc;
    std::string err;
    try {
      body();
    } catch (const Error& e) {
      broken_ = true;
      broken_reason_ = e.what();
      err = e.what();
    }
    current_ = nullptr;
    return err;
  }

  // ---- synchronisation

  std::atomic<uint64_t>& counter(int r, Phase p) {
    return control_[int64_t{r} * kPhases + p].value;
  }
  void set(Phase p, uint64_t g) { counter(rank_, p).store(g, std::memory_order_release); }

  // How a waiting rank spends the time, by how long it has waited: spin (a peer that runs
  // arrives within a step's time, tens of microseconds), then yield the core, then sleep. With
  // more ranks than cores the peer needs this core, so yield at once.
  // When waits keep outlasting the spin (the peer is not running: other processes hold the
  // cores), spinning only delays it further, so later waits yield at once until waits turn
  // short again.
  // One `pause` per check: on this CPU it takes about 65 cycles, and the 16 per check there used
  // to be left a small operation's peer 0.4 us to go unnoticed (2-rank 8-byte all-reduce: 0.38 ->
  // 0.19 us).
  void backoff(double waited) {
    if (!oversubscribed_ && long_waits_ < 8 && waited < kSpinSeconds) {
      _mm_pause();
    } else if (waited < kYieldSeconds) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.01 ? 20 : 200));
    }
  }
  static constexpr double kSpinSeconds = 100e-6, kYieldSeconds = 2e-3;
  static constexpr int64_t kPage = 4096;
  static int64_t align_page(int64_t x) { return (x + kPage - 1) / kPage * kPage; }

  // Waits until every rank (or only `only`, if >= 0) has counter p at step g or later.
  void wait_all(Phase p, uint64_t g, int only = -1) {
    wait_until(p, g, only,
               [&](int q) { return counter(q, p).load(std::memory_order_acquire) >= g; });
  }

  // Waits until arrived(q) for every rank q (or only `only`); a timeout names the ranks whose
  // counter p is not at g.
  template <class Arrived>
  void wait_until(Phase p, uint64_t g, int only, Arrived&& arrived) {
    const int lo = only >= 0 ? only : 0, hi = only >= 0 ? only + 1 : size_;
    double start = 0, waited = 0;
    for (int spins = 0;; spins++) {
      bool all = true;
      for (int q = lo; q < hi && all; q++) all = q == rank_ || arrived(q);
      if (all) {
        if (waited >= kSpinSeconds)
          long_waits_ = std::min(long_waits_ + 1, 16);
        else if (long_waits_ > 0 && spins < 32)
          long_waits_--;
        return;
      }
      if (spins >= 32) {  // the clock only once a wait is not short
        const double now = now_seconds();
        if (start == 0) start = now;
        waited = now - start;
        if (waited > opts_.timeout_seconds) timed_out(p, g, lo, hi);
      }
      backoff(waited);
    }
  }

  [[noreturn]] void timed_out(Phase p, uint64_t g, int lo, int hi) {
    std::string missing;
    for (int q = lo; q < hi; q++)
      if (counter(q, p).load(std::memory_order_acquire) < g)
        missing += fmt::format("{}{}", missing.empty() ? "" : ", ", q);
    fail(
        "rank {}: {} (step {}) timed out after {:.0f} s waiting for rank(s) {} (a peer may have "
        "died or be stuck)",
        rank_, current_ ? current_->text() : std::string("operation"), g, opts_.timeout_seconds,
        missing);
  }

  // ---- the shared window

  char* staging(int r, uint64_t g) {
    return staging_ + (int64_t{r} * slots_ + static_cast<int64_t>(g % slots_)) * chunk_;
  }
  char* result(uint64_t g) { return result_ + static_cast<int64_t>(g % slots_) * chunk_; }

  // Starts step g: its slot is free once every rank is done with step g - slots (a small step's
  // lines: g - kInlineSlots). The least `done` seen last time usually answers without reading
  // the peers' counters (cache misses).
  uint64_t begin_step(int slots = 0) {
    const uint64_t g = ++step_, window = slots > 0 ? slots : slots_;
    if (g > window && g - window > known_done_) {
      wait_all(kDone, g - window);
      uint64_t least = UINT64_MAX;
      for (int q = 0; q < size_; q++)
        least = std::min(least, counter(q, kDone).load(std::memory_order_relaxed));
      known_done_ = std::max(known_done_, least);
    }
    return g;
  }

  // ---- small messages in the lines of step g's slot (at most kInlineBytes)

  Line* lines(int r, uint64_t g) {
    return lines_ +
           (int64_t{r} * kInlineSlots + static_cast<int64_t>(g % kInlineSlots)) * kInlineLines;
  }
  void post_inline(uint64_t g, const void* data, int64_t bytes) {
    Line* l = lines(rank_, g);
    for (int64_t off = 0, i = 0; off < bytes || i == 0; off += sizeof(Line::data), i++) {
      std::memcpy(l[i].data, static_cast<const char*>(data) + off,
                  std::min<int64_t>(sizeof(Line::data), bytes - off));
      l[i].tag.store(g, std::memory_order_release);
    }
    sent(bytes);
    set(kPosted, g);  // for timeouts only: peers read the tags
  }
  // The lines are posted in order, each tag with release order, so the last line's tag, once
  // seen (acquire), makes the earlier lines visible too: one line to poll, and the others are
  // then read in parallel rather than one cross-core transfer after another.
  bool inline_arrived(int q, uint64_t g, int64_t bytes) {
    const int n = static_cast<int>(std::max<int64_t>(1, (bytes + 55) / 56));
    return lines(q, g)[n - 1].tag.load(std::memory_order_acquire) >= g;
  }
  void read_inline(int q, uint64_t g, void* to, int64_t bytes) {
    const Line* l = lines(q, g);
    const int64_t n = (bytes + 55) / 56;
    for (int64_t i = 0; i < n; i++)  // all the lines' transfers at once
      _mm_prefetch(reinterpret_cast<const char*>(&l[i]), _MM_HINT_T0);
    for (int64_t off = 0, i = 0; off < bytes; off += sizeof(Line::data), i++)
      std::memcpy(static_cast<char*>(to) + off, l[i].data,
                  std::min<int64_t>(sizeof(Line::data), bytes - off));
  }
  void wait_inline(uint64_t g, int64_t bytes, int only = -1) {
    wait_until(kPosted, g, only, [&](int q) { return inline_arrived(q, g, bytes); });
  }

  // Where each rank's slice starts (offset[r]) and the total (offset[size_]), in a scratch
  // vector of the communicator: one operation runs at a time, and nothing is allocated per step.
  const std::vector<int64_t>& offsets_of(const std::vector<int64_t>& counts) {
    offsets_.assign(size_ + 1, 0);
    for (int r = 0; r < size_; r++) offsets_[r + 1] = offsets_[r] + counts[r];
    return offsets_;
  }

  std::vector<int64_t> even_counts(int64_t n) const {
    std::vector<int64_t> c(size_);
    for (int r = 0; r < size_; r++) c[r] = n / size_ + (r < n % size_ ? 1 : 0);
    return c;
  }

  // ---- algorithms (docs/collectives.md)

  // The tuner (docs/collectives.md, "The tuner"), all-reduce: one-shot for small buffers, the
  // ring for large ones on the rank counts where it was measured faster (its larger steps need
  // fewer synchronisations than direct's), direct between. Halving-doubling was never the
  // fastest here, so auto does not choose it.
  Algorithm choose(int64_t bytes) const {
    if (algorithm_ != Algorithm::kAuto) return algorithm_;
    if (bytes <= std::min(opts_.shm.one_shot_bytes, chunk_)) return Algorithm::kOneShot;
    // With more ranks than cores each of the ring's 2(P-1) hand-offs per round may wait for a
    // descheduled peer; for large buffers its timings then scattered 3-fold between runs, while
    // direct's (2 hand-offs) held.
    if (size_ <= opts_.shm.ring_max_ranks && bytes >= opts_.shm.ring_bytes &&
        (!oversubscribed_ || bytes < opts_.shm.ring_oversubscribed_below))
      return Algorithm::kRing;
    return Algorithm::kDirect;
  }
  // Reduce-scatter (bytes: the whole input): one-shot in the lines up to 448 bytes, direct, or
  // the ring from its own threshold.
  Algorithm choose_scatter(int64_t bytes) const {
    if (algorithm_ != Algorithm::kAuto) return algorithm_;
    if (bytes <= inline_max_) return Algorithm::kOneShot;
    return size_ <= opts_.shm.ring_max_ranks && bytes >= opts_.shm.ring_scatter_bytes
               ? Algorithm::kRing
               : Algorithm::kDirect;
  }

  // shared: alloc_shared had succeeded on this communicator when the operation was issued.
  void do_all_reduce(void* buf, int64_t n, DType t, bool shared) {
    if (n == 0) return;
    const int64_t bytes = n * static_cast<int64_t>(dtype_bytes(t));
    if (size_ > 1 && algorithm_ == Algorithm::kAuto && shared && bytes >= opts_.shm.shared_bytes &&
        bytes < opts_.shm.shared_below && shared_all_reduce(buf, n, t))
      return;
    switch (size_ == 1 ? Algorithm::kDirect : choose(bytes)) {
      case Algorithm::kOneShot:
        return one_shot_all_reduce(buf, n, t);
      case Algorithm::kRing:
        return with_type(t, [&](auto* tag) {
          ring<std::remove_pointer_t<decltype(tag)>>(buf, buf, even_counts(n), true);
        });
      case Algorithm::kHalvingDoubling:
        return with_type(t, [&](auto* tag) {
          halving_doubling<std::remove_pointer_t<decltype(tag)>>(buf, buf, even_counts(n), true);
        });
      default:
        return reduce_scatter_chunks(buf, buf, even_counts(n), t, /*gather=*/true);
    }
  }

  // One-shot has no reduce-scatter of its own: it and auto use the direct one.
  // shared: as for do_all_reduce.
  void do_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, DType t,
                         bool shared) {
    const int64_t bytes = total(counts) * static_cast<int64_t>(dtype_bytes(t));
    if (size_ > 1 && algorithm_ == Algorithm::kAuto && shared && bytes >= opts_.shm.shared_bytes &&
        bytes < opts_.shm.shared_below && shared_reduce_scatter(in, out, counts, t))
      return;
    const Algorithm a = size_ == 1 ? Algorithm::kDirect : choose_scatter(bytes);
    if (a == Algorithm::kRing)
      with_type(t, [&](auto* tag) {
        ring<std::remove_pointer_t<decltype(tag)>>(in, out, counts, false);
      });
    else if (a == Algorithm::kHalvingDoubling)
      with_type(t, [&](auto* tag) {
        halving_doubling<std::remove_pointer_t<decltype(tag)>>(in, out, counts, false);
      });
    else if (a == Algorithm::kOneShot && inline_fits(total(counts), t))
      inline_reduce_scatter(in, out, counts, t);
    else
      reduce_scatter_chunks(in, out, counts, t, /*gather=*/false);
  }

  // A small reduce-scatter: every rank posts its whole input in its lines, each sums its slice
  // from all of them in rank order (the direct algorithm's order).
  bool inline_fits(int64_t n, DType t) const {
    return n * static_cast<int64_t>(dtype_bytes(t)) <= inline_max_ &&
           int64_t{size_} * kInlineBytes <= chunk_;
  }
  void inline_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts,
                             DType t) {
    const int64_t es = dtype_bytes(t), n = total(counts);
    int64_t offset = 0;
    for (int r = 0; r < rank_; r++) offset += counts[r];
    const uint64_t g = begin_step(kInlineSlots);
    post_inline(g, in, n * es);
    wait_inline(g, n * es);
    char* copies = reinterpret_cast<char*>(scratch_.data());
    for (int q = 0; q < size_; q++) {
      if (q != rank_) read_inline(q, g, copies + q * kInlineBytes, n * es);
      src_[q] = q == rank_ ? static_cast<const char*>(in) + offset * es
                           : copies + q * kInlineBytes + offset * es;
    }
    reduce(t, out, nullptr, src_.data(), size_, counts[rank_]);
    set(kDone, g);
  }

  void do_barrier() {
    const uint64_t g = ++step_;
    set(kPosted, g);
    wait_all(kPosted, g);
    set(kDone, g);
  }

  // Two steps that decide, alike on every rank, whether every rank's [buf, buf + bytes) lies in
  // shared memory that every rank can read (docs/collectives.md, "Shared buffers"). On yes it
  // returns the step to finish with (done, then wait for every rank's done, so that nobody
  // reads a buffer after its owner returns) and shared_src_[q] is rank q's buffer; on no, 0.
  uint64_t agree_shared(const void* buf, int64_t bytes) {
    SharedRegistry& reg = SharedRegistry::instance();
    uint32_t id = 0;
    int64_t offset = 0;
    const bool mine = reg.find_own(buf, bytes, &id, &offset) && offset < (int64_t{1} << 40);
    uint64_t g = begin_step();
    counter(rank_, kShared)
        .store(mine ? (uint64_t{id} << 40) | static_cast<uint64_t>(offset) : 0,
               std::memory_order_relaxed);
    set(kPosted, g);
    wait_all(kPosted, g);
    std::vector<const void*>& base = shared_src_;
    base.assign(size_, nullptr);
    bool readable = mine;
    for (int q = 0; q < size_ && readable; q++) {
      const uint64_t v = counter(q, kShared).load(std::memory_order_relaxed);
      base[q] = q == rank_ ? buf
                : v == 0   ? nullptr
                           : reg.find_peer(
                                 static_cast<pid_t>(counter(q, kPid).load(std::memory_order_relaxed)),
                                 static_cast<uint32_t>(v >> 40),
                                 static_cast<int64_t>(v & ((uint64_t{1} << 40) - 1)), bytes);
      readable = base[q] != nullptr;
    }
    set(kDone, g);
    g = begin_step();
    counter(rank_, kSharedOk).store(readable ? 1 : 0, std::memory_order_relaxed);
    set(kPosted, g);
    wait_all(kPosted, g);
    bool all = true;
    for (int q = 0; q < size_; q++)
      all = all && counter(q, kSharedOk).load(std::memory_order_relaxed) == 1;
    if (!all) {
      set(kDone, g);
      return 0;
    }
    return g;
  }

  // Reduce-scatter of inputs in shared memory: each rank sums its slice straight from every
  // rank's input, rank order (the direct algorithm's), into its output. Nothing is staged or
  // written for the peers.
  bool shared_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts,
                             DType t) {
    const int64_t es = dtype_bytes(t);
    const uint64_t g = agree_shared(in, total(counts) * es);
    if (g == 0) return false;
    int64_t offset = 0;
    for (int q = 0; q < rank_; q++) offset += counts[q];
    const int64_t E = chunk_ / es;
    for (int64_t k = 0; k < counts[rank_]; k += E) {
      for (int q = 0; q < size_; q++)
        src_[q] = static_cast<const char*>(shared_src_[q]) + (offset + k) * es;
      reduce(t, at(out, k, es), nullptr, src_.data(), size_, std::min(E, counts[rank_] - k));
    }
    set(kDone, g);
    wait_all(kDone, g);
    return true;
  }

  // All-reduce of buffers in shared memory (docs/collectives.md, "Shared buffers"): if
  // agree_shared says no, it returns false and the staged algorithms run. Otherwise, a chunk of
  // E elements of each slice at a time: the owner of slice q sums it from every rank's buffer,
  // rank order, into its own buffer and counts the chunk (kChunk); one chunk behind, every rank
  // copies the finished chunks of the other slices from their owners' buffers. A rank
  // overwrites slice q's chunk only after q has counted it, i.e. read it.
  bool shared_all_reduce(void* buf, int64_t n, DType t) {
    const int64_t es = dtype_bytes(t);
    const uint64_t g = agree_shared(buf, n * es);
    if (g == 0) return false;
    const std::vector<const void*>& base = shared_src_;
    const int64_t P = size_, r = rank_;
    auto first = [&](int64_t q) { return q * (n / P) + std::min(q, n % P); };
    auto count = [&](int64_t q) { return n / P + (q < n % P ? 1 : 0); };
    const int64_t E = chunk_ / es, rounds = (count(0) + E - 1) / E;
    const uint64_t seq = chunk_seq_;
    auto gather = [&](int64_t k) {
      for (int64_t i = 1; i < P; i++) {
        const int q = static_cast<int>((r + i) % P);
        const int64_t m = piece(count(q), k, E);
        wait_all(kChunk, seq + k + 1, q);
        if (m > 0) {
          const int64_t e = first(q) + k * E;
          std::memcpy(at(buf, e, es), static_cast<const char*>(base[q]) + e * es, m * es);
        }
      }
    };
    for (int64_t k = 0; k < rounds; k++) {
      const int64_t m = piece(count(r), k, E);
      if (m > 0) {
        const int64_t e = first(r) + k * E;
        for (int q = 0; q < P; q++) src_[q] = static_cast<const char*>(base[q]) + e * es;
        reduce(t, at(buf, e, es), nullptr, src_.data(), size_, m);
      }
      counter(rank_, kChunk).store(seq + k + 1, std::memory_order_release);
      if (k > 0) gather(k - 1);
    }
    gather(rounds - 1);
    chunk_seq_ += static_cast<uint64_t>(rounds);
    // Written for the peers: this slice's sums (they read their inputs where the user put them).
    sent(count(r) * es);
    set(kDone, g);
    wait_all(kDone, g);
    return true;
  }

  // One-shot all-reduce: every rank stages its whole buffer (a chunk at a time when it is
  // larger), then every rank sums all of them in rank order.
  void one_shot_all_reduce(void* buf, int64_t n, DType t) {
    const int64_t es = dtype_bytes(t);
    if (inline_fits(n, t)) {
      const uint64_t g = begin_step(kInlineSlots);
      post_inline(g, buf, n * es);
      wait_inline(g, n * es);
      char* copies = reinterpret_cast<char*>(scratch_.data());
      for (int q = 0; q < size_; q++) {
        if (q != rank_) read_inline(q, g, copies + q * kInlineBytes, n * es);
        src_[q] = q == rank_ ? buf : copies + q * kInlineBytes;
      }
      reduce(t, buf, nullptr, src_.data(), size_, n);
      set(kDone, g);
      return;
    }
    const int64_t E = chunk_ / es;
    for (int64_t k = 0; k * E < n; k++) {
      const int64_t m = std::min(E, n - k * E);
      const uint64_t g = begin_step();
      std::memcpy(staging(rank_, g), at(buf, k * E, es), m * es);
      sent(m * es);
      set(kPosted, g);
      wait_all(kPosted, g);
      for (int q = 0; q < size_; q++) src_[q] = staging(q, g);
      reduce(t, at(buf, k * E, es), nullptr, src_.data(), size_, m);
      set(kDone, g);
    }
  }

  // Ring (docs/collectives.md): slices as in the direct reduce-scatter, in rounds of E elements
  // per slice. Reduce-scatter, P-1 steps: in step s rank r adds its piece of slice r-1-s to the
  // partial sum its left neighbour staged in step s-1 and stages the result (in the accumulation
  // type); the last addition, of slice r, is rank r's. All-gather (all-reduce only), P-1 steps:
  // each rank stages the finished piece it received last, its right neighbour copies it. Slice j
  // is summed in the order j+1, j+2, ..., P-1, 0, ..., j.
  template <class T>
  void ring(const void* in_, void* out_, const std::vector<int64_t>& counts, bool all_reduce) {
    using A = typename Num<T>::A;
    const T* in = static_cast<const T*>(in_);
    T* out = static_cast<T*>(out_);
    const int P = size_, r = rank_, left = (r + P - 1) % P;
    const int64_t E = chunk_ / static_cast<int64_t>(sizeof(A)) / 16 * 16;
    const std::vector<int64_t>& offset = offsets_of(counts);
    const int64_t rounds = (*std::max_element(counts.begin(), counts.end()) + E - 1) / E;
    auto slice = [&](int s) { return ((r - s) % P + P) % P; };
    for (int64_t k = 0; k < rounds; k++) {
      auto first = [&](int j) { return offset[j] + k * E; };
      auto len = [&](int j) { return piece(counts[j], k, E); };
      uint64_t g = 0;
      for (int s = 0; s < P - 1; s++) {
        const int j = slice(s + 1);
        g = begin_step();
        const A* partial = nullptr;
        if (s > 0) {
          wait_all(kPosted, g - 1, left);
          partial = reinterpret_cast<const A*>(staging(left, g - 1));
        }
        accumulate<T>(reinterpret_cast<A*>(staging(r, g)), partial, in + first(j), len(j));
        sent(len(j) * sizeof(A));
        set(kPosted, g);
        if (s > 0) set(kDone, g - 1);
      }
      wait_all(kPosted, g, left);
      const A* partial = reinterpret_cast<const A*>(staging(left, g));
      if (!all_reduce) {
        finish<T>(out + k * E, nullptr, partial, in + first(r), len(r));
        set(kDone, g);
        continue;
      }
      uint64_t h = begin_step();
      finish<T>(out + first(r), reinterpret_cast<T*>(staging(r, h)), partial, in + first(r),
                len(r));
      sent(len(r) * sizeof(T));
      set(kPosted, h);
      set(kDone, g);
      for (int s = 1; s < P; s++) {
        const int j = slice(s);
        wait_all(kPosted, h, left);
        const T* got = reinterpret_cast<const T*>(staging(left, h));
        std::memcpy(out + first(j), got, len(j) * sizeof(T));
        if (s < P - 1) {  // pass it on
          const uint64_t next = begin_step();
          std::memcpy(staging(r, next), got, len(j) * sizeof(T));
          sent(len(j) * sizeof(T));
          set(kPosted, next);
          set(kDone, h);
          h = next;
        } else {
          set(kDone, h);
        }
      }
    }
  }

  // Recursive halving-doubling (docs/collectives.md) over the largest power of two P2 <= P
  // ranks; a rank e >= P2 first hands its data to rank e - P2 and at the end receives the
  // result from it. Slices as in the direct reduce-scatter, E elements of each per round; rank
  // b of the P2 "holds" slice q when q mod P2 agrees with b on the bits handled so far. Halving,
  // distance d = 1, 2, ..., P2/2: b and b^d each keep the slices that agree with them on bit d
  // and sum them with what the partner staged, the lower rank's partial first. Doubling (all-
  // reduce), d = P2/2, ..., 1: each stages the finished slices it holds, its partner copies
  // them. Slice q is summed as a balanced tree: ((x0 + x_P2) + x1) + ... pairwise, see docs.
  template <class T>
  void halving_doubling(const void* in_, void* out_, const std::vector<int64_t>& counts,
                        bool all_reduce) {
    using A = typename Num<T>::A;
    const T* in = static_cast<const T*>(in_);
    T* out = static_cast<T*>(out_);
    const int P = size_, r = rank_;
    int P2 = 1;
    while (P2 * 2 <= P) P2 *= 2;
    const bool extra = r >= P2;
    const int b = extra ? r - P2 : r;             // rank in the power-of-two group
    const int helper = r + P2 < P ? r + P2 : -1;  // the extra rank this one stands in for
    const int64_t E = chunk_ / (int64_t{P} * static_cast<int64_t>(sizeof(A))) / 16 * 16;
    KILN_CHECK(E > 0);
    const std::vector<int64_t>& offset = offsets_of(counts);
    const int64_t rounds = (*std::max_element(counts.begin(), counts.end()) + E - 1) / E;
    A* W = reinterpret_cast<A*>(scratch_.data());  // slice q's partial at W + q * E
    for (int64_t k = 0; k < rounds; k++) {
      auto first = [&](int q) { return offset[q] + k * E; };
      auto len = [&](int q) { return piece(counts[q], k, E); };
      auto holds = [&](int q, int who, int mask) { return ((q % P2) & mask) == (who & mask); };
      if (P != P2) {  // fold the extra ranks in
        const uint64_t g = begin_step();
        if (extra) {
          A* st = reinterpret_cast<A*>(staging(r, g));
          for (int q = 0; q < P; q++) accumulate<T>(st + q * E, nullptr, in + first(q), len(q));
          sent(total(counts, k, E) * sizeof(A));
          set(kPosted, g);
        } else {
          set(kPosted, g);
          for (int q = 0; q < P; q++) accumulate<T>(W + q * E, nullptr, in + first(q), len(q));
          if (helper >= 0) {
            wait_all(kPosted, g, helper);
            const A* got = reinterpret_cast<const A*>(staging(helper, g));
            for (int q = 0; q < P; q++) combine(W + q * E, W + q * E, got + q * E, len(q));
          }
        }
        set(kDone, g);
      } else {
        for (int q = 0; q < P; q++) accumulate<T>(W + q * E, nullptr, in + first(q), len(q));
      }
      int mask = 0;
      for (int d = 1; d < P2; d *= 2) {  // halving
        const uint64_t g = begin_step();
        if (!extra) {
          const int partner = b ^ d;
          A* st = reinterpret_cast<A*>(staging(r, g));
          int64_t staged = 0;
          for (int q = 0; q < P; q++)
            if (holds(q, b, mask) && holds(q, partner, mask | d)) {
              std::memcpy(st + q * E, W + q * E, len(q) * sizeof(A));
              staged += len(q);
            }
          sent(staged * sizeof(A));
          set(kPosted, g);
          wait_all(kPosted, g, partner);
          const A* got = reinterpret_cast<const A*>(staging(partner, g));
          for (int q = 0; q < P; q++)
            if (holds(q, b, mask | d)) {
              if (b < partner)
                combine(W + q * E, W + q * E, got + q * E, len(q));
              else
                combine(W + q * E, got + q * E, W + q * E, len(q));
            }
        } else {
          set(kPosted, g);
        }
        set(kDone, g);
        mask |= d;
      }
      // Rank b now holds the sums of slices b and b + P2.
      if (!all_reduce) {
        if (!extra) round_copy<T>(out + k * E, W + b * E, len(b));
        if (P != P2) {
          const uint64_t g = begin_step();
          if (helper >= 0) {
            round_copy<T>(reinterpret_cast<T*>(staging(r, g)), W + helper * E, len(helper));
            sent(len(helper) * sizeof(T));
          }
          set(kPosted, g);
          if (extra) {
            wait_all(kPosted, g, b);
            std::memcpy(out + k * E, staging(b, g), len(r) * sizeof(T));
          }
          set(kDone, g);
        }
        continue;
      }
      if (!extra)
        for (int q = 0; q < P; q++)
          if (holds(q, b, mask)) round_copy<T>(out + first(q), W + q * E, len(q));
      for (int d = P2 / 2; d >= 1; d /= 2) {  // doubling
        const uint64_t g = begin_step();
        if (!extra) {
          const int partner = b ^ d;
          T* st = reinterpret_cast<T*>(staging(r, g));
          int64_t staged = 0;
          for (int q = 0; q < P; q++)
            if (holds(q, b, mask)) {
              std::memcpy(st + q * E, out + first(q), len(q) * sizeof(T));
              staged += len(q);
            }
          sent(staged * sizeof(T));
          set(kPosted, g);
          wait_all(kPosted, g, partner);
          const T* got = reinterpret_cast<const T*>(staging(partner, g));
          for (int q = 0; q < P; q++)
            if (holds(q, partner, mask))
              std::memcpy(out + first(q), got + q * E, len(q) * sizeof(T));
        } else {
          set(kPosted, g);
        }
        set(kDone, g);
        mask &= ~d;
      }
      if (P != P2) {  // hand the result to the extra ranks
        const uint64_t g = begin_step();
        if (helper >= 0) {
          T* st = reinterpret_cast<T*>(staging(r, g));
          for (int q = 0; q < P; q++) std::memcpy(st + q * E, out + first(q), len(q) * sizeof(T));
          sent(total(counts, k, E) * sizeof(T));
        }
        set(kPosted, g);
        if (extra) {
          wait_all(kPosted, g, b);
          const T* got = reinterpret_cast<const T*>(staging(b, g));
          for (int q = 0; q < P; q++) std::memcpy(out + first(q), got + q * E, len(q) * sizeof(T));
        }
        set(kDone, g);
      }
    }
  }

  // Elements of round k over all slices.
  static int64_t total(const std::vector<int64_t>& counts, int64_t k, int64_t E) {
    int64_t t = 0;
    for (auto c : counts) t += piece(c, k, E);
    return t;
  }

  void sent(int64_t bytes) {
    sent_.store(sent_.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }

  // Reduce-scatter in steps: in step k, owner r's piece is elements [k*E, (k+1)*E) of its
  // slice. Every rank stages the pieces the others own; each owner sums its piece from every
  // rank's staging (its own straight from `in`) in rank order into `out`. With gather (all-reduce,
  // in == out, counts even), the owner also writes its sum to the step's result chunk and every
  // rank copies the others' sums from there.
  void reduce_scatter_chunks(const void* in, void* out, const std::vector<int64_t>& counts, DType t,
                             bool gather) {
    const int64_t es = dtype_bytes(t);
    const int64_t E = chunk_ / (int64_t{size_} * es) / 16 * 16;  // elements per owner per step
    KILN_CHECK(E > 0);
    const std::vector<int64_t>& offset = offsets_of(counts);
    const int64_t longest = *std::max_element(counts.begin(), counts.end());
    const int64_t steps = (longest + E - 1) / E;
    std::vector<const void*>& src = src_;
    for (int64_t k = 0; k < steps; k++) {
      const uint64_t g = begin_step();
      char* mine = staging(rank_, g);
      for (int r = 0; r < size_; r++)
        if (r != rank_) {
          std::memcpy(mine + r * E * es, at(const_cast<void*>(in), offset[r] + k * E, es),
                      piece(counts[r], k, E) * es);
          sent(piece(counts[r], k, E) * es);
        }
      set(kPosted, g);
      wait_all(kPosted, g);
      for (int q = 0; q < size_; q++)
        src[q] = q == rank_ ? at(const_cast<void*>(in), offset[rank_] + k * E, es)
                            : staging(q, g) + rank_ * E * es;
      const int64_t m = piece(counts[rank_], k, E);
      if (gather) {
        reduce(t, at(out, offset[rank_] + k * E, es), result(g) + rank_ * E * es, src.data(), size_,
               m);
        sent(m * es);
        set(kReduced, g);
        wait_all(kReduced, g);
        for (int r = 0; r < size_; r++)
          if (r != rank_)
            std::memcpy(at(out, offset[r] + k * E, es), result(g) + r * E * es,
                        piece(counts[r], k, E) * es);
      } else {
        reduce(t, at(out, k * E, es), nullptr, src.data(), size_, m);
      }
      set(kDone, g);
    }
  }

  // All-gather in place in steps: every rank stages a chunk of its slice; every rank copies the
  // others' chunks into place.
  void all_gather_chunks(void* buf, const std::vector<int64_t>& counts, DType t) {
    const int64_t es = dtype_bytes(t);
    const int64_t E = chunk_ / es;
    const std::vector<int64_t>& offset = offsets_of(counts);
    const int64_t longest = *std::max_element(counts.begin(), counts.end());
    const int64_t steps = (longest + E - 1) / E;
    for (int64_t k = 0; k < steps; k++) {
      const uint64_t g = begin_step();
      std::memcpy(staging(rank_, g), at(buf, offset[rank_] + k * E, es),
                  piece(counts[rank_], k, E) * es);
      sent(piece(counts[rank_], k, E) * es);
      set(kPosted, g);
      wait_all(kPosted, g);
      for (int r = 0; r < size_; r++)
        if (r != rank_)
          std::memcpy(at(buf, offset[r] + k * E, es), staging(r, g), piece(counts[r], k, E) * es);
      set(kDone, g);
    }
  }

  // Broadcast in steps: the root stages a chunk, the others copy it.
  void broadcast_chunks(void* buf, int64_t n, DType t, int root) {
    const int64_t es = dtype_bytes(t);
    const int64_t E = chunk_ / es;
    const int64_t steps = (n + E - 1) / E;
    for (int64_t k = 0; k < steps; k++) {
      const uint64_t g = begin_step();
      const int64_t m = piece(n, k, E);
      if (rank_ == root) {
        std::memcpy(staging(root, g), at(buf, k * E, es), m * es);
        sent(m * es);
        set(kPosted, g);
      } else {
        wait_all(kPosted, g, root);
        std::memcpy(at(buf, k * E, es), staging(root, g), m * es);
      }
      set(kDone, g);
    }
  }

  // Copies `bytes` from address `from` in rank r's process into `to`; false if the kernel
  // refuses (no right to trace the peer).
  bool read_from(int r, void* to, uint64_t from, int64_t bytes, Counter* control = nullptr) {
    if (!control) control = control_;
    const pid_t pid = static_cast<pid_t>(control[int64_t{r} * kPhases + kPid].value.load());
    while (bytes > 0) {
      iovec local{to, static_cast<size_t>(bytes)};
      iovec remote{reinterpret_cast<void*>(from), static_cast<size_t>(bytes)};
      const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
      if (n <= 0) return false;
      to = static_cast<char*>(to) + n;
      from += static_cast<uint64_t>(n);
      bytes -= n;
    }
    return true;
  }

  void direct_read(int r, void* to, uint64_t from, int64_t bytes) {
    if (!read_from(r, to, from, bytes))
      fail("rank {}: {}: cannot read rank {}'s buffer directly: {}", rank_,
           current_ ? current_->text() : std::string("operation"), r, std::strerror(errno));
  }

  // Large all-gather, one step: every rank publishes its buffer's address, then reads the
  // others' slices straight from their buffers into its own (one copy, process_vm_readv), then
  // waits until nobody reads its buffer any more.
  void direct_all_gather(void* buf, const std::vector<int64_t>& counts, DType t) {
    const int64_t es = dtype_bytes(t);
    const uint64_t g = begin_step();
    counter(rank_, kAddr).store(reinterpret_cast<uint64_t>(buf), std::memory_order_relaxed);
    counter(rank_, kPid).store(static_cast<uint64_t>(getpid()), std::memory_order_relaxed);
    set(kPosted, g);
    wait_all(kPosted, g);
    const std::vector<int64_t>& offset = offsets_of(counts);
    // Rank q reads q+1, q+2, ...: at any time each buffer has one reader, so the readers do
    // not contend for the same process's page tables.
    for (int i = 1; i < size_; i++) {
      const int r = (rank_ + i) % size_;
      if (counts[r] > 0)
        direct_read(r, at(buf, offset[r], es),
                    counter(r, kAddr).load(std::memory_order_relaxed) + offset[r] * es,
                    counts[r] * es);
    }
    set(kDone, g);
    wait_all(kDone, g);
  }

  // Large broadcast, one step: every other rank reads the root's buffer directly.
  void direct_broadcast(void* buf, int64_t n, DType t, int root) {
    const int64_t es = dtype_bytes(t);
    const uint64_t g = begin_step();
    if (rank_ == root) {
      counter(rank_, kAddr).store(reinterpret_cast<uint64_t>(buf), std::memory_order_relaxed);
      counter(rank_, kPid).store(static_cast<uint64_t>(getpid()), std::memory_order_relaxed);
      set(kPosted, g);
    } else {
      wait_all(kPosted, g, root);
      // Reader j of the P-1 starts at part j and wraps around: at any time they read different
      // parts of the root's buffer (as the direct all-gather's rotated order). Parts of at least
      // 256 KiB: each is a system call.
      const uint64_t from = counter(root, kAddr).load(std::memory_order_relaxed);
      const int parts = static_cast<int>(
          std::clamp<int64_t>(n * es / (256 << 10), 1, static_cast<int64_t>(size_ - 1)));
      const int j = (rank_ - root + size_) % size_ - 1;
      for (int i = 0; i < parts; i++) {
        const int part = (j + i) % parts;
        const int64_t lo = n * part / parts, hi = n * (part + 1) / parts;
        if (hi > lo) direct_read(root, at(buf, lo, es), from + lo * es, (hi - lo) * es);
      }
    }
    set(kDone, g);
    if (rank_ == root) wait_all(kDone, g);
  }

  // Small all-gather: every rank's slice in its lines.
  void inline_all_gather(void* buf, const std::vector<int64_t>& counts, DType t) {
    const int64_t es = dtype_bytes(t);
    const uint64_t g = begin_step(kInlineSlots);
    int64_t offset = 0;
    for (int r = 0; r < rank_; r++) offset += counts[r];
    post_inline(g, at(buf, offset, es), counts[rank_] * es);
    offset = 0;
    for (int r = 0; r < size_; r++) {
      if (r != rank_) {
        wait_inline(g, counts[r] * es, r);
        read_inline(r, g, at(buf, offset, es), counts[r] * es);
      }
      offset += counts[r];
    }
    set(kDone, g);
  }

  void do_all_gather(void* buf, const std::vector<int64_t>& counts, DType t) {
    const int64_t es = dtype_bytes(t);
    if (*std::max_element(counts.begin(), counts.end()) * es <= inline_max_)
      return inline_all_gather(buf, counts, t);
    if (direct_ && total(counts) * static_cast<int64_t>(dtype_bytes(t)) >= direct_from())
      direct_all_gather(buf, counts, t);
    else
      all_gather_chunks(buf, counts, t);
  }

  void do_broadcast(void* buf, int64_t n, DType t, int root) {
    const int64_t es = dtype_bytes(t);
    // Small: the root's lines. With more ranks than cores up to their 448 bytes, so that the
    // root can run ahead of peers that are not running; otherwise as the other operations.
    if (n * es <= (oversubscribed_ ? kInlineBytes : inline_max_)) {
      const uint64_t g = begin_step(kInlineSlots);
      if (rank_ == root) {
        post_inline(g, buf, n * es);
      } else {
        wait_inline(g, n * es, root);
        read_inline(root, g, buf, n * es);
      }
      set(kDone, g);
      return;
    }
    if (direct_ && n * static_cast<int64_t>(dtype_bytes(t)) >=
                       std::min(direct_from(), opts_.shm.direct_broadcast_bytes))
      direct_broadcast(buf, n, t, root);
    else
      broadcast_chunks(buf, n, t, root);
  }

  // Where direct copies start: with every rank on a core of its own one copy through the kernel
  // wins from shm.direct_cores_bytes; with more ranks than cores the staged copies win up to
  // shm.direct_bytes (measured, docs/collectives.md).
  int64_t direct_from() const {
    return oversubscribed_ ? opts_.shm.direct_bytes
                           : std::min(opts_.shm.direct_bytes, opts_.shm.direct_cores_bytes);
  }

  bool node_ranks_exceed_cores() const {
    const unsigned cores = std::thread::hardware_concurrency();
    return cores > 0 && static_cast<unsigned>(size_) > cores;
  }

  std::unique_ptr<Communicator> mpi_;  // set-up, point-to-point, split
  CommOptions opts_;
  int rank_, size_;
  int64_t chunk_ = 0;
  int slots_ = 0;
  Algorithm algorithm_ = Algorithm::kAuto;
  std::vector<double> scratch_;          // chunk_ bytes: halving-doubling's partial sums
  std::vector<const void*> src_;         // the sources of a reduction (no allocation per step)
  std::vector<int64_t> offsets_;         // scratch for slice offsets (no allocation per operation)
  std::vector<const void*> shared_src_;  // the ranks' buffers in a shared all-reduce
  uint64_t chunk_seq_ = 0;  // chunks summed in shared all-reduces so far (kChunk counts on)
  // Successful alloc_shared calls so far: collective and agreed, so the same on every rank.
  std::atomic<int> shared_allocs_{0};
  std::atomic<int64_t> sent_{0};  // bytes_sent(): written only by the running operation
  MPI_Win win_ = MPI_WIN_NULL;
  void* base_ = nullptr;
  Counter* control_ = nullptr;
  Line* lines_ = nullptr;
  uint64_t known_done_ = 0;  // every rank's done counter was at least this when last read
  char* staging_ = nullptr;
  char* result_ = nullptr;
  bool oversubscribed_ = false;
  int long_waits_ = 0;      // recent waits that outlasted the spin (see backoff)
  int64_t inline_max_ = 0;  // shm.inline_bytes, at most kInlineBytes
  int64_t window_bytes_ = 0;
  bool direct_ = false;  // every rank may read its peers' memory (process_vm_readv)
  uint64_t step_ = 0;    // steps taken; identical on every rank between operations

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ShmWork>> queue_;
  bool running_ = false;
  bool stop_ = false;
  // Touched only by the running operation (one at a time, ordered by mu_).
  const OpDesc* current_ = nullptr;
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

const char* const kShmAlgorithmChoices =
    "\"auto\", \"one_shot\", \"direct\", \"ring\" or \"halving_doubling\"";

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

bool is_shm_algorithm(const std::string& name) {
  for (const char* a : detail::kAlgorithmNames)
    if (name == a) return true;
  return false;
}

}  // namespace kiln
