#include "comm/recording_communicator.h"

#include <fmt/format.h>

#include <atomic>

#include "comm/comm_observer.h"
#include "comm/op_desc.h"
#include "core/clock.h"

namespace kiln {

namespace {

class RecordedWork : public Work {
 public:
  RecordedWork(std::shared_ptr<Work> inner, uint64_t record, uint64_t seq, const OpDesc& op,
               const std::string& comm)
      : inner_(std::move(inner)), record_(record), seq_(seq) {
    if (comm_observer().tracing()) {  // the span's text is only needed for the trace
      name_ = op.text();
      comm_ = comm;
      issued_ = now_seconds();
    }
  }
  ~RecordedWork() override {
    // Dropped without a wait (it finished or the job is ending): leave no pending record.
    finish(false);
  }
  void wait() override {
    try {
      inner_->wait();
    } catch (...) {
      finish(true);
      throw;
    }
    finish(false);
  }
  bool test() override {
    bool done = inner_->test();
    if (done) finish(false);
    return done;
  }

 private:
  void finish(bool failed) {
    if (done_.exchange(true)) return;
    comm_observer().finished(record_, failed);
    if (issued_ >= 0) comm_observer().span(name_, issued_, now_seconds(), comm_, seq_);
  }
  std::shared_ptr<Work> inner_;
  uint64_t record_, seq_;
  std::string name_, comm_;
  double issued_ = -1;  // -1: not traced
  std::atomic<bool> done_{false};
};

class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, std::string name)
      : inner_(std::move(inner)), name_(std::move(name)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }

  std::shared_ptr<Work> all_reduce_async(void* buf, int64_t n, DType t) override {
    return record(OpDesc{"all_reduce", n}, [&] { return inner_->all_reduce_async(buf, n, t); });
  }
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out,
                                             const std::vector<int64_t>& counts, DType t) override {
    return record(OpDesc{"reduce_scatter", counts[inner_->rank()]},
                  [&] { return inner_->reduce_scatter_async(in, out, counts, t); });
  }
  std::shared_ptr<Work> all_gather_async(void* buf, const std::vector<int64_t>& counts,
                                         DType t) override {
    int64_t total = 0;
    for (auto c : counts) total += c;
    return record(OpDesc{"all_gather", total},
                  [&] { return inner_->all_gather_async(buf, counts, t); });
  }
  std::shared_ptr<Work> broadcast_async(void* buf, int64_t n, DType t, int root) override {
    return record(OpDesc{"broadcast", n, "from rank", root},
                  [&] { return inner_->broadcast_async(buf, n, t, root); });
  }
  std::shared_ptr<Work> send_async(const void* buf, int64_t n, DType t, int peer,
                                   int tag) override {
    return record(OpDesc{"send", n, "to rank", peer},
                  [&] { return inner_->send_async(buf, n, t, peer, tag); });
  }
  std::shared_ptr<Work> recv_async(void* buf, int64_t n, DType t, int peer, int tag) override {
    return record(OpDesc{"receive", n, "from rank", peer},
                  [&] { return inner_->recv_async(buf, n, t, peer, tag); });
  }
  std::shared_ptr<Work> barrier_async() override {
    return record(OpDesc{"barrier", -1}, [&] { return inner_->barrier_async(); });
  }
  // The synchronous forms go to the backend's own (the engine runs them on the calling thread).
  void all_reduce(void* buf, int64_t n, DType t) override {
    record_sync(OpDesc{"all_reduce", n}, [&] { inner_->all_reduce(buf, n, t); });
  }
  void reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts,
                      DType t) override {
    record_sync(OpDesc{"reduce_scatter", counts[inner_->rank()]},
                [&] { inner_->reduce_scatter(in, out, counts, t); });
  }
  void all_gather(void* buf, const std::vector<int64_t>& counts, DType t) override {
    int64_t total = 0;
    for (auto c : counts) total += c;
    record_sync(OpDesc{"all_gather", total}, [&] { inner_->all_gather(buf, counts, t); });
  }
  void broadcast(void* buf, int64_t n, DType t, int root) override {
    record_sync(OpDesc{"broadcast", n, "from rank", root},
                [&] { inner_->broadcast(buf, n, t, root); });
  }
  void barrier() override {
    record_sync(OpDesc{"barrier", -1}, [&] { inner_->barrier(); });
  }
  std::unique_ptr<SharedMemory> alloc_shared(int64_t bytes) override {
    return inner_->alloc_shared(bytes);
  }
  bool shares_memory() const override { return inner_->shares_memory(); }
  int64_t buffer_bytes() const override { return inner_->buffer_bytes(); }
  int64_t bytes_sent() const override { return inner_->bytes_sent(); }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return std::make_unique<RecordingCommunicator>(
        inner_->split(color, key, name),
        fmt::format("{}/{}", name_, name.empty() ? std::to_string(color) : name));
  }

 private:
  template <typename F>
  std::shared_ptr<Work> record(const OpDesc& op, F&& start) {
    CommObserver& fr = comm_observer();
    const uint64_t seq = ++seq_;
    // Started at once: the backend may run it now; its progress is not visible from here.
    const uint64_t id = fr.issued(name_, seq, op, /*running=*/true);
    std::shared_ptr<Work> w;
    try {
      w = start();
    } catch (...) {
      fr.finished(id, true);
      throw;
    }
    return std::make_shared<RecordedWork>(std::move(w), id, seq, op, name_);
  }

  template <typename F>
  void record_sync(const OpDesc& op, F&& run) {
    CommObserver& fr = comm_observer();
    const uint64_t seq = ++seq_;
    const uint64_t id = fr.issued(name_, seq, op, /*running=*/true);
    const double t0 = fr.tracing() ? now_seconds() : 0;
    try {
      run();
    } catch (...) {
      fr.finished(id, true);
      throw;
    }
    fr.finished(id, false);
    if (t0 > 0) fr.span(op.text(), t0, now_seconds(), name_, seq);
  }

  std::unique_ptr<Communicator> inner_;
  std::string name_;
  uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> with_flight_recorder(std::unique_ptr<Communicator> inner,
                                                   std::string name) {
  return std::make_unique<RecordingCommunicator>(std::move(inner), std::move(name));
}

}  // namespace kiln
