#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cli/commands.h"
#include "comm/comm_bench.h"
#include "comm/communicator.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file.h"
#include "core/job.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "kernels/matmul.h"
#include "launch/launcher.h"
#include "train/config.h"
#include "train/peak.h"
#include "train/trainer.h"

namespace kiln::cli {
namespace {

// The process's peak resident set so far, in bytes.
int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct BenchTrainOpts {
  std::string config;
  std::vector<std::string> sets;
  int steps = 11;
  bool json = false;
  int ranks = 1;
};

// `-n N`: the same benchmark as N data-parallel ranks under mpirun, one share of the cores each.
[[noreturn]] void rerun_under_mpirun(const BenchTrainOpts& o) {
  const std::string exe = self_executable();
  if (exe.empty()) fail("bench: cannot find the kiln executable");
  std::vector<std::string> cmd = mpirun_prefix(o.ranks);
  cmd.insert(cmd.end(),
             {exe, "bench", "train", "--config", o.config, "--steps", std::to_string(o.steps)});
  // train.threads = 0 (the default) already shares the cores out among a machine's ranks.
  for (const auto& s : o.sets) cmd.insert(cmd.end(), {"--set", s});
  if (o.json) cmd.push_back("--json");
  std::vector<char*> argv;
  for (auto& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  fail("bench: cannot run mpirun: {}", std::strerror(errno));
}

// Times optimizer steps on random tokens (no data files needed); reports the median of steps
// 2..N, so the first step's one-time costs (primitive creation, page faults) are left out.
void bench_train(const BenchTrainOpts& o) {
  if (o.steps < 2) fail("--steps must be at least 2 (the first step is not timed)");
  if (o.ranks > 1 && !launched_by_mpi()) rerun_under_mpirun(o);
  TrainConfig cfg = load_train_config(o.config, o.sets);
  check_memory_fits(cfg, usable_memory_bytes());  // as `kiln train`: refused before allocating
  TrainerOptions opts;
  opts.quiet = true;
  opts.claim_run_dir = false;  // writes nothing in train.out_dir
  auto comm = make_world_communicator(cfg.comm_options());
  const int rank = comm->rank(), world = comm->size();
  Rng rng(mix_seed(static_cast<uint64_t>(cfg.seed), static_cast<uint64_t>(rank)));
  const int V = cfg.model.vocab_size;
  opts.batches = [&](int32_t* in, int32_t* tg) {
    for (int i = 0; i < cfg.batch_size * cfg.seq_len; i++) {
      in[i] = static_cast<int32_t>(rng.below(V));
      tg[i] = static_cast<int32_t>(rng.below(V));
    }
  };
  const std::string backend = comm->backend();
  Trainer trainer(cfg, opts, std::move(comm));
  Profile& prof = trainer.model().profile();
  std::vector<double> times, waits, pipe_waits;
  std::vector<std::vector<double>> idle(world);  // each rank's idle share of each step
  Profile sum;
  for (int s = 0; s < o.steps; s++) {
    prof.reset();
    prof.enabled = s > 0;
    StepResult r = trainer.step();
    if (s == 0) continue;
    times.push_back(r.seconds);
    waits.push_back(r.comm_wait_seconds);
    pipe_waits.push_back(r.pipeline_wait_seconds);
    for (int k = 0; k < world; k++) idle[k].push_back(1 - r.rank_compute_seconds[k] / r.seconds);
    for (auto f : {&Profile::matmul, &Profile::attention, &Profile::norm, &Profile::activation,
                   &Profile::lm_head, &Profile::loss, &Profile::embedding, &Profile::residual,
                   &Profile::tp_comm})
      sum.*f += prof.*f;
  }
  // The profile's timers add a clock read per region; the timed steps above include them.
  const double step_s = median(times);
  const double wait_s = median(waits);
  if (rank != 0) return;  // rank 0 reports for the job
  // The global batch: every data-parallel row's micro-batches (pipeline stages share theirs).
  const GridShape grid = trainer.grid().shape();
  const int64_t tokens =
      static_cast<int64_t>(cfg.grad_accum) * cfg.batch_size * cfg.seq_len * grid.dp;
  std::vector<double> bubble;  // per rank: the share of a step it did not compute (median)
  for (auto& v : idle) bubble.push_back(median(v));
  const double tps = tokens / step_s;
  const double gflops = flops_per_token(cfg.model, cfg.seq_len) * tps * 1e-9;
  const double mfu = trainer.mfu(tps);  // raises an underestimated peak (train/peak.h)
  const double peak = trainer.peak_gflops() * world;
  MemoryReport mem = trainer.memory();
  const ActivationBytes act = trainer.model().activation_breakdown();
  const int64_t rss = peak_rss_bytes();
  const double n = static_cast<double>(times.size());
  struct Part {
    const char* name;
    double seconds;
  };
  const bool llama = cfg.model.llama();
  std::vector<Part> parts{{"matmul (blocks)", sum.matmul / n},
                          {"lm head matmuls", sum.lm_head / n},
                          {"attention", sum.attention / n},
                          {llama ? "rmsnorm" : "layernorm", sum.norm / n},
                          {llama ? "swiglu" : "gelu", sum.activation / n},
                          {"softmax + loss", sum.loss / n},
                          {"residual copies", sum.residual / n},
                          {"embedding", sum.embedding / n}};
  // (The vocabulary-parallel loss's two small collectives count in "softmax + loss".)
  if (grid.tp > 1) parts.push_back({"tensor-parallel collectives", sum.tp_comm / n});
  if (grid.pp > 1) parts.push_back({"pipeline wait (rank 0)", median(pipe_waits)});
  double accounted = 0;
  for (auto& p : parts) accounted += p.seconds;
  if (o.json) {
    nlohmann::json j = {{"step_ms", step_s * 1e3},
                        {"tokens_per_sec", tps},
                        {"gflops", gflops},
                        {"mfu", mfu},
                        {"peak_gflops", peak},
                        {"peak_source", trainer.peak().describe()},
                        {"threads", num_threads()},
                        {"ranks", world},
                        {"comm_backend", backend},
                        {"zero", cfg.zero},
                        {"comm_wait_ms", wait_s * 1e3},
                        {"pipeline_wait_ms", median(pipe_waits) * 1e3},
                        {"tp_comm_ms", sum.tp_comm / n * 1e3},
                        {"rank_idle_share", bubble},
                        {"grid", {{"dp", grid.dp}, {"pp", grid.pp}, {"tp", grid.tp}}},
                        {"steps_timed", times.size()},
                        {"dtype", cfg.dtype},
                        {"recompute", cfg.recompute},
                        {"peak_rss_bytes", rss},
                        {"activation_bytes",
                         {{"kept", act.kept},
                          {"shared", act.shared},
                          {"head", act.head},
                          {"scratch", act.scratch}}},
                        {"memory_bytes",
                         {{"comm_buffers", mem.comm_buffers},
                          {"working", mem.working},
                          {"model_state", mem.model_state()},
                          {"params", mem.params},
                          {"grads", mem.grads},
                          {"optimizer", mem.optimizer},
                          {"activations", mem.activations}}},
                        {"config", cfg.to_json()}};
    nlohmann::json br;
    for (auto& p : parts) br[p.name] = p.seconds * 1e3;
    br["optimizer + grad norm + rest"] = (step_s - accounted) * 1e3;
    j["breakdown_ms"] = br;
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print(
      "kiln bench train: {} | {} {}L {}H {}C, {:.1f}M params | B={} T={} accum={} | {} "
      "threads | {} | recompute {} | {} rank(s), comm {}\n",
      o.config, llama ? "Llama" : "GPT-2", cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd,
      num_params(cfg.model) / 1e6, cfg.batch_size, cfg.seq_len, cfg.grad_accum, num_threads(),
      cfg.dtype, cfg.recompute, world, backend);
  fmt::print("{:<28} {:>12}\n", "metric (median of steps 2.." + std::to_string(o.steps) + ")",
             "value");
  fmt::print("{:<28} {:>12.1f}\n", "ms/step", step_s * 1e3);
  fmt::print("{:<28} {:>12.1f}\n", "comm wait ms/step", wait_s * 1e3);
  if (grid.tp > 1) {
    fmt::print("{:<28} {:>12}\n", "tensor parallel",
               fmt::format("dp {} x tp {}, sp {}", grid.dp, grid.tp, cfg.sp ? "on" : "off"));
    fmt::print("{:<28} {:>12.1f}\n", "tp collectives ms (rank 0)", sum.tp_comm / n * 1e3);
  }
  if (grid.pp > 1) {
    fmt::print("{:<28} {:>12}\n", "pipeline",
               fmt::format("dp {} x pp {}, {}", grid.dp, grid.pp, cfg.schedule));
    fmt::print("{:<28} {:>12.1f}\n", "pipeline wait ms (rank 0)", median(pipe_waits) * 1e3);
    for (int k = 0; k < world; k++)
      fmt::print("{:<28} {:>11.1f}%\n", fmt::format("  idle share, rank {}", k), 100 * bubble[k]);
  }
  fmt::print("{:<28} {:>12.0f}\n", "tokens/s", tps);
  fmt::print("{:<28} {:>12.1f}\n", "model GFLOP/s", gflops);
  fmt::print("{:<28} {:>12.1f}  ({})\n", "peak GFLOP/s (" + cfg.dtype + ")", peak,
             trainer.peak().describe());
  fmt::print("{:<28} {:>11.1f}%\n", "MFU", mfu * 100);
  fmt::print("{:<28} {:>12.1f}\n", "memory: model state MiB", mem.model_state() / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "memory: params MiB", mem.params / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "memory: grads MiB", mem.grads / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "memory: optimizer MiB", mem.optimizer / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "memory: activations MiB", mem.activations / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "  kept for backward MiB", act.kept / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "  shared by blocks MiB", act.shared / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "  head (logits) MiB", act.head / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "  backward scratch MiB", act.scratch / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "memory: working buffers MiB", mem.working / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "memory: comm buffers MiB", mem.comm_buffers / 1048576.0);
  fmt::print("{:<28} {:>12.1f}\n", "peak RSS MiB", rss / 1048576.0);
  fmt::print("\n{:<28} {:>10} {:>7}\n", "where a step goes (mean)", "ms", "share");
  for (auto& p : parts)
    fmt::print("{:<28} {:>10.1f} {:>6.1f}%\n", p.name, p.seconds * 1e3, 100 * p.seconds / step_s);
  fmt::print("{:<28} {:>10.1f} {:>6.1f}%\n", "optimizer, grad norm, rest",
             (step_s - accounted) * 1e3, 100 * (step_s - accounted) / step_s);
}

// Encodes a text file repeatedly on one thread and reports MB/s (median of the repeats after a
// warm-up), with and without the piece cache that `kiln data prepare` uses.
void bench_tokenizer(const std::string& input, const std::string& name, int repeats, bool json) {
  if (repeats < 1) fail("--repeats must be at least 1");
  std::string text = read_file(input, "--input");
  auto tok = make_tokenizer(name);
  std::vector<int32_t> ids;
  auto run = [&](bool cached) {
    std::vector<double> times;
    for (int r = 0; r <= repeats; r++) {
      EncodeCache cache;
      ids.clear();
      double t0 = now_seconds();
      tok->encode(text, false, ids, cached ? &cache : nullptr);
      if (r > 0) times.push_back(now_seconds() - t0);
    }
    return text.size() / 1e6 / median(times);
  };
  double plain = run(false), cached = run(true);
  if (json) {
    fmt::print("{}\n", nlohmann::json{{"tokenizer", name},
                                      {"input", input},
                                      {"bytes", text.size()},
                                      {"tokens", ids.size()},
                                      {"mb_per_s", plain},
                                      {"mb_per_s_cached", cached}}
                           .dump());
    return;
  }
  fmt::print("kiln bench tokenizer: {} on {} ({:.2f} MB, {} tokens), 1 thread, median of {}\n",
             name, input, text.size() / 1e6, ids.size(), repeats);
  fmt::print("{:<28} {:>10.2f}\n", "MB/s", plain);
  fmt::print("{:<28} {:>10.2f}\n", "MB/s with the piece cache", cached);
}

struct BenchCommOpts {
  std::string op = "allreduce", dtype = "float", min = "4", max = "256M";
  std::string algorithm = "auto";  // an engine algorithm, a comma-separated list, or "all"
  int ranks = 2;
  int reps = 5;
  int64_t chunk = CommOptions{}.shm.chunk_bytes;
  int64_t direct = -1;  // -1: the engine's defaults
  int64_t inline_bytes = CommOptions{}.shm.inline_bytes;
  bool shared = false;
  bool json = false;
};

// "4", "64K", "256M", "1G" (powers of 1024).
int64_t parse_bytes(const std::string& s, const char* flag) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
  }
  std::string unit = s.substr(used);
  int64_t mult = unit.empty()  ? 1
                 : unit == "K" ? 1 << 10
                 : unit == "M" ? 1 << 20
                 : unit == "G" ? 1 << 30
                               : 0;
  if (v < 1 || mult == 0) fail("{} {}: expected a byte count such as 4, 64K, 256M or 1G", flag, s);
  return v * mult;
}

// The nccl-tests table for one collective: the shared-memory engine and plain MPI side by side.
void bench_comm(const BenchCommOpts& o) {
  if (!launched_by_mpi()) {
    if (o.ranks < 2) fail("bench comm: -n must be at least 2");
    if (o.inline_bytes < 0 || o.inline_bytes > 448)
      fail("--inline {}: expected 0 to 448 bytes (what a rank's lines carry)", o.inline_bytes);
    const std::string exe = self_executable();
    if (exe.empty()) fail("bench: cannot find the kiln executable");
    std::vector<std::string> cmd = mpirun_prefix(o.ranks);
    cmd.insert(cmd.end(), {exe,
                           "bench",
                           "comm",
                           "--op",
                           o.op,
                           "--dtype",
                           o.dtype,
                           "--min",
                           o.min,
                           "--max",
                           o.max,
                           "--reps",
                           std::to_string(o.reps),
                           "--chunk",
                           std::to_string(o.chunk),
                           "--algorithm",
                           o.algorithm,
                           "--direct",
                           std::to_string(o.direct),
                           "--inline",
                           std::to_string(o.inline_bytes)});
    if (o.json) cmd.push_back("--json");
    if (o.shared) cmd.push_back("--shared");
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    fail("bench: cannot run mpirun: {}", std::strerror(errno));
  }
  CommBenchOptions b;
  b.op = o.op;
  if (o.dtype == "float")
    b.dtype = DType::F32;
  else if (o.dtype == "bf16")
    b.dtype = DType::BF16;
  else
    fail("--dtype {}: expected float or bf16", o.dtype);
  b.min_bytes = parse_bytes(o.min, "--min");
  b.max_bytes = parse_bytes(o.max, "--max");
  b.reps = std::max(1, o.reps);
  b.engine.backend = "shm";
  b.engine.shm.chunk_bytes = o.chunk;
  b.engine.shm.inline_bytes = o.inline_bytes;
  b.shared = o.shared;
  if (o.direct >= 0)
    b.engine.shm.direct_bytes = b.engine.shm.direct_cores_bytes =
        b.engine.shm.direct_broadcast_bytes = o.direct;
  // "all": every algorithm that applies to the op (all-gather and broadcast have one).
  if (o.algorithm == "all") {
    if (o.op == "allreduce") b.algorithms = {"one_shot", "direct", "ring", "halving_doubling"};
    if (o.op == "reduce_scatter") b.algorithms = {"direct", "ring", "halving_doubling"};
  } else {
    std::stringstream list(o.algorithm);
    for (std::string a; std::getline(list, a, ',');) {
      if (!is_shm_algorithm(a))
        fail("--algorithm {}: expected all or a comma-separated list of {}", a,
             kShmAlgorithmChoices);
      b.algorithms.push_back(a);
    }
  }
  if (b.algorithms.empty()) b.algorithms = {"auto"};
  std::vector<CommBenchRow> rows = run_comm_bench(b);
  const double stream_rate = concurrent_stream_rate();
  const double barrier = shm_barrier_seconds();
  int rank = 0, world = 1;
  {
    auto c = make_world_communicator();
    rank = c->rank();
    world = c->size();
  }
  if (rank != 0) return;
  const double factor = bus_factor(o.op, world);
  const double traffic = memory_traffic(o.op, world, o.shared);
  const double bound = stream_rate / traffic / 1e9;
  auto bw = [](int64_t bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0.0; };
  if (o.json) {
    nlohmann::json j = {{"op", o.op},
                        {"ranks", world},
                        {"dtype", o.dtype},
                        {"bus_factor", factor},
                        {"chunk_bytes", o.chunk},
                        {"shared", o.shared},
                        {"memory_gbs", stream_rate / 1e9},
                        {"barrier_us", barrier * 1e6},
                        {"traffic_per_byte", traffic},
                        {"bound_algbw_gbs", bound}};
    for (auto& r : rows) {
      auto side = [&](const CommBenchTiming& t) {
        return nlohmann::json{{"time_us", t.seconds * 1e6},
                              {"algbw_gbs", bw(r.bytes, t.seconds)},
                              {"busbw_gbs", bw(r.bytes, t.seconds) * factor},
                              {"wrong", t.wrong}};
      };
      nlohmann::json engines;
      for (size_t k = 0; k < r.engine.size(); k++) engines[b.algorithms[k]] = side(r.engine[k]);
      j["rows"].push_back({{"bytes", r.bytes},
                           {"count", r.count},
                           {"kiln", side(r.engine[0])},
                           {"algorithms", engines},
                           {"mpi", side(r.mpi)}});
    }
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("# kiln bench comm: {}, {} ranks, {}, shared-memory chunk {} bytes\n", o.op, world,
             o.dtype, o.chunk);
  fmt::print(
      "# nccl-tests' definitions: algbw = size / time; busbw = algbw * {} ({}); time is the "
      "median\n# over {} repetitions of the slowest rank's mean; GB/s = 1e9 bytes/s\n",
      factor,
      o.op == "allreduce"                         ? "2(n-1)/n"
      : o.op == "broadcast" || o.op == "sendrecv" ? "1"
                                                  : "(n-1)/n",
      o.reps);
  fmt::print(
      "# memory: every rank adding one 64 MiB array into another at once moves {:.2f} GB/s per "
      "rank;\n# the op needs {:.2f} bytes of traffic per byte of buffer{}, so large buffers' "
      "algbw <= {:.2f} GB/s\n# (docs/collectives.md, \"The memory-traffic bound\")\n",
      stream_rate / 1e9, traffic, o.shared ? " (shared buffers)" : "", bound);
  fmt::print(
      "# cores: an engine barrier (a cache line each way between the ranks' cores) takes {:.2f} "
      "us\n",
      barrier * 1e6);
  if (b.algorithms.size() > 1) {
    // Side by side: time and busbw of each algorithm, then MPI's, then the fastest.
    fmt::print("#{:>12} {:>11} {:>6}", "", "", "");
    for (auto& a : b.algorithms) fmt::print("  {:>25}", a);
    fmt::print("  {:>25}\n", "plain MPI");
    fmt::print("#{:>12} {:>11} {:>6}", "size", "count", "type");
    for (size_t k = 0; k <= b.algorithms.size(); k++)
      fmt::print("  {:>10} {:>7} {:>6}", "time(us)", "busbw", "#wrong");
    fmt::print("  {}\n", "fastest");
    for (auto& r : rows) {
      fmt::print(" {:>12} {:>11} {:>6}", r.bytes, r.count, o.dtype);
      size_t best = 0;
      for (size_t k = 0; k < r.engine.size(); k++) {
        const CommBenchTiming& t = r.engine[k];
        fmt::print("  {:>10.1f} {:>7.2f} {:>6}", t.seconds * 1e6, bw(r.bytes, t.seconds) * factor,
                   t.wrong);
        if (t.seconds < r.engine[best].seconds) best = k;
      }
      fmt::print("  {:>10.1f} {:>7.2f} {:>6}", r.mpi.seconds * 1e6,
                 bw(r.bytes, r.mpi.seconds) * factor, r.mpi.wrong);
      fmt::print("  {}\n", r.mpi.seconds < r.engine[best].seconds ? "mpi" : b.algorithms[best]);
    }
    return;
  }
  fmt::print("#{:>12} {:>11} {:>6}  {:>34}  {:>34}\n", "", "", "",
             fmt::format("kiln shm engine ({})", b.algorithms[0]), "plain MPI (blocking MPI call)");
  fmt::print("#{:>12} {:>11} {:>6}  {:>10} {:>7} {:>7} {:>7}  {:>10} {:>7} {:>7} {:>7}  {:>7}\n",
             "size", "count", "type", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw",
             "busbw", "#wrong", "speedup");
  for (auto& r : rows)
    fmt::print(
        " {:>12} {:>11} {:>6}  {:>10.1f} {:>7.2f} {:>7.2f} {:>7}  {:>10.1f} {:>7.2f} {:>7.2f} "
        "{:>7}  {:>7.2f}\n",
        r.bytes, r.count, o.dtype, r.engine[0].seconds * 1e6, bw(r.bytes, r.engine[0].seconds),
        bw(r.bytes, r.engine[0].seconds) * factor, r.engine[0].wrong, r.mpi.seconds * 1e6,
        bw(r.bytes, r.mpi.seconds), bw(r.bytes, r.mpi.seconds) * factor, r.mpi.wrong,
        r.mpi.seconds / r.engine[0].seconds);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks that print tables (never assertions)");
  bench->require_subcommand(1);

  auto* train = bench->add_subcommand("train", "Time training steps of a config on random tokens");
  auto o = std::make_shared<BenchTrainOpts>();
  train->add_option("--config", o->config, "TOML config")->required();
  train->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  train->add_option("--steps", o->steps, "steps to run; the first is not timed")
      ->capture_default_str();
  train->add_flag("--json", o->json, "print one JSON object instead of a table");
  train
      ->add_option("-n,--ranks", o->ranks,
                   "ranks, laid out by [parallel] (runs itself under mpirun, cores shared out)")
      ->capture_default_str();
  train->callback([o]() { bench_train(*o); });

  auto* comm = bench->add_subcommand(
      "comm", "nccl-tests-style table of one collective: kiln's shared-memory engine vs MPI");
  auto co = std::make_shared<BenchCommOpts>();
  comm->add_option("--op", co->op,
                   "allreduce, reduce_scatter, allgather, broadcast or sendrecv (each rank sends "
                   "to the next and receives from the previous)")
      ->capture_default_str();
  comm->add_option("-n,--ranks", co->ranks, "ranks (runs itself under mpirun)")
      ->capture_default_str();
  comm->add_option("--min", co->min, "smallest size in bytes (K, M, G suffixes)")
      ->capture_default_str();
  comm->add_option("--max", co->max, "largest size in bytes (doubling from --min)")
      ->capture_default_str();
  comm->add_option("--dtype", co->dtype, "float or bf16")->capture_default_str();
  comm->add_option("--reps", co->reps, "timed repetitions per size (median)")
      ->capture_default_str();
  comm->add_option("--algorithm", co->algorithm,
                   "the engine's algorithm (auto, one_shot, direct, ring, halving_doubling), a "
                   "comma-separated list, or all: side by side")
      ->capture_default_str();
  comm->add_option("--direct", co->direct,
                   "all-gathers and broadcasts from this many bytes read the peers' buffers "
                   "directly (process_vm_readv; 0: never; -1: the engine's defaults)")
      ->capture_default_str();
  comm->add_option("--inline", co->inline_bytes,
                   "collectives up to this many bytes travel in the ranks' cache lines (0-448; "
                   "with more ranks than cores, broadcasts up to 448)")
      ->capture_default_str();
  comm->add_option("--chunk", co->chunk, "the engine's chunk in bytes (multiple of 4096)")
      ->capture_default_str();
  comm->add_flag("--shared", co->shared,
                 "buffers from the engine's shared memory (alloc_shared: its all-reduce reads "
                 "them in place), as the trainer's gradient buckets; MPI uses the same buffers");
  comm->add_flag("--json", co->json, "print one JSON object");
  comm->callback([co]() { bench_comm(*co); });

  auto* tokb = bench->add_subcommand("tokenizer", "Tokenizer speed in MB/s on one core");
  struct TokOpts {
    std::string input = "data/corpora/moby-dick.txt", tokenizer = "gpt2";
    int repeats = 5;
    bool json = false;
  };
  auto to = std::make_shared<TokOpts>();
  tokb->add_option("--input", to->input, "a UTF-8 text file")->capture_default_str();
  tokb->add_option("--tokenizer", to->tokenizer, "gpt2, llama3, cl100k or bytes")
      ->capture_default_str();
  tokb->add_option("--repeats", to->repeats, "timed repeats after one warm-up")
      ->capture_default_str();
  tokb->add_flag("--json", to->json, "print one JSON object");
  tokb->callback([to]() { bench_tokenizer(to->input, to->tokenizer, to->repeats, to->json); });

  auto* peak = bench->add_subcommand(
      "peak",
      "Measure the best fp32 and bf16 matmul rates (the peaks MFU is measured against) and cache "
      "them for `kiln train` on this machine");
  auto seconds = std::make_shared<double>(1.0);
  auto threads = std::make_shared<int>(0);
  auto no_cache = std::make_shared<bool>(false);
  peak->add_option("--seconds", *seconds, "seconds per shape (in three rounds)")
      ->capture_default_str();
  peak->add_option("--threads", *threads,
                   "threads (0 = all cores; a rank of `kiln launch -n N` has cores/N)")
      ->capture_default_str();
  peak->add_flag("--no-cache", *no_cache, "print only; do not write the cache");
  peak->callback([seconds, threads, no_cache]() {
    if (!(*seconds > 0 && *seconds <= 3600)) fail("--seconds {}: expected (0, 3600]", *seconds);
    if (*threads < 0 || *threads > 1024) fail("--threads {}: expected 0 to 1024", *threads);
    set_num_threads(*threads);
    // Best of three rounds across the shapes: a moment of load shrinks a round, not the best.
    double g = measure_peak_gflops(*seconds, false, 3);
    fmt::print("peak fp32 matmul: {:.1f} GFLOP/s on {} threads\n", g, num_threads());
    double gb = measure_peak_gflops(*seconds, true, 3);
    fmt::print("peak bf16 matmul (fp32 accumulation): {:.1f} GFLOP/s on {} threads\n", gb,
               num_threads());
    if (*no_cache) {
      fmt::print(
          "use them with: --set hardware.peak_gflops={:.0f} (fp32), {:.0f} (train.dtype=bf16)\n", g,
          gb);
      return;
    }
    // `kiln train` on this CPU with this many threads uses these when the config states no
    // hardware.peak_gflops (train/peak.h).
    const std::string path = peak_cache_path();
    const std::string cpu = cpu_model_name(), date = local_date();
    std::string note;
    store_peak(path, PeakEntry{cpu, num_threads(), "fp32", g, date}, &note);
    store_peak(path, PeakEntry{cpu, num_threads(), "bf16", gb, date}, nullptr);
    if (!note.empty()) fmt::print(stderr, "kiln: note: {}\n", note);
    fmt::print(
        "cached in {} for {} on {} threads: `kiln train` there measures MFU against them (a "
        "config's hardware.peak_gflops comes first)\n",
        path, cpu, num_threads());
  });
}

}  // namespace kiln::cli
