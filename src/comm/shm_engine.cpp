// The shared-memory engine's core (shm_engine.h): the window's allocation and freeing, and the
// slow paths of waiting and direct copies.
#include "comm/shm_engine.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "comm/mpi_internal.h"
#include "core/error.h"

namespace kiln::detail::shm {

namespace {
bool node_ranks_exceed_cores(int size) {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 && static_cast<unsigned>(size) > cores;
}
}  // namespace

ShmEngine::ShmEngine(Communicator& mpi, const CommOptions& o)
    : mpi_(mpi), opts_(o), rank_(mpi.rank()), size_(mpi.size()) {
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
  scratch.resize(chunk_ / sizeof(double));
  src.resize(size_);
  // MPI's window starts a few bytes into a page (osc/sm puts a header first), so the parts are
  // placed at page boundaries past it: with the staging 8 bytes off a cache line every vector
  // store split across two lines (and some across two pages), and in about half of all
  // launches three of the four slots took 4-5x longer to fill (docs/performance.md).
  const int64_t control = align_page(int64_t{size_} * kPhases * kLine);
  const int64_t lines = align_page(int64_t{size_} * kInlineSlots * kInlineLines * sizeof(Line));
  const int64_t staging = int64_t{size_} * slots_ * chunk_;
  const int64_t result = int64_t{slots_} * chunk_;
  const int64_t mail = align_page(int64_t{size_} * size_ * kMailSlots * kLine);
  const int64_t total = control + lines + staging + result + mail + kPage;
  window_bytes_ = total;
  run_on_mpi_thread(mpi_, "allocation of the shared-memory window", [&](MPI_Comm comm) {
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
      auto* m =
          reinterpret_cast<Mail*>(static_cast<char*>(base_) + control + lines + staging + result);
      for (int64_t i = 0; i < int64_t{size_} * size_ * kMailSlots; i++) {
        new (&m[i].posted) std::atomic<uint64_t>(0);
        new (&m[i].taken) std::atomic<uint64_t>(0);
      }
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
    readable_ = all_ok == 1;
    direct_ = readable_ && o.shm.direct_bytes > 0;
    return rc;
  });
  control_ = static_cast<Counter*>(base_);
  lines_ = reinterpret_cast<Line*>(static_cast<char*>(base_) + control);
  staging_ = static_cast<char*>(base_) + control + lines;
  result_ = staging_ + staging;
  mail_ = reinterpret_cast<Mail*>(result_ + result);
  oversubscribed_ = node_ranks_exceed_cores(size_);
  // What this launch decided at start-up (issue 15, item 8: is a launch's speed decided here?).
  if (std::getenv("KILN_SHM_DEBUG"))
    std::fprintf(stderr,
                 "shm: rank %d of %d: window %p (page offset %lld), staging %p (offset in 64 KiB "
                 "%lld), %d slots of %lld bytes, cores %u, oversubscribed %d, direct copies %d\n",
                 rank_, size_, base_,
                 static_cast<long long>(reinterpret_cast<int64_t>(base_) % 4096),
                 static_cast<void*>(staging_),
                 static_cast<long long>(reinterpret_cast<int64_t>(staging_) % 65536), slots_,
                 static_cast<long long>(chunk_), std::thread::hardware_concurrency(),
                 oversubscribed_ ? 1 : 0, direct_ ? 1 : 0);
}

// MPI_Win_free is collective: free only when every rank got here (a rank that died or hangs
// would otherwise hang this one too); otherwise the window stays until the process ends.
// While an exception unwinds (this rank failed; the job is about to be aborted) do not wait.
ShmEngine::~ShmEngine() {
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
    run_on_mpi_thread(mpi_, "freeing the shared-memory window",
                      [this](MPI_Comm) { return MPI_Win_free(&win_); });
  } catch (const Error&) {
    // Nothing more to do at shutdown.
  }
}

void ShmEngine::timed_out(Phase p, uint64_t g, int lo, int hi) {
  std::string missing;
  for (int q = lo; q < hi; q++)
    if (counter(q, p).load(std::memory_order_acquire) < g)
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", q);
  fail(
      "rank {}: {} (step {}) timed out after {:.0f} s waiting for rank(s) {} (a peer may have "
      "died or be stuck)",
      rank_, current_text(), g, opts_.timeout_seconds, missing);
}

bool ShmEngine::read_from(int r, void* to, uint64_t from, int64_t bytes, Counter* control) {
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

void ShmEngine::direct_read(int r, void* to, uint64_t from, int64_t bytes) {
  if (!read_from(r, to, from, bytes))
    fail("rank {}: {}: cannot read rank {}'s buffer directly: {}", rank_, current_text(), r,
         std::strerror(errno));
}

}  // namespace kiln::detail::shm
