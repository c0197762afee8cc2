#include "train/config.h"

#include <toml++/toml.h>
#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <variant>

#include "comm/communicator.h"
#include "core/closest_name.h"
#include "core/error.h"

namespace kiln {
namespace {

using Field = std::variant<int*, int64_t*, double*, bool*, std::string*>;

struct Key {
  std::string name;  // section.key
  Field field;
  const char* help;
};

std::vector<Key> schema(TrainConfig& c) {
  return {
      {"model.n_layer", &c.model.n_layer, "transformer blocks"},
      {"model.n_head", &c.model.n_head, "attention heads"},
      {"model.n_embd", &c.model.n_embd, "channels"},
      {"model.block_size", &c.model.block_size, "maximum sequence length (positions)"},
      {"model.vocab_size", &c.model.vocab_size, "vocabulary size"},
      {"model.vocab_multiple", &c.vocab_multiple, "pad the vocabulary up to a multiple of this"},
      {"train.batch_size", &c.batch_size, "sequences per micro-batch (B)"},
      {"train.seq_len", &c.seq_len, "tokens per sequence (T)"},
      {"train.grad_accum", &c.grad_accum, "micro-batches per optimizer step"},
      {"train.steps", &c.steps, "optimizer steps"},
      {"train.lr", &c.lr, "peak learning rate"},
      {"train.min_lr", &c.min_lr, "learning rate at the end of the cosine decay"},
      {"train.warmup_steps", &c.warmup_steps, "linear warm-up steps"},
      {"train.weight_decay", &c.weight_decay, "decoupled weight decay (matrices only)"},
      {"train.beta1", &c.beta1, "AdamW beta1"},
      {"train.beta2", &c.beta2, "AdamW beta2"},
      {"train.eps", &c.eps, "AdamW epsilon"},
      {"train.grad_clip", &c.grad_clip, "clip the global gradient norm to this (0: off)"},
      {"train.seed", &c.seed, "seed of initialisation and data order"},
      {"train.dtype", &c.dtype,
       "\"fp32\", or \"bf16\": matmuls in bf16 with fp32 accumulation and fp32 master weights"},
      {"train.recompute", &c.recompute,
       "activation recompute in backward: \"none\", \"attention\" (softmax probabilities) or "
       "\"full\" (blocks keep only their input)"},
      {"train.attention", &c.attention,
       "attention kernels: \"standard\" (keeps the T x T probabilities) or \"flash\" (online "
       "softmax, no T x T memory)"},
      {"train.threads", &c.threads,
       "threads per process (0: the cores shared out among this machine's ranks)"},
      {"train.zero", &c.zero, "ZeRO stage across data-parallel ranks: 0, 1, 2 or 3"},
      {"train.bucket_mb", &c.bucket_mb,
       "gradient bucket size in MB for the data-parallel reduction"},
      {"train.resume", &c.resume,
       "\"none\", \"auto\" (newest complete checkpoint if any) or \"must\""},
      {"train.overwrite", &c.overwrite,
       "a fresh run (train.resume = \"none\") in an out_dir that holds an earlier run deletes that "
       "run's checkpoints and metrics (false: it is refused)"},
      {"train.init_from", &c.init_from, "start from GPT-2 weights in a safetensors file"},
      {"train.out_dir", &c.out_dir, "run directory (metrics, checkpoints)"},
      {"train.val_every", &c.val_every, "validation every N steps (0: never)"},
      {"train.val_batches", &c.val_batches, "micro-batches per validation"},
      {"train.log_every", &c.log_every, "print a progress line every N steps"},
      {"train.sample_tokens", &c.sample_tokens,
       "print a generated sample of N tokens at each validation (0: none)"},
      {"train.sample_prompt", &c.sample_prompt, "text the samples continue (default: none)"},
      {"train.watchdog_seconds", &c.watchdog_seconds,
       "end the job when a rank makes no progress (no step, no collective) for this long, "
       "naming the ranks that did not arrive (0: off)"},
      {"train.nonfinite_limit", &c.nonfinite_limit,
       "stop with an error after this many consecutive steps with a non-finite loss or gradient "
       "norm (each is skipped, no update made; 0: never stop)"},
      {"data.train", &c.train_data, "training shards: a file or a glob"},
      {"data.val", &c.val_data, "validation shards: a file or a glob"},
      {"data.shuffle", &c.shuffle, "visit sequences in a seeded random order per epoch"},
      {"data.tokenizer", &c.tokenizer, "tokenizer of the shards: \"gpt2\" or \"bytes\""},
      {"checkpoint.every", &c.ckpt_every, "checkpoint every N steps (0: only at the end)"},
      {"checkpoint.keep_last", &c.keep_last, "keep this many newest checkpoints (0: all)"},
      {"hardware.peak_gflops", &c.peak_gflops,
       "peak FLOP/s for MFU in GFLOP/s (0: measure at start)"},
      {"comm.backend", &c.comm_backend,
       "collectives: \"auto\" (shared memory inside a node, hierarchical across nodes), \"mpi\", "
       "\"shm\" or \"hier\""},
      {"comm.compress", &c.comm_compress,
       "\"bf16\": send the inter-node all-reduce in bf16 with error feedback (\"none\": fp32)"},
      {"comm.algorithm", &c.comm_algorithm,
       "the shared-memory engine's all-reduce: \"auto\" (chosen by size), \"one_shot\", "
       "\"direct\", \"ring\" or \"halving_doubling\""},
  };
}

[[noreturn]] void unknown_key(const std::vector<Key>& keys, const std::string& name,
                              const std::string& source) {
  std::vector<std::string> known;
  for (const auto& k : keys) known.push_back(k.name);
  std::string best = closest_name(name, known);
  if (!best.empty()) fail("{}: unknown config key '{}' (did you mean '{}'?)", source, name, best);
  fail("{}: unknown config key '{}' (see `kiln train --help` for the keys)", source, name);
}

Key& find_key(std::vector<Key>& keys, const std::string& name, const std::string& source) {
  for (auto& k : keys)
    if (k.name == name) return k;
  unknown_key(keys, name, source);
}

void set_from_toml(Key& k, const toml::node& v, const std::string& source) {
  auto wrong = [&](const char* want) {
    std::ostringstream got;
    got << v.type();
    fail("{}: config key '{}' must be {}, got a {}", source, k.name, want, got.str());
  };
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) wrong("true or false");
          *p = *v.value<bool>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) wrong("a string");
          *p = *v.value<std::string>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) wrong("a number");
          *p = *v.value<double>();
        } else {
          if (!v.is_integer()) wrong("an integer");
          int64_t x = *v.value<int64_t>();
          if constexpr (std::is_same_v<T, int>) {
            if (x < INT32_MIN || x > INT32_MAX)
              fail("{}: config key '{}' is out of range", source, k.name);
          }
          *p = static_cast<T>(x);
        }
      },
      k.field);
}

