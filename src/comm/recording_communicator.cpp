#include "comm/recording_communicator.h"

#include <fmt/format.h>

#include <atomic>

#include "core/clock.h"
#include "obs/flight_recorder.h"
#include "obs/trace.h"

namespace kiln {

namespace {

class RecordedWork : public Work {
 public:
  RecordedWork(std::shared_ptr<Work> inner, uint64_t record, uint64_t seq, std::string name,
               std::string comm)
      : inner_(std::move(inner)),
        record_(record),
        seq_(seq),
        name_(std::move(name)),
        comm_(std::move(comm)),
        issued_(now_seconds()) {}
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
    FlightRecorder::instance().finished(record_, failed);
    if (Tracer::instance().enabled())
      Tracer::instance().complete(name_, "comm", issued_, now_seconds(),
                                  fmt::format(R"({{"comm":"{}","seq":{}}})", comm_, seq_));
  }
  std::shared_ptr<Work> inner_;
  uint64_t record_, seq_;
  std::string name_, comm_;
  double issued_;
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
    return record(fmt::format("all_reduce of {} elements", n),
                  [&] { return inner_->all_reduce_async(buf, n, t); });
  }
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out,
                                             const std::vector<int64_t>& counts, DType t) override {
    return record(fmt::format("reduce_scatter of {} elements", counts[inner_->rank()]),
                  [&] { return inner_->reduce_scatter_async(in, out, counts, t); });
  }
  std::shared_ptr<Work> all_gather_async(void* buf, const std::vector<int64_t>& counts,
                                         DType t) override {
    int64_t total = 0;
    for (auto c : counts) total += c;
    return record(fmt::format("all_gather of {} elements", total),
                  [&] { return inner_->all_gather_async(buf, counts, t); });
  }
  std::shared_ptr<Work> broadcast_async(void* buf, int64_t n, DType t, int root) override {
    return record(fmt::format("broadcast of {} elements from rank {}", n, root),
                  [&] { return inner_->broadcast_async(buf, n, t, root); });
  }
  std::shared_ptr<Work> send_async(const void* buf, int64_t n, DType t, int peer,
                                   int tag) override {
    return record(fmt::format("send of {} elements to rank {}", n, peer),
                  [&] { return inner_->send_async(buf, n, t, peer, tag); });
  }
  std::shared_ptr<Work> recv_async(void* buf, int64_t n, DType t, int peer, int tag) override {
    return record(fmt::format("receive of {} elements from rank {}", n, peer),
                  [&] { return inner_->recv_async(buf, n, t, peer, tag); });
  }
  std::shared_ptr<Work> barrier_async() override {
    return record("barrier", [&] { return inner_->barrier_async(); });
  }
  // The synchronous forms go to the backend's own (the engine runs them on the calling thread).
  void all_reduce(void* buf, int64_t n, DType t) override {
    record_sync(fmt::format("all_reduce of {} elements", n),
                [&] { inner_->all_reduce(buf, n, t); });
  }
  void reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts,
                      DType t) override {
    record_sync(fmt::format("reduce_scatter of {} elements", counts[inner_->rank()]),
                [&] { inner_->reduce_scatter(in, out, counts, t); });
  }
  void all_gather(void* buf, const std::vector<int64_t>& counts, DType t) override {
    int64_t total = 0;
    for (auto c : counts) total += c;
    record_sync(fmt::format("all_gather of {} elements", total),
                [&] { inner_->all_gather(buf, counts, t); });
  }
  void broadcast(void* buf, int64_t n, DType t, int root) override {
    record_sync(fmt::format("broadcast of {} elements from rank {}", n, root),
                [&] { inner_->broadcast(buf, n, t, root); });
  }
  void barrier() override {
    record_sync("barrier", [&] { inner_->barrier(); });
  }
  int64_t buffer_bytes() const override { return inner_->buffer_bytes(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<RecordingCommunicator>(inner_->split(color, key),
                                                   fmt::format("{}/{}", name_, color));
  }

 private:
  template <typename F>
  std::shared_ptr<Work> record(std::string op, F&& start) {
    FlightRecorder& fr = FlightRecorder::instance();
    const uint64_t seq = ++seq_;
    const uint64_t id = fr.issued(name_, seq, op);
    fr.started(id);  // the backend may run it at once; its progress is not visible from here
    std::shared_ptr<Work> w;
    try {
      w = start();
    } catch (...) {
      fr.finished(id, true);
      throw;
    }
    return std::make_shared<RecordedWork>(std::move(w), id, seq, std::move(op), name_);
  }

  template <typename F>
  void record_sync(const std::string& op, F&& run) {
    FlightRecorder& fr = FlightRecorder::instance();
    const uint64_t seq = ++seq_;
    const uint64_t id = fr.issued(name_, seq, op);
    fr.started(id);
    const double t0 = now_seconds();
    try {
      run();
    } catch (...) {
      fr.finished(id, true);
      throw;
    }
    fr.finished(id, false);
    if (Tracer::instance().enabled())
      Tracer::instance().complete(op, "comm", t0, now_seconds(),
                                  fmt::format(R"({{"comm":"{}","seq":{}}})", name_, seq));
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
