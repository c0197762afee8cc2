// The training configuration: a TOML file with [model], [train], [data], [checkpoint],
// [parallel], [hardware] and [comm] tables, overridden by `--set section.key=value`. Every key is
// declared once in a schema; an unknown or mistyped key is an error that names the key and the
// file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "model/model.h"
#include "parallel/grid.h"

namespace kiln {

// Upper bounds validate() enforces beyond "finite and not negative".
constexpr int kMaxThreads = 1024;          // train.threads: libgomp crashes creating ~100000
constexpr double kMaxBucketMb = 1e6;       // train.bucket_mb: 1 TB; its byte count is an int64
constexpr double kMaxParameters = 0x1p40;  // about 1.1e12: offsets and sizes stay far from int64

struct TrainConfig {
  std::string source;  // the file it was read from

  ModelConfig model;
  int vocab_multiple = 128;  // model.vocab_multiple: pad the vocabulary to a multiple of this
  std::string rope_scaling = "none";  // model.rope_scaling: "none" or "llama3" (model.rope_*)

  // [train]
  int batch_size = 4;  // B: sequences per micro-batch
  int seq_len = 64;    // T
  int grad_accum = 1;  // micro-batches per step
  int steps = 100;
  double lr = 6e-4;
  double min_lr = 6e-5;
  int warmup_steps = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  int64_t seed = 1337;
  std::string dtype = "fp32";          // "fp32" | "bf16" (mixed precision)
  std::string recompute = "none";      // "none" | "attention" | "full"
  std::string attention = "standard";  // "standard" | "flash"
  int threads = 0;                     // 0: all cores
  int zero = 0;  // ZeRO stage: 0 replicated, 1 optimizer state, 2 + gradients, 3 + parameters
  double bucket_mb = 25;        // gradient bucket size for the data-parallel reduction
  std::string resume = "none";  // "none" | "auto" | "must"
  bool overwrite =
      false;              // a fresh run deletes an earlier run's checkpoints and metrics in out_dir
  std::string init_from;  // a safetensors file with GPT-2 weights
  std::string out_dir = "runs/default";
  int val_every = 0;  // 0: never
  int val_batches = 4;
  int log_every = 1;
  int sample_tokens = 0;          // print a sample of this many tokens at each validation (0: none)
  std::string sample_prompt;      // text the sample continues (default: end-of-text)
  double watchdog_seconds = 300;  // hang detection (0: off); see obs/watchdog.h
  int nonfinite_limit = 10;       // stop after this many consecutive non-finite steps (0: never)

  // [data]
  std::string train_data;  // data.train: a shard or glob
  std::string val_data;    // data.val
  bool shuffle = false;
  std::string tokenizer = "gpt2";  // data.tokenizer: how the shards were made (for text output)

  // [checkpoint]
  int ckpt_every = 0;       // 0: only at the end
  int keep_last = 3;        // 0: keep all
  bool ckpt_async = false;  // write in a background thread from a copy taken at the step boundary

  // [parallel]: the job's rank grid, dp × pp × tp = world (parallel/grid.h)
  int dp = 0;  // data-parallel replicas; 0: world / (tp × pp)
  int tp = 1;  // tensor-parallel ranks: each layer's matrices split across them (GPT-2)
  // Sequence parallelism with tp > 1: the residual stream's tokens split across the
  // tensor-parallel ranks outside the linears (parallel/tensor_parallel.h).
  bool sp = true;
  int pp = 1;  // pipeline stages, each a contiguous range of layers (pipeline_stage, model.h)
  // The pipeline schedule: "1f1b" (PipeDream-Flush), "gpipe", "interleaved" (Megatron-LM's
  // interleaved 1F1B over virtual_stages chunks) or "zero_bubble" (ZB-H1); train.grad_accum is
  // the number of micro-batches per step.
  std::string schedule = "1f1b";
  // Model chunks per pipeline rank ("interleaved": rank r holds virtual stages r, r + pp, ...).
  int virtual_stages = 1;
  // Layers of each (virtual) stage (pp × virtual_stages numbers summing to n_layer); empty: an
  // even split.
  std::vector<int> stage_layers;

  // [hardware]
  double peak_gflops = 0;  // 0: kiln bench peak's cache, else measured at start (train/peak.h)

  // [comm]
  std::string comm_backend = "auto";   // "auto" | "mpi" | "shm" | "hier" (docs/collectives.md)
  std::string comm_compress = "none";  // "none" | "bf16": the inter-node stage of "hier"
  // The engine's all-reduce/reduce-scatter algorithm: "auto" (by size), "one_shot", "direct",
  // "ring", "halving_doubling" (docs/collectives.md).
  std::string comm_algorithm = "auto";
  // Point-to-point (pipeline) messages: "auto" (through the shared-memory engine's window when
  // it runs the group, docs/collectives.md) or "mpi".
  std::string comm_p2p = "auto";
  // The communicator options the [comm] keys give (backend, compression, algorithm, p2p).
  CommOptions comm_options() const;

  // Resolved form, every key with its value.
  nlohmann::json to_json() const;
  // Checks ranges and combinations; messages name the key and the file. Every floating-point
  // key must be finite.
  void validate() const;
  // The grid of a job of `world` processes; an error naming the [parallel] keys when they do not
  // multiply to it.
  GridShape grid_shape(int world) const;
};

// Refuses a config that cannot fit in `memory_bytes` (this machine's memory) before anything is
// allocated, naming the keys that size it: one micro-batch's activations plus the model state a
// rank keeps whatever the number of ranks (weights, gradients and AdamW moments unless ZeRO
// shards them), and with checkpoint.async the copy rank 0 takes of what it writes. A lower
// bound: a config that passes may still not fit.
void check_memory_fits(const TrainConfig& c, double memory_bytes);
// Bytes of memory this process may use: the machine's physical memory, or when lower its
// cgroup's limit (a Slurm job's allocation) or the process's address-space or data limit.
double usable_memory_bytes();

// Reads a TOML file and applies `section.key=value` overrides in order.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides);
// Parses a config from TOML text (tests and checkpoints); `source` names it in messages.
TrainConfig parse_train_config(const std::string& toml_text, const std::string& source,
                               const std::vector<std::string>& overrides);
// The same schema applied to a JSON object (a checkpoint's resolved config).
TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& source);

// All keys the schema knows, "section.key", for help text.
std::vector<std::string> train_config_keys();

}  // namespace kiln