void apply_override(std::vector<Key>& keys, const std::string& ov) {
  auto eq = ov.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--set '{}': expected section.key=value, e.g. --set train.lr=3e-4", ov);
  std::string name = ov.substr(0, eq), value = ov.substr(eq + 1);
  Key& k = find_key(keys, name, "--set");
  // Strings may be given bare; everything else is parsed as a TOML value.
  if (std::holds_alternative<std::string*>(k.field) && (value.empty() || value[0] != '"')) {
    *std::get<std::string*>(k.field) = value;
    return;
  }
  toml::table t;
  try {
    t = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    fail("--set {}: '{}' is not a valid value", name, value);
  }
  set_from_toml(k, *t.get("v"), "--set");
}

}  // namespace

std::vector<std::string> train_config_keys() {
  TrainConfig c;
  std::vector<std::string> out;
  for (auto& k : schema(c)) out.push_back(fmt::format("{:24} {}", k.name, k.help));
  return out;
}

TrainConfig parse_train_config(const std::string& text, const std::string& source,
                               const std::vector<std::string>& overrides) {
  TrainConfig c;
  c.source = source;
  auto keys = schema(c);
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description());
  }
  for (auto&& [section, node] : root) {
    std::string sname(section.str());
    const toml::table* tbl = node.as_table();
    if (!tbl) unknown_key(keys, sname, source);
    for (auto&& [key, value] : *tbl) {
      std::string name = sname + "." + std::string(key.str());
      set_from_toml(find_key(keys, name, source), value, source);
    }
  }
  for (const auto& ov : overrides) apply_override(keys, ov);
  c.model.padded_vocab_size = pad_vocab(c.model.vocab_size, c.vocab_multiple);
  c.validate();
  return c;
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream f(path);
  if (!f) fail("cannot read config file {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_train_config(ss.str(), path, overrides);
}

