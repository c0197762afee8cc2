#include "comm/comm_bench.h"

#include "core/buffer.h"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>

#include "comm/mpi_internal.h"
#include "core/clock.h"
#include "core/error.h"

namespace kiln {
namespace {

// Rank r's value at i: small integers and halves, so sums are exact in fp32 and bf16.
float value(int r, int64_t i) {
  return static_cast<float>(((r + 1) * 7 + i * 3) % 11) * 0.5f - 2.0f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double max_over_ranks(double x) {
  double y = 0;
  MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return y;
}

// A typed view of raw storage: element i as float, and setting it.
struct Elems {
  void* p;
  DType t;
  float get(int64_t i) const {
    return t == DType::BF16 ? bf16_to_float(static_cast<const uint16_t*>(p)[i])
                            : static_cast<const float*>(p)[i];
  }
  void set(int64_t i, float v) const {
    if (t == DType::BF16)
      static_cast<uint16_t*>(p)[i] = float_to_bf16(v);
    else
      static_cast<float*>(p)[i] = v;
  }
};

// Times the implementations of one operation (each run on every rank), alternating them in
// every repetition so that all see the same load: the median over repetitions of the slowest
// rank's mean time per operation.
std::vector<double> time_ops(const CommBenchOptions& o,
                             const std::vector<std::function<void()>>& op) {
  const size_t K = op.size();
  std::vector<int64_t> iters(K);
  for (size_t k = 0; k < K; k++) {
    op[k]();  // warm-up: first touch of the pages, connection set-up
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_seconds();
    op[k]();
    const double once = max_over_ranks(now_seconds() - t0);
    iters[k] = std::clamp<int64_t>(static_cast<int64_t>(o.rep_seconds / once), 1, 20000);
  }
  std::vector<std::vector<double>> reps(K);
  for (int r = 0; r < o.reps; r++) {
    for (size_t k = 0; k < K; k++) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now_seconds();
      for (int64_t i = 0; i < iters[k]; i++) op[k]();
      reps[k].push_back(max_over_ranks((now_seconds() - t0) / iters[k]));
    }
  }
  std::vector<double> med;
  for (auto& v : reps) med.push_back(median(v));
  return med;
}

}  // namespace

// The bench's buffers: ordinary memory, or the engine's shared memory (alloc_shared).
class Words {
 public:
  Words(int64_t n, Communicator* shared) : n_(n) {
    if (shared)
      mem_ = shared->alloc_shared(n * 8);
    else
      plain_.resize(n);
  }
  uint64_t* data() { return mem_ ? static_cast<uint64_t*>(mem_->data()) : plain_.data(); }
  int64_t size() const { return n_; }

 private:
  int64_t n_;
  std::unique_ptr<SharedMemory> mem_;
  Buffer<uint64_t> plain_;
};

double concurrent_stream_rate() {
  const int64_t n = 16 << 20;  // 64 MiB of floats in each array, past the 32 MiB L3
  Buffer<float> a(n), b(n);
  for (int64_t i = 0; i < n; i++) b[i] = 1.0f;
  std::vector<double> times;
  for (int r = 0; r < 6; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_seconds();
    float* __restrict x = a.data();
    const float* __restrict y = b.data();
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
    const double t = max_over_ranks(now_seconds() - t0);
    if (r > 0) times.push_back(t);
  }
  return 3.0 * n * sizeof(float) / median(times);  // read a and b, write a
}

double shm_barrier_seconds() {
  CommOptions o;
  o.backend = "shm";
  auto c = make_world_communicator(o);
  std::vector<double> times;
  for (int r = 0; r < 6; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_seconds();
    for (int i = 0; i < 2000; i++) c->barrier();
    const double t = max_over_ranks((now_seconds() - t0) / 2000);
    if (r > 0) times.push_back(t);  // the first warms up
  }
  return median(times);
}

// Per rank and byte of the buffer, the bytes the algorithm reads and writes in memory that is
// not cache-resident; a written line not read before is read too, for ownership.
double memory_traffic(const std::string& op, int ranks, bool shared) {
  const double P = ranks;
  if (op == "reduce_scatter") return 1 + 2 / P;           // read n, write n/P (+ RFO)
  if (op == "allgather") return 1 / P + 2 * (P - 1) / P;  // read n/P, write the rest (+ RFO)
  if (op == "broadcast") return 2;                        // a non-root writes n (+ RFO)
  if (op == "sendrecv") return 3;  // the receiver reads the sender's n and writes n (+ RFO)
  // All-reduce in place. Staged: read n, write n (the slots stay in cache). In place from the
  // peers' buffers: own slice read and written, the peers' pieces of it read, the other slices
  // read from their owners and written here (+ RFO): (2 + 4(P-1)) / P.
  return shared ? (2 + 4 * (P - 1)) / P : 2;
}

double bus_factor(const std::string& op, int ranks) {
  const double n = ranks;
  if (op == "allreduce") return 2 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "allgather") return (n - 1) / n;
  return 1.0;  // broadcast
}

