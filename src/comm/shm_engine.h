// The shared-memory engine's core: the window the ranks of one node share, the step discipline
// and the waiting policy. The algorithms (shm_algorithm.h, one file each) move data with it;
// the communicator (shm_communicator.cpp) runs them on its thread, one at a time.
//
// Window layout (rank 0 allocates it all, the others map it; every piece on its own cache lines,
// each part at a page boundary):
//   control[r]:   counters per rank: posted, reduced, done (the last step it reached), closing,
//                 and the address and process of a buffer peers read directly
//   lines[r][i]:  rank r's small-message line sets (32; 8 lines of tag + 56 bytes each)
//   staging[r][s]: rank r's staging slot s (chunk_bytes each, `slots` of them)
//   result[s]:    the reduced chunk of step s, each owner writing its part (direct all-reduce)
//   mail[a][b][i]: point-to-point descriptors from rank a to rank b (shm_p2p.h), kMailSlots each
//
// Every operation is a sequence of steps numbered identically on every rank (step_). A step uses
// slot step % slots (a small step: line set step % 32); before writing into it a rank waits
// until every rank is done with the step that used it last, so up to `slots` steps pipeline.
// Counters are stored with release and read with acquire, which orders the data written before a
// store with the reads after the load. Waiting for peers spins briefly, then yields, then sleeps.
//
// Everything an algorithm calls per step is defined here, inline, so that an algorithm in its
// own file compiles to the same loop as when it was a method of the one engine class.
#pragma once
#include <immintrin.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/op_desc.h"
#include "core/clock.h"

namespace kiln::detail::shm {

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

// A point-to-point message's descriptor (shm_p2p.h): the sender fills it and then stores its
// sequence number in `posted`; the receiver copies the data and stores it in `taken`, which
// completes the send and frees the descriptor. Up to kMailInline bytes travel in it.
constexpr int kMailSlots = 16;  // messages a rank may have posted to one peer and not yet taken
constexpr int64_t kMailInline = 80;
struct alignas(kLine) Mail {
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> taken;
  int32_t tag;
  uint32_t region;  // the sender's alloc_shared region holding the buffer (0: none)
  int64_t bytes;
  uint64_t addr;   // the buffer in the sender's process
  int64_t offset;  // its offset in `region`
  char data[kMailInline];
};
static_assert(sizeof(Mail) == kLine, "a descriptor is two cache lines");

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

class ShmEngine {
 public:
  // Allocates and maps the window over `mpi`'s ranks (collective); mpi must be an MPI-backend
  // communicator whose ranks all run on this node.
  ShmEngine(Communicator& mpi, const CommOptions& o);
  // Frees the window once every rank got here (see the .cpp); not while an exception unwinds.
  ~ShmEngine();
  ShmEngine(const ShmEngine&) = delete;
  ShmEngine& operator=(const ShmEngine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int64_t chunk() const { return chunk_; }  // bytes of a staging slot
  const CommOptions& options() const { return opts_; }
  int64_t inline_max() const { return inline_max_; }  // shm.inline_bytes, at most kInlineBytes
  // More ranks than cores: a waiting rank holds the core its peer needs, so it yields at once.
  bool oversubscribed() const { return oversubscribed_; }
  // Every rank may read its peers' memory (process_vm_readv) and shm.direct_bytes > 0.
  bool direct_ok() const { return direct_; }
  // Every rank may read its peers' memory, whatever shm.direct_bytes says.
  bool peers_readable() const { return readable_; }
  pid_t pid_of(int r) { return static_cast<pid_t>(counter(r, kPid).load()); }
  // The descriptor of message `seq` (1, 2, ...) from rank `from` to rank `to`.
  Mail& mail(int from, int to, uint64_t seq) {
    return mail_[(int64_t{from} * size_ + to) * kMailSlots +
                 static_cast<int64_t>(seq % kMailSlots)];
  }
  int64_t window_bytes() const { return window_bytes_; }
  int64_t bytes_sent() const { return sent_.load(std::memory_order_relaxed); }
  // Where the parts start (for the start-up report, KILN_SHM_DEBUG).
  const char* staging_base() const { return staging_; }
  const void* window_base() const { return base_; }

  // The operation running now (for error messages), set by the communicator around each one.
  void set_current(const OpDesc* d) { current_ = d; }
  std::string current_text() const {
    return current_ ? current_->text() : std::string("operation");
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
  void backoff(double waited) { pause(waited, !oversubscribed_ && long_waits_ < 8); }
  // The policy itself, for any waiter (point-to-point waits keep no history): `spin` whether a
  // short wait may spin at all.
  static void pause(double waited, bool spin) {
    if (spin && waited < kSpinSeconds) {
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

  [[noreturn]] void timed_out(Phase p, uint64_t g, int lo, int hi);

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

  // Every rank has reached it: one step with no data.
  void barrier() {
    const uint64_t g = ++step_;
    set(kPosted, g);
    wait_all(kPosted, g);
    set(kDone, g);
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
  // n elements of t fit the lines, and every rank's lines fit the scratch (a one-shot sum).
  bool inline_fits(int64_t n, DType t) const {
    return n * static_cast<int64_t>(dtype_bytes(t)) <= inline_max_ &&
           int64_t{size_} * kInlineBytes <= chunk_;
  }

  // ---- direct copies between processes

  // Copies `bytes` from address `from` in rank r's process into `to`; false if the kernel
  // refuses (no right to trace the peer).
  bool read_from(int r, void* to, uint64_t from, int64_t bytes, Counter* control = nullptr);
  // read_from, or an error naming the operation.
  void direct_read(int r, void* to, uint64_t from, int64_t bytes);

  // ---- scratch of the running operation (one runs at a time; nothing allocated per step)

  // Where each rank's slice starts (offset[r]) and the total (offset[size_]).
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
  static int64_t total(const std::vector<int64_t>& counts) {
    int64_t t = 0;
    for (auto c : counts) t += c;
    return t;
  }
  // Bytes written into the window for the peers (bytes_sent()); only the running operation adds.
  void sent(int64_t bytes) {
    sent_.store(sent_.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }

  std::vector<double> scratch;          // chunk bytes: halving-doubling's partial sums
  std::vector<const void*> src;         // the sources of a reduction
  std::vector<const void*> shared_src;  // the ranks' buffers in a shared all-reduce
  uint64_t chunk_seq = 0;  // chunks summed in shared all-reduces so far (kChunk counts on)

 private:
  Communicator& mpi_;  // set-up and freeing the window
  CommOptions opts_;
  int rank_, size_;
  int64_t chunk_ = 0;
  int slots_ = 0;
  std::vector<int64_t> offsets_;
  std::atomic<int64_t> sent_{0};
  MPI_Win win_ = MPI_WIN_NULL;
  void* base_ = nullptr;
  Counter* control_ = nullptr;
  Line* lines_ = nullptr;
  uint64_t known_done_ = 0;  // every rank's done counter was at least this when last read
  char* staging_ = nullptr;
  char* result_ = nullptr;
  Mail* mail_ = nullptr;
  bool readable_ = false;
  bool oversubscribed_ = false;
  int long_waits_ = 0;  // recent waits that outlasted the spin (see backoff)
  int64_t inline_max_ = 0;
  int64_t window_bytes_ = 0;
  bool direct_ = false;
  uint64_t step_ = 0;  // steps taken; identical on every rank between operations
  const OpDesc* current_ = nullptr;
};

}  // namespace kiln::detail::shm