nlohmann::json TrainConfig::to_json() const {
  TrainConfig copy = *this;
  nlohmann::json j;
  for (auto& k : schema(copy)) {
    auto dot = k.name.find('.');
    std::string s = k.name.substr(0, dot), key = k.name.substr(dot + 1);
    std::visit([&](auto* p) { j[s][key] = *p; }, k.field);
  }
  return j;
}

TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& source) {
  // Through TOML text, so one schema and one set of checks serve both.
  toml::table root;
  for (auto& [section, tbl] : j.items()) {
    toml::table t;
    for (auto& [key, v] : tbl.items()) {
      if (v.is_boolean())
        t.insert(key, v.get<bool>());
      else if (v.is_number_integer())
        t.insert(key, v.get<int64_t>());
      else if (v.is_number())
        t.insert(key, v.get<double>());
      else if (v.is_string())
        t.insert(key, v.get<std::string>());
      else
        fail("{}: config key '{}.{}' has an unsupported value", source, section, key);
    }
    root.insert(section, std::move(t));
  }
  std::stringstream ss;
  ss << root;
  return parse_train_config(ss.str(), source, {});
}

void TrainConfig::validate() const {
  model.validate();
  auto positive = [&](int v, const char* key) {
    if (v <= 0) fail("{}: {} must be positive, got {}", source, key, v);
  };
  positive(batch_size, "train.batch_size");
  positive(seq_len, "train.seq_len");
  positive(grad_accum, "train.grad_accum");
  positive(steps, "train.steps");
  positive(log_every, "train.log_every");
  if (seq_len > model.block_size)
    fail("{}: train.seq_len ({}) exceeds model.block_size ({})", source, seq_len, model.block_size);
  if (dtype != "fp32" && dtype != "bf16")
    fail("{}: train.dtype must be \"fp32\" or \"bf16\", got '{}'", source, dtype);
  if (recompute != "none" && recompute != "attention" && recompute != "full")
    fail("{}: train.recompute must be \"none\", \"attention\" or \"full\", got '{}'", source,
         recompute);
  if (resume != "none" && resume != "auto" && resume != "must")
    fail("{}: train.resume must be \"none\", \"auto\" or \"must\", got '{}'", source, resume);
  if (lr < 0 || min_lr < 0) fail("{}: train.lr and train.min_lr must not be negative", source);
  if (warmup_steps < 0) fail("{}: train.warmup_steps must not be negative", source);
  if (vocab_multiple < 1) fail("{}: model.vocab_multiple must be at least 1", source);
  if (tokenizer != "gpt2" && tokenizer != "bytes")
    fail("{}: data.tokenizer must be \"gpt2\" or \"bytes\", got '{}'", source, tokenizer);
  if (zero < 0 || zero > 3)
    fail("{}: train.zero = {}: ZeRO stages are 0, 1, 2 and 3", source, zero);
  if (attention != "standard" && attention != "flash")
    fail("{}: train.attention must be \"standard\" or \"flash\", got '{}'", source, attention);
  if (dtype == "bf16" && zero == 3)
    fail(
        "{}: train.dtype = \"bf16\" with train.zero = 3 is not supported: the bf16 weight copy is "
        "made once per step from the whole parameters, which ZeRO-3 does not keep; use "
        "train.zero = 2 or train.dtype = \"fp32\"",
        source);
  if (bucket_mb <= 0) fail("{}: train.bucket_mb must be positive", source);
  if (comm_backend != "auto" && comm_backend != "mpi" && comm_backend != "shm" &&
      comm_backend != "hier")
    fail("{}: comm.backend must be \"auto\", \"mpi\", \"shm\" or \"hier\", got '{}'", source,
         comm_backend);
  if (comm_compress != "none" && comm_compress != "bf16")
    fail("{}: comm.compress must be \"none\" or \"bf16\", got '{}'", source, comm_compress);
  if (!is_shm_algorithm(comm_algorithm))
    fail("{}: comm.algorithm must be {}, got '{}'", source, kShmAlgorithmChoices, comm_algorithm);
  if (sample_tokens < 0) fail("{}: train.sample_tokens must not be negative", source);
  if (watchdog_seconds < 0) fail("{}: train.watchdog_seconds must not be negative", source);
  if (nonfinite_limit < 0)
    fail("{}: train.nonfinite_limit must not be negative (0: never stop), got {}", source,
         nonfinite_limit);
  if (model.vocab_size > 65536)
    fail("{}: model.vocab_size {} does not fit the uint16 token shards", source, model.vocab_size);
}

}  // namespace kiln
