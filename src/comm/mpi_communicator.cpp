// The MPI backend: one communication thread per communicator runs the operations in issue order
// as MPI nonblocking calls and polls them, spinning briefly and then sleeping, so it never takes
// a core away from the compute threads for long. Collectives run one at a time; a send or a
// receive is started in its turn and then completes in the background (polled with whatever
// runs next), so two ranks that each send before they receive never wait on each other: a
// pipeline schedule's exchanges issue in any order.
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/comm_observer.h"
#include "comm/communicator.h"
#include "comm/completion_work.h"
#include "comm/mpi_internal.h"
#include "comm/recording_communicator.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/job.h"

namespace kiln {
namespace detail {
namespace {

MPI_Datatype g_bf16 = MPI_DATATYPE_NULL;
MPI_Op g_bf16_sum = MPI_OP_NULL;

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; i++) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

}  // namespace

void ensure_mpi() {
  static std::once_flag once;
  std::call_once(once, [] {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (provided < MPI_THREAD_SERIALIZED)
        fail("this MPI library gives thread level {}; kiln needs MPI_THREAD_SERIALIZED", provided);
    }
    MPI_Type_contiguous(2, MPI_BYTE, &g_bf16);
    MPI_Type_commit(&g_bf16);
    MPI_Op_create(&bf16_sum, 1, &g_bf16_sum);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    // abort_job (core/job.h) ends every rank through MPI from now on.
    set_job_abort([](int code) {
      int inited = 0, finalized = 0;
      MPI_Initialized(&inited);
      MPI_Finalized(&finalized);
      if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
    });
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  });
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::BF16:
      return g_bf16;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op sum_op(DType t) {
  return t == DType::BF16 ? g_bf16_sum : MPI_SUM;
}

namespace {

int as_int(int64_t n) {
  KILN_CHECK(n >= 0 && n <= INT32_MAX);
  return static_cast<int>(n);
}

using OpState = CompletionWork;

struct Op {
  uint64_t record = 0;  // its id in the flight recorder
  uint64_t seq = 0;     // its sequence number on this communicator
  std::string name;
  std::function<int(MPI_Request*)> start;  // returns an MPI error code
  std::shared_ptr<OpState> state;
  bool p2p = false;  // a send or a receive: started in turn, completed in the background
};

// A started send or receive, polled until it completes.
struct InFlight {
  Op op;
  MPI_Request req = MPI_REQUEST_NULL;
  double t0 = 0, deadline = 0;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const CommOptions& o, bool owns, std::string name)
      : comm_(comm), opts_(o), owns_(owns), name_(std::move(name)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    thread_ = std::thread([this] {
      comm_observer().name_thread("comm " + name_);
      loop();
    });
  }
  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (owns_ && !broken_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce_async(void* buf, int64_t n, DType t) override {
    int count = as_int(n);
    return issue(fmt::format("all_reduce of {} elements", n), [=, this](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, buf, count, mpi_type(t), sum_op(t), comm_, r);
    });
  }
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out,
                                             const std::vector<int64_t>& counts, DType t) override {
    KILN_CHECK(static_cast<int>(counts.size()) == size_);
    auto c = std::make_shared<std::vector<int>>();
    for (auto x : counts) c->push_back(as_int(x));
    return issue(fmt::format("reduce_scatter of {} elements", counts[rank_]),
                 [=, this](MPI_Request* r) {
                   return MPI_Ireduce_scatter(in, out, c->data(), mpi_type(t), sum_op(t), comm_, r);
                 });
  }
  std::shared_ptr<Work> all_gather_async(void* buf, const std::vector<int64_t>& counts,
                                         DType t) override {
    KILN_CHECK(static_cast<int>(counts.size()) == size_);
    auto c = std::make_shared<std::vector<int>>(), d = std::make_shared<std::vector<int>>();
    int64_t off = 0;
    for (auto x : counts) {
      c->push_back(as_int(x));
      d->push_back(as_int(off));
      off += x;
    }
    return issue(fmt::format("all_gather of {} elements", off), [=, this](MPI_Request* r) {
      return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c->data(), d->data(),
                             mpi_type(t), comm_, r);
    });
  }
  std::shared_ptr<Work> broadcast_async(void* buf, int64_t n, DType t, int root) override {
    int count = as_int(n);
    return issue(
        fmt::format("broadcast of {} elements from rank {}", n, root),
        [=, this](MPI_Request* r) { return MPI_Ibcast(buf, count, mpi_type(t), root, comm_, r); });
  }
  std::shared_ptr<Work> send_async(const void* buf, int64_t n, DType t, int peer,
                                   int tag) override {
    int count = as_int(n);
    return issue(
        fmt::format("send of {} elements to rank {}", n, peer),
        [=, this](MPI_Request* r) {
          return MPI_Isend(buf, count, mpi_type(t), peer, tag, comm_, r);
        },
        /*p2p=*/true);
  }
  std::shared_ptr<Work> recv_async(void* buf, int64_t n, DType t, int peer, int tag) override {
    int count = as_int(n);
    return issue(
        fmt::format("receive of {} elements from rank {}", n, peer),
        [=, this](MPI_Request* r) {
          return MPI_Irecv(buf, count, mpi_type(t), peer, tag, comm_, r);
        },
        /*p2p=*/true);
  }
  std::shared_ptr<Work> barrier_async() override {
    return issue("barrier", [this](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  }
  // Runs an MPI call that completes by itself on the communication thread, in issue order.
  void run_blocking(const std::string& what, const std::function<int(MPI_Comm)>& f) {
    auto w = issue(what, [&, this](MPI_Request* r) {
      *r = MPI_REQUEST_NULL;
      return f(comm_);
    });
    w->wait();
  }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    // Collective: runs on the communication thread like everything else.
    MPI_Comm out = MPI_COMM_NULL;
    auto w = issue("split", [&, this](MPI_Request* r) {
      *r = MPI_REQUEST_NULL;
      return MPI_Comm_split(comm_, color, key, &out);
    });
    w->wait();
    return std::make_unique<MpiCommunicator>(
        out, opts_, true, fmt::format("{}/{}", name_, name.empty() ? std::to_string(color) : name));
  }

 private:
  std::shared_ptr<Work> issue(std::string name, std::function<int(MPI_Request*)> start,
                              bool p2p = false) {
    auto st = std::make_shared<OpState>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Issue order is the same on every rank, so the sequence number names the collective.
      const uint64_t seq = ++seq_;
      uint64_t rec = comm_observer().issued(name_, seq, name, /*running=*/false);
      queue_.push_back({rec, seq, std::move(name), std::move(start), st, p2p});
    }
    cv_.notify_all();
    return st;
  }

  void loop() {
    for (int idle = 0;; idle++) {
      Op op;
      bool have = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        auto woken = [&] { return stop_ || !queue_.empty(); };
        if (in_flight_.empty())
          cv_.wait(lock, woken);
        else  // sends and receives to poll: look again soon
          cv_.wait_for(lock, std::chrono::microseconds(idle > 2000 ? 500 : 50), woken);
        if (!queue_.empty()) {
          op = std::move(queue_.front());
          queue_.pop_front();
          have = true;
        } else if (stop_) {
          abandon_in_flight();
          return;
        }
      }
      poll_in_flight();
      if (!have) continue;
      idle = 0;
      CommObserver& watch = comm_observer();
      watch.started(op.record);
      const double t0 = now_seconds();
      if (op.p2p) {
        start_p2p(std::move(op), t0);
        continue;
      }
      std::string err = run(op);
      done(op, t0, std::move(err));
    }
  }

  void done(Op& op, double t0, std::string err) {
    CommObserver& watch = comm_observer();
    watch.finished(op.record, !err.empty());
    if (watch.tracing()) watch.span(op.name, t0, now_seconds(), name_, op.seq);
    op.state->finish(std::move(err));
  }

  void start_p2p(Op op, double t0) {
    if (broken_) {
      std::string err = fmt::format("rank {}: {} not run: an earlier operation failed ({})", rank_,
                                    op.name, broken_reason_);
      return done(op, t0, std::move(err));
    }
    InFlight f{std::move(op), MPI_REQUEST_NULL, t0, t0 + opts_.timeout_seconds};
    int rc = f.op.start(&f.req);
    if (rc != MPI_SUCCESS) return done(f.op, t0, mark_broken(f.op, "MPI error " + mpi_error(rc)));
    in_flight_.push_back(std::move(f));
  }

  // Completes the sends and receives that have finished (or failed, or timed out).
  void poll_in_flight() {
    for (size_t i = 0; i < in_flight_.size();) {
      InFlight& f = in_flight_[i];
      int flag = 0;
      int rc = MPI_Test(&f.req, &flag, MPI_STATUS_IGNORE);
      std::string err;
      if (rc != MPI_SUCCESS)
        err = mark_broken(f.op, "MPI error " + mpi_error(rc));
      else if (!flag && now_seconds() > f.deadline)
        err = mark_broken(f.op, fmt::format("timed out after {:.0f} s (a peer may have died or "
                                            "be stuck)",
                                            opts_.timeout_seconds));
      else if (!flag) {
        i++;
        continue;
      }
      done(f.op, f.t0, std::move(err));
      in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // The communicator goes away with sends or receives unfinished (an error path: the caller
  // stopped waiting for them): they fail, and their requests are let go.
  void abandon_in_flight() {
    for (auto& f : in_flight_) {
      MPI_Request_free(&f.req);
      done(f.op, f.t0,
           fmt::format("rank {}: {} abandoned: the communicator was destroyed", rank_, f.op.name));
    }
    in_flight_.clear();
  }

  std::string run(Op& op) {
    if (broken_)
      return fmt::format("rank {}: {} not run: an earlier operation failed ({})", rank_, op.name,
                         broken_reason_);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = op.start(&req);
    if (rc != MPI_SUCCESS) return mark_broken(op, "MPI error " + mpi_error(rc));
    const double deadline = now_seconds() + opts_.timeout_seconds;
    for (int spins = 0;; spins++) {
      int flag = 0;
      rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mark_broken(op, "MPI error " + mpi_error(rc));
      if (flag) return "";
      poll_in_flight();
      if (now_seconds() > deadline)
        return mark_broken(op, fmt::format("timed out after {:.0f} s (a peer may have died or "
                                           "be stuck)",
                                           opts_.timeout_seconds));
      // Spin briefly, then sleep: the two cores belong to the compute threads.
      if (spins > 64)
        std::this_thread::sleep_for(std::chrono::microseconds(spins > 2000 ? 500 : 50));
    }
  }

  std::string mark_broken(const Op& op, const std::string& why) {
    broken_ = true;
    broken_reason_ = fmt::format("{} {}", op.name, why);
    return fmt::format("rank {}: {} {}", rank_, op.name, why);
  }

  static std::string mpi_error(int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return std::string(msg, len);
  }

  MPI_Comm comm_;
  CommOptions opts_;
  bool owns_;
  std::string name_;
  uint64_t seq_ = 0;  // operations issued (guarded by mu_)
  int rank_ = 0, size_ = 1;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  std::vector<InFlight> in_flight_;  // the communication thread's own
  bool stop_ = false;
  bool broken_ = false;
  std::string broken_reason_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const CommOptions& o, bool owns,
                                                    const std::string& name) {
  return std::make_unique<MpiCommunicator>(comm, o, owns, name);
}

void run_on_mpi_thread(Communicator& c, const std::string& what,
                       const std::function<int(MPI_Comm)>& f) {
  auto* m = dynamic_cast<MpiCommunicator*>(&c);
  KILN_CHECK(m != nullptr);
  m->run_blocking(what, f);
}

}  // namespace detail

std::unique_ptr<Communicator> make_world_communicator(const CommOptions& o) {
  if (!launched_by_mpi()) return make_self_communicator();
  detail::ensure_mpi();
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  if (o.backend == "mpi") return detail::make_mpi_communicator(dup, o, true, "world");
  // The engine's operations are recorded by a wrapper; the MPI communicator under it records its
  // own (set-up, the inter-node stage) under another name, so sequence numbers never mix.
  auto mpi = detail::make_mpi_communicator(dup, o, true, "mpi");
  return with_flight_recorder(detail::make_node_communicator(std::move(mpi), o), "world");
}

}  // namespace kiln