std::vector<CommBenchRow> run_comm_bench(const CommBenchOptions& o) {
  if (o.op != "allreduce" && o.op != "reduce_scatter" && o.op != "allgather" &&
      o.op != "broadcast" && o.op != "sendrecv")
    fail("--op {}: expected allreduce, reduce_scatter, allgather, broadcast or sendrecv", o.op);
  if (o.dtype == DType::F64) fail("bench comm: the dtype must be float or bf16");
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes)
    fail("bench comm: need 1 <= --min <= --max (got {} and {})", o.min_bytes, o.max_bytes);
  std::vector<std::unique_ptr<Communicator>> engines;
  for (const std::string& a :
       o.algorithms.empty() ? std::vector<std::string>{o.engine.algorithm} : o.algorithms) {
    CommOptions e = o.engine;
    e.algorithm = a;
    engines.push_back(make_world_communicator(e));
  }
  const int E = static_cast<int>(engines.size());
  // --shared: the buffers come from the "auto" engine if there is one (only auto reads shared
  // buffers in place; the registry lets the others see them as ordinary memory).
  Communicator* shared_by = engines[0].get();
  for (int k = 0; k < E; k++)
    if ((o.algorithms.empty() ? o.engine.algorithm : o.algorithms[k]) == "auto")
      shared_by = engines[k].get();
  const int R = engines[0]->size(), me = engines[0]->rank();
  const int64_t es = static_cast<int64_t>(dtype_bytes(o.dtype));
  const MPI_Datatype mt = detail::mpi_type(o.dtype);
  const bool sliced = o.op == "reduce_scatter" || o.op == "allgather";
  const bool p2p = o.op == "sendrecv";  // to the next rank, from the previous (nccl-tests')
  const int next = (me + 1) % R, prev = (me + R - 1) % R;
  std::vector<CommBenchRow> rows;
  int64_t last = 0;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    int64_t count = std::max<int64_t>(1, bytes / es);
    if (sliced) count = std::max<int64_t>(R, count / R * R);
    if (count == last) continue;
    last = count;
    const int64_t slice = count / R;
    // 64-byte aligned, as the trainer's gradient buffers are; both sides get the same buffers.
    const int64_t a_words = (count * es + 7) / 8, b_words = sliced ? (slice * es + 7) / 8
                                                            : p2p  ? a_words
                                                                   : 1;
    Words a(a_words, o.shared ? shared_by : nullptr), b(b_words, o.shared ? shared_by : nullptr);
    Elems x{a.data(), o.dtype}, y{b.data(), o.dtype};
    std::vector<int64_t> counts(R, slice);
    // ops[0..E): the engines; ops[E]: MPI.
    std::vector<std::function<void()>> ops(E + 1);
    for (int k = 0; k < E; k++) {
      Communicator* engine = engines[k].get();
      if (o.op == "allreduce")
        ops[k] = [&, engine] { engine->all_reduce(a.data(), count, o.dtype); };
      else if (o.op == "reduce_scatter")
        ops[k] = [&, engine] { engine->reduce_scatter(a.data(), b.data(), counts, o.dtype); };
      else if (o.op == "allgather")
        ops[k] = [&, engine] { engine->all_gather(a.data(), counts, o.dtype); };
      else if (p2p)
        ops[k] = [&, engine] {
          auto s = engine->send_async(a.data(), count, o.dtype, next, 0);
          engine->recv(b.data(), count, o.dtype, prev, 0);
          s->wait();
        };
      else
        ops[k] = [&, engine] { engine->broadcast(a.data(), count, o.dtype, 0); };
    }
    if (o.op == "allreduce") {
      ops[E] = [&] {
        MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(count), mt, detail::sum_op(o.dtype),
                      MPI_COMM_WORLD);
      };
    } else if (o.op == "reduce_scatter") {
      ops[E] = [&] {
        MPI_Reduce_scatter_block(a.data(), b.data(), static_cast<int>(slice), mt,
                                 detail::sum_op(o.dtype), MPI_COMM_WORLD);
      };
    } else if (o.op == "allgather") {
      ops[E] = [&] {
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a.data(), static_cast<int>(slice), mt,
                      MPI_COMM_WORLD);
      };
    } else if (p2p) {
      ops[E] = [&] {
        MPI_Sendrecv(a.data(), static_cast<int>(count), mt, next, 0, b.data(),
                     static_cast<int>(count), mt, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      };
    } else {
      ops[E] = [&] { MPI_Bcast(a.data(), static_cast<int>(count), mt, 0, MPI_COMM_WORLD); };
    }
    CommBenchRow row;
    row.bytes = count * es;
    row.count = count;
    std::memset(a.data(), 0, a.size() * 8);
    const std::vector<double> t = time_ops(o, ops);
    row.engine.resize(E);
    for (int k = 0; k < E; k++) row.engine[k].seconds = t[k];
    row.mpi.seconds = t[E];
    for (int impl = 0; impl <= E; impl++) {
      CommBenchTiming& tm = impl < E ? row.engine[impl] : row.mpi;
      // One checked run on known values.
      for (int64_t i = 0; i < count; i++) {
        const bool mine = sliced ? i / slice == me : true;
        x.set(i, o.op == "broadcast"   ? (me == 0 ? value(0, i) : 0.0f)
                 : o.op == "allgather" ? (mine ? value(me, i) : -1.0f)
                                       : value(me, i));
        if (p2p) y.set(i, -1.0f);
      }
      ops[impl]();
      int64_t wrong = 0;
      auto expect = [&](int64_t i) {
        if (o.op == "broadcast") return value(0, i);
        if (o.op == "allgather") return value(static_cast<int>(i / slice), i);
        float s = 0;
        for (int r = 0; r < R; r++) s += value(r, i);
        return s;
      };
      if (p2p) {
        for (int64_t i = 0; i < count; i++) wrong += y.get(i) != value(prev, i);
      } else if (o.op == "reduce_scatter") {
        for (int64_t i = 0; i < slice; i++) wrong += y.get(i) != expect(me * slice + i);
      } else {
        for (int64_t i = 0; i < count; i++) wrong += x.get(i) != expect(i);
      }
      MPI_Allreduce(&wrong, &tm.wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace kiln
