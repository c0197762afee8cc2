#include "train/config.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <sstream>
#include <variant>

#include "comm/communicator.h"
#include "core/closest_name.h"
#include "core/error.h"
#include "data/manifest.h"

namespace kiln {
namespace {

// A string with its control characters escaped, for messages.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch == '\n')
      out += "\\n";
    else if (ch == '\t')
      out += "\\t";
    else if (ch < 0x20 || ch == 0x7f)
      out += fmt::format("\\x{:02x}", ch);
    else
      out += static_cast<char>(ch);
  }
  return out;
}

bool has_control_char(const std::string& s, bool allow_whitespace) {
  for (unsigned char ch : s)
    if ((ch < 0x20 || ch == 0x7f) && !(allow_whitespace && (ch == '\n' || ch == '\t'))) return true;
  return false;
}

using Field = std::variant<int*, int64_t*, float*, double*, bool*, std::string*, std::vector<int>*>;

struct Key {
  std::string name;  // section.key
  Field field;
  const char* help;
};

std::vector<Key> schema(TrainConfig& c) {
  return {
      {"model.family", &c.model.family,
       "\"gpt2\" (learned positions, LayerNorm, GELU, biases, tied head) or \"llama\" (RMSNorm, "
       "rotary positions, SwiGLU, grouped-query attention, no biases)"},
      {"model.n_layer", &c.model.n_layer, "transformer blocks"},
      {"model.n_head", &c.model.n_head, "attention heads"},
      {"model.n_embd", &c.model.n_embd, "channels"},
      {"model.block_size", &c.model.block_size, "maximum sequence length (positions)"},
      {"model.vocab_size", &c.model.vocab_size, "vocabulary size"},
      {"model.vocab_multiple", &c.vocab_multiple, "pad the vocabulary up to a multiple of this"},
      {"model.n_kv_head", &c.model.n_kv_head,
       "llama: key/value heads, dividing model.n_head (0: model.n_head; 1: multi-query)"},
      {"model.ffn_hidden", &c.model.ffn_hidden, "llama: the SwiGLU MLP's width"},
      {"model.norm_eps", &c.model.norm_eps, "llama: RMSNorm's epsilon"},
      {"model.rope_theta", &c.model.rope_theta, "llama: the rotary embedding's base"},
      {"model.rope_scaling", &c.rope_scaling,
       "llama: \"none\", or \"llama3\" (Llama 3.1's frequency scaling, model.rope_factor, "
       "model.rope_low_freq_factor, model.rope_high_freq_factor, "
       "model.rope_original_max_position)"},
      {"model.rope_factor", &c.model.rope_scaling.factor, "llama3 rotary scaling: factor"},
      {"model.rope_low_freq_factor", &c.model.rope_scaling.low_freq_factor,
       "llama3 rotary scaling: low_freq_factor"},
      {"model.rope_high_freq_factor", &c.model.rope_scaling.high_freq_factor,
       "llama3 rotary scaling: high_freq_factor"},
      {"model.rope_original_max_position", &c.model.rope_scaling.original_max_position_embeddings,
       "llama3 rotary scaling: original_max_position_embeddings"},
      {"model.tie_embeddings", &c.model.tie_embeddings,
       "llama: the LM head shares the token embedding (GPT-2's always does)"},
      {"train.batch_size", &c.batch_size, "sequences per micro-batch (B)"},
      {"train.seq_len", &c.seq_len, "tokens per sequence (T)"},
      {"train.grad_accum", &c.grad_accum, "micro-batches per optimizer step"},
      {"train.steps", &c.steps, "optimizer steps"},
      {"train.lr", &c.lr, "peak learning rate"},
      {"train.min_lr", &c.min_lr,
       "learning rate at the end of the cosine decay (at most train.lr)"},
      {"train.warmup_steps", &c.warmup_steps, "linear warm-up steps"},
      {"train.weight_decay", &c.weight_decay, "decoupled weight decay (matrices only)"},
      {"train.beta1", &c.beta1, "AdamW beta1, in [0, 1)"},
      {"train.beta2", &c.beta2, "AdamW beta2, in [0, 1)"},
      {"train.eps", &c.eps, "AdamW epsilon, more than 0"},
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
       "threads per process, at most 1024 (0: the cores shared out among this machine's ranks)"},
      {"train.zero", &c.zero, "ZeRO stage across data-parallel ranks: 0, 1, 2 or 3"},
      {"train.bucket_mb", &c.bucket_mb,
       "gradient bucket size in MB for the data-parallel reduction (more than 0, at most 1e6)"},
      {"train.resume", &c.resume,
       "\"none\", \"auto\" (newest complete checkpoint if any) or \"must\""},
      {"train.overwrite", &c.overwrite,
       "a fresh run (train.resume = \"none\") in an out_dir that holds an earlier run deletes that "
       "run's checkpoints and metrics (false: it is refused)"},
      {"train.init_from", &c.init_from, "start from GPT-2 weights in a safetensors file"},
      {"train.out_dir", &c.out_dir, "run directory (metrics, checkpoints)"},
      {"train.val_every", &c.val_every, "validation every N steps (0: never)"},
      {"train.val_batches", &c.val_batches, "micro-batches per validation (at least 1)"},
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
      {"data.tokenizer", &c.tokenizer,
       "tokenizer of the shards: \"gpt2\", \"llama3\", \"cl100k\" or \"bytes\""},
      {"checkpoint.every", &c.ckpt_every, "checkpoint every N steps (0: only at the end)"},
      {"checkpoint.keep_last", &c.keep_last, "keep this many newest checkpoints (0: all)"},
      {"checkpoint.async", &c.ckpt_async,
       "periodic checkpoints copy their state into host memory at the step boundary and a "
       "background thread writes them while training goes on; published when every rank's part "
       "is durable (the last and a requested stop's are written at once)"},
      {"parallel.dp", &c.dp,
       "data-parallel replicas (0: the job's processes / (parallel.tp x parallel.pp))"},
      {"parallel.tp", &c.tp,
       "tensor-parallel ranks per layer: attention heads, MLP units and the vocabulary split "
       "across them (model.n_head, and a Llama's n_kv_head and ffn_hidden, multiples of it)"},
      {"parallel.sp", &c.sp,
       "sequence parallelism with parallel.tp > 1: LayerNorms and residual adds on 1/tp of the "
       "tokens each (reduce-scatter + all-gather instead of all-reduce)"},
      {"parallel.pp", &c.pp,
       "pipeline stages, each a range of layers (an even share, or parallel.stage_layers; the "
       "first holds the embedding, the last the head)"},
      {"parallel.virtual_stages", &c.virtual_stages,
       "model chunks per pipeline rank for parallel.schedule = \"interleaved\" (at least 2; 1 "
       "otherwise)"},
      {"parallel.stage_layers", &c.stage_layers,
       "layers of each pipeline stage, e.g. [3, 5]: parallel.pp x parallel.virtual_stages numbers "
       "summing to model.n_layer (empty: an even split)"},
      {"parallel.schedule", &c.schedule,
       "pipeline schedule: \"1f1b\" (at most pp micro-batches in flight), \"gpipe\" (all "
       "forwards, then all backwards), \"interleaved\" (parallel.virtual_stages chunks per rank) "
       "or \"zero_bubble\" (ZB-H1: weight gradients fill the bubble); train.grad_accum "
       "micro-batches per step"},
      {"hardware.peak_gflops", &c.peak_gflops,
       "peak FLOP/s of one process for MFU in GFLOP/s (0: what `kiln bench peak` cached for "
       "this CPU, thread count and dtype, else measured at start)"},
      {"comm.backend", &c.comm_backend,
       "collectives: \"auto\" (shared memory inside a node, hierarchical across nodes), \"mpi\", "
       "\"shm\" or \"hier\""},
      {"comm.compress", &c.comm_compress,
       "\"bf16\": send the inter-node all-reduce in bf16 with error feedback (\"none\": fp32)"},
      {"comm.algorithm", &c.comm_algorithm,
       "the shared-memory engine's all-reduce: \"auto\" (chosen by size), \"one_shot\", "
       "\"direct\", \"ring\" or \"halving_doubling\""},
      {"comm.p2p", &c.comm_p2p,
       "pipeline sends and receives: \"auto\" (inside a node through the shared-memory "
       "engine, copied once by the receiver) or \"mpi\""},
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
        if constexpr (std::is_same_v<T, std::vector<int>>) {
          const toml::array* a = v.as_array();
          if (!a) wrong("an array of integers");
          p->clear();
          for (const toml::node& e : *a) {
            if (!e.is_integer()) wrong("an array of integers");
            const int64_t x = *e.value<int64_t>();
            if (x < INT32_MIN || x > INT32_MAX)
              fail("{}: config key '{}' is out of range", source, k.name);
            p->push_back(static_cast<int>(x));
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) wrong("true or false");
          *p = *v.value<bool>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) wrong("a string");
          *p = *v.value<std::string>();
        } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
          if (!v.is_number()) wrong("a number");
          const double x = *v.value<double>();
          if (std::is_same_v<T, float> && std::isfinite(x) && std::abs(x) > 3.4e38)
            fail("{}: config key '{}' is out of range", source, k.name);
          *p = static_cast<T>(x);
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
    fail("--set '{}': expected section.key=value, e.g. --set train.lr=3e-4", printable(ov));
  std::string name = ov.substr(0, eq), value = ov.substr(eq + 1);
  if (has_control_char(name, false))
    fail("--set '{}': the key holds a control character", printable(ov));
  Key& k = find_key(keys, name, "--set");
  // Strings may be given bare; everything else is parsed as a TOML value.
  if (std::holds_alternative<std::string*>(k.field) && (value.empty() || value[0] != '"')) {
    *std::get<std::string*>(k.field) = value;
    return;
  }
  // A newline would end the TOML value early and the rest would be parsed as more keys (or
  // dropped): one --set is one value.
  if (has_control_char(value, false))
    fail("--set {}: the value '{}' holds a control character (one --set gives one value)", name,
         printable(value));
  toml::table t;
  try {
    t = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    fail("--set {}: '{}' is not a valid value", name, value);
  }
  if (t.size() != 1) fail("--set {}: '{}' is more than one value", name, value);
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
  // An empty file (or only comments) would otherwise fail as "model.n_layer must be positive".
  if (root.empty())
    fail("{}: the config is empty: it sets no [model] or [train] keys (see configs/tiny.toml)",
         source);
  for (const auto& ov : overrides) apply_override(keys, ov);
  // validate() reports values out of range; the padding is only computed where it cannot overflow.
  c.model.rope_llama3 = c.rope_scaling == "llama3";
  const bool pad_ok = c.model.vocab_size >= 1 && c.model.vocab_size <= kMaxVocabSize &&
                      c.vocab_multiple >= 1 && c.vocab_multiple <= 65536;
  // With tensor parallelism the padded vocabulary also splits evenly into parallel.tp slices.
  const int64_t pad_to =
      pad_ok && c.tp > 1 && c.tp <= 65536
          ? std::lcm(static_cast<int64_t>(c.vocab_multiple), static_cast<int64_t>(c.tp))
          : c.vocab_multiple;
  c.model.padded_vocab_size = pad_ok && pad_to <= (1 << 20)
                                  ? pad_vocab(c.model.vocab_size, static_cast<int>(pad_to))
                                  : c.model.vocab_size;
  try {
    c.validate();
  } catch (const Error& e) {
    // The message names the file; when the value came from the command line, say so too.
    std::string msg = e.what();
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
      std::string name = it->substr(0, it->find('='));
      for (size_t at = msg.find(name); at != std::string::npos; at = msg.find(name, at + 1)) {
        char next = at + name.size() < msg.size() ? msg[at + name.size()] : ' ';
        if (!std::isalnum(static_cast<unsigned char>(next)) && next != '_')
          fail("{} (set by --set {})", msg, printable(*it));
      }
    }
    throw;
  }
  return c;
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  // Opened without blocking: a named pipe with no writer would otherwise block forever in
  // open(). A pipe with a writer (`kiln train <(...)`) is read as it comes; a directory or a
  // device is refused naming what it is, rather than failing later as a missing key.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    fail("config file {}: {} (give a TOML file such as configs/tiny.toml)", path,
         std::strerror(errno));
  std::string text;
  struct stat st;
  const char* kind = nullptr;
  if (::fstat(fd, &st) != 0)
    kind = "a file that cannot be examined";
  else if (S_ISDIR(st.st_mode))
    kind = "a directory";
  else if (S_ISCHR(st.st_mode))
    kind = "a character device";
  else if (S_ISBLK(st.st_mode))
    kind = "a block device";
  else if (S_ISSOCK(st.st_mode))
    kind = "a socket";
  int read_errno = 0;
  if (!kind) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        text.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        read_errno = errno;
        break;
      }
    }
  }
  ::close(fd);
  if (kind)
    fail("config file {} is {}, not a TOML file; give one such as configs/tiny.toml", path, kind);
  if (read_errno) fail("config file {}: read error: {}", path, std::strerror(read_errno));
  return parse_train_config(text, path, overrides);
}

CommOptions TrainConfig::comm_options() const {
  CommOptions co;
  co.backend = comm_backend;
  co.compress = comm_compress;
  co.algorithm = comm_algorithm;
  co.shm.p2p = comm_p2p != "mpi";
  return co;
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
      else if (v.is_array()) {
        toml::array a;
        for (const auto& e : v) {
          if (!e.is_number_integer())
            fail("{}: config key '{}.{}' has an unsupported value", source, section, key);
          a.push_back(e.get<int64_t>());
        }
        t.insert(key, std::move(a));
      } else
        fail("{}: config key '{}.{}' has an unsupported value", source, section, key);
    }
    root.insert(section, std::move(t));
  }
  std::stringstream ss;
  ss << root;
  return parse_train_config(ss.str(), source, {});
}

void TrainConfig::validate() const {
  // Integers: within [lo, hi]; `allowed` says what is, in the words of the help text.
  auto in_range = [&](int64_t v, int64_t lo, int64_t hi, const char* key, const char* allowed) {
    if (v < lo || v > hi) fail("{}: {} = {} is out of range: {}", source, key, v, allowed);
  };
  // Floating point: finite (NaN and inf pass every `v < 0` test, so they are refused first),
  // then the range.
  auto real = [&](double v, bool ok, const char* key, const char* allowed) {
    if (!std::isfinite(v)) fail("{}: {} = {} is not a finite number: {}", source, key, v, allowed);
    if (!ok) fail("{}: {} = {} is out of range: {}", source, key, v, allowed);
  };
  constexpr int64_t kIntMax = INT32_MAX;
  in_range(model.n_layer, 1, kIntMax, "model.n_layer", "must be at least 1");
  in_range(model.n_head, 1, kIntMax, "model.n_head", "must be at least 1");
  in_range(model.n_embd, 1, kIntMax, "model.n_embd", "must be at least 1");
  in_range(model.block_size, 1, kIntMax, "model.block_size", "must be at least 1");
  in_range(model.vocab_size, 1, kMaxVocabSize, "model.vocab_size",
           "must be 1 to 1048576 (uint16 token shards up to 65536, uint32 above)");
  if (model.family != "gpt2" && model.family != "llama")
    fail("{}: model.family must be \"gpt2\" or \"llama\", got '{}'", source, model.family);
  if (!model.llama()) {
    const char* llama_only = model.n_kv_head != 0     ? "model.n_kv_head"
                             : model.ffn_hidden != 0  ? "model.ffn_hidden"
                             : rope_scaling != "none" ? "model.rope_scaling"
                                                      : nullptr;
    if (llama_only)
      fail("{}: {} applies to model.family = \"llama\"; a GPT-2 has none (remove it)", source,
           llama_only);
  }
  if (rope_scaling != "none" && rope_scaling != "llama3")
    fail("{}: model.rope_scaling must be \"none\" or \"llama3\", got '{}'", source, rope_scaling);
  real(model.norm_eps, model.norm_eps > 0, "model.norm_eps", "must be more than 0 (e.g. 1e-5)");
  real(model.rope_theta, model.rope_theta > 0, "model.rope_theta",
       "must be more than 0 (e.g. 10000 or 500000)");
  const RopeScaling& rs = model.rope_scaling;
  real(rs.factor, rs.factor > 0, "model.rope_factor", "must be more than 0 (e.g. 8)");
  real(rs.low_freq_factor, rs.low_freq_factor > 0, "model.rope_low_freq_factor",
       "must be more than 0 (e.g. 1)");
  real(rs.high_freq_factor, rs.high_freq_factor > rs.low_freq_factor, "model.rope_high_freq_factor",
       "must be more than model.rope_low_freq_factor (e.g. 4)");
  in_range(rs.original_max_position_embeddings, 1, kIntMax, "model.rope_original_max_position",
           "must be at least 1 (e.g. 8192)");
  in_range(vocab_multiple, 1, 65536, "model.vocab_multiple", "must be 1 to 65536 (1: no padding)");
  try {
    model.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  // Parameter offsets are int64 and tensors are carved from one buffer: keep far from overflow.
  const double ffn = model.llama() ? 3.0 * model.ffn_hidden : 8.0 * model.n_embd;
  const double params =
      static_cast<double>(model.n_layer) * (4.0 * model.n_embd + ffn + 13.0) * model.n_embd +
      ((model.llama() && !model.tie_embeddings ? 2.0 : 1.0) * model.padded_vocab_size +
       model.block_size + 2.0) *
          model.n_embd;
  if (params > kMaxParameters)
    fail(
        "{}: model.n_layer = {}, model.n_embd = {}, model.block_size = {} and model.vocab_size = "
        "{} make {:.3g} parameters, more than kiln's limit of {:.3g}",
        source, model.n_layer, model.n_embd, model.block_size, model.vocab_size, params,
        kMaxParameters);

  in_range(batch_size, 1, kIntMax, "train.batch_size", "must be at least 1");
  in_range(seq_len, 1, kIntMax, "train.seq_len", "must be at least 1");
  if (seq_len > model.block_size)
    fail("{}: train.seq_len ({}) exceeds model.block_size ({})", source, seq_len, model.block_size);
  in_range(grad_accum, 1, kIntMax, "train.grad_accum", "must be at least 1");
  in_range(steps, 1, kIntMax, "train.steps", "must be at least 1");
  in_range(log_every, 1, kIntMax, "train.log_every", "must be at least 1");
  in_range(warmup_steps, 0, kIntMax, "train.warmup_steps", "must be 0 or more");
  in_range(threads, 0, kMaxThreads, "train.threads",
           "must be 0 (the cores shared out among this machine's ranks) to 1024");
  in_range(zero, 0, 3, "train.zero", "ZeRO stages are 0, 1, 2 and 3");
  in_range(val_every, 0, kIntMax, "train.val_every", "must be 0 (never) or more");
  in_range(val_batches, 1, kIntMax, "train.val_batches", "must be at least 1");
  in_range(sample_tokens, 0, kIntMax, "train.sample_tokens", "must be 0 (no samples) or more");
  in_range(ckpt_every, 0, kIntMax, "checkpoint.every", "must be 0 (only at the end) or more");
  in_range(keep_last, 0, kIntMax, "checkpoint.keep_last", "must be 0 (keep all) or more");
  in_range(nonfinite_limit, 0, kIntMax, "train.nonfinite_limit", "must be 0 (never stop) or more");
  in_range(dp, 0, kIntMax, "parallel.dp", "must be 0 (world / (tp x pp)) or more");
  in_range(tp, 1, kIntMax, "parallel.tp", "must be at least 1");
  in_range(pp, 1, kIntMax, "parallel.pp", "must be at least 1");
  if (tp > 1) {
    if (model.llama() && model.kv_heads() % tp != 0)
      fail(
          "{}: parallel.tp = {} does not divide model.n_kv_head = {}: each tensor-parallel rank "
          "holds whole key/value heads; choose a parallel.tp that divides {}",
          source, tp, model.kv_heads(), model.kv_heads());
    if (model.llama() && model.ffn_hidden % tp != 0)
      fail("{}: parallel.tp = {} does not divide model.ffn_hidden = {}", source, tp,
           model.ffn_hidden);
    if (model.n_head % tp != 0)
      fail(
          "{}: parallel.tp = {} does not divide model.n_head = {}: each tensor-parallel rank "
          "holds whole attention heads; choose a parallel.tp that divides {}",
          source, tp, model.n_head, model.n_head);
    if (model.padded_vocab_size % tp != 0)
      fail(
          "{}: parallel.tp = {} does not divide the padded vocabulary {}; set "
          "model.vocab_multiple to a multiple of {}",
          source, tp, model.padded_vocab_size, tp);
    if (sp && (static_cast<int64_t>(batch_size) * seq_len) % tp != 0)
      fail(
          "{}: parallel.sp splits the batch's train.batch_size x train.seq_len = {} tokens "
          "across parallel.tp = {} ranks; make it a multiple of {} or set parallel.sp = false",
          source, static_cast<int64_t>(batch_size) * seq_len, tp, tp);
  }
  in_range(virtual_stages, 1, kIntMax, "parallel.virtual_stages", "must be at least 1");
  const int64_t stages = static_cast<int64_t>(pp) * virtual_stages;
  if (pp > 1 && stages > model.n_layer)
    fail(
        "{}: parallel.pp = {}{} is more than model.n_layer = {}: every pipeline stage needs a "
        "layer",
        source, pp,
        virtual_stages > 1 ? fmt::format(" x parallel.virtual_stages = {}", virtual_stages) : "",
        model.n_layer);
  if (!stage_layers.empty()) {
    int64_t sum = 0;
    for (int n : stage_layers) {
      if (n < 1)
        fail("{}: parallel.stage_layers holds {}: every stage needs at least one layer", source, n);
      sum += n;
    }
    if (static_cast<int64_t>(stage_layers.size()) != stages || sum != model.n_layer)
      fail(
          "{}: parallel.stage_layers gives {} stages of {} layers in all; it needs parallel.pp x "
          "parallel.virtual_stages = {} stages of model.n_layer = {} layers in all",
          source, stage_layers.size(), sum, stages, model.n_layer);
  }
  if (schedule != "1f1b" && schedule != "gpipe" && schedule != "interleaved" &&
      schedule != "zero_bubble")
    fail(
        "{}: parallel.schedule must be \"1f1b\", \"gpipe\", \"interleaved\" or "
        "\"zero_bubble\", got \"{}\"",
        source, schedule);
  if ((schedule == "interleaved") != (virtual_stages > 1))
    fail(
        "{}: parallel.schedule = \"{}\" with parallel.virtual_stages = {}: the interleaved "
        "schedule needs at least 2 chunks per rank, the others 1",
        source, schedule, virtual_stages);
  if (pp > 1 && virtual_stages > 1 && grad_accum % pp != 0)
    fail(
        "{}: train.grad_accum = {} with parallel.pp = {} and parallel.virtual_stages = {}: the "
        "interleaved schedule runs micro-batches in groups of pp; make train.grad_accum a "
        "multiple of parallel.pp",
        source, grad_accum, pp, virtual_stages);
  if (pp > 1 && schedule == "zero_bubble" && recompute == "full")
    fail(
        "{}: parallel.schedule = \"zero_bubble\" with train.recompute = \"full\": the weight "
        "gradients wait for inputs a full recompute does not keep; use \"attention\" or \"none\"",
        source);
  if (pp > 1 && zero >= 2)
    fail(
        "{}: train.zero = {} with parallel.pp = {}: ZeRO-2 and 3 do not run with pipeline "
        "parallelism yet (each micro-batch's gradients would be reduced, and each block's "
        "weights gathered, once per micro-batch in flight); set train.zero = 0 or 1",
        source, zero, pp);

  real(lr, lr >= 0, "train.lr", "must be 0 or more");
  real(min_lr, min_lr >= 0, "train.min_lr", "must be 0 or more");
  if (min_lr > lr)  // as Megatron-LM: the decay never goes up
    fail("{}: train.min_lr = {} is more than train.lr = {}: the cosine decay ends at min_lr <= lr",
         source, min_lr, lr);
  real(weight_decay, weight_decay >= 0, "train.weight_decay", "must be 0 or more");
  real(beta1, beta1 >= 0 && beta1 < 1, "train.beta1", "must be in [0, 1)");
  real(beta2, beta2 >= 0 && beta2 < 1, "train.beta2", "must be in [0, 1)");
  // Stricter than PyTorch (eps >= 0): with eps = 0 a parameter whose gradient is always zero
  // (the padded vocabulary rows) gets 0/0 = NaN.
  real(eps, eps > 0, "train.eps", "must be more than 0 (e.g. 1e-8)");
  real(grad_clip, grad_clip >= 0, "train.grad_clip", "must be 0 (no clipping) or more");
  real(bucket_mb, bucket_mb > 0 && bucket_mb <= kMaxBucketMb, "train.bucket_mb",
       "must be more than 0 and at most 1e6 (1 TB)");
  real(watchdog_seconds, watchdog_seconds >= 0, "train.watchdog_seconds",
       "must be 0 (off) or more");
  real(peak_gflops, peak_gflops >= 0, "hardware.peak_gflops",
       "must be 0 (cached by kiln bench peak, or measured) or more");

  if (dtype != "fp32" && dtype != "bf16")
    fail("{}: train.dtype must be \"fp32\" or \"bf16\", got '{}'", source, dtype);
  if (recompute != "none" && recompute != "attention" && recompute != "selective" &&
      recompute != "full")
    fail(
        "{}: train.recompute must be \"none\", \"attention\" (Megatron's \"selective\") or "
        "\"full\", got '{}'",
        source, recompute);
  if (resume != "none" && resume != "auto" && resume != "must")
    fail("{}: train.resume must be \"none\", \"auto\" or \"must\", got '{}'", source, resume);
  if (tokenizer != "gpt2" && tokenizer != "llama3" && tokenizer != "cl100k" && tokenizer != "bytes")
    fail("{}: data.tokenizer must be \"gpt2\", \"llama3\", \"cl100k\" or \"bytes\", got '{}'",
         source, tokenizer);
  if (attention != "standard" && attention != "flash")
    fail("{}: train.attention must be \"standard\" or \"flash\", got '{}'", source, attention);
  if (comm_backend != "auto" && comm_backend != "mpi" && comm_backend != "shm" &&
      comm_backend != "hier")
    fail("{}: comm.backend must be \"auto\", \"mpi\", \"shm\" or \"hier\", got '{}'", source,
         comm_backend);
  if (comm_compress != "none" && comm_compress != "bf16")
    fail("{}: comm.compress must be \"none\" or \"bf16\", got '{}'", source, comm_compress);
  if (comm_p2p != "auto" && comm_p2p != "mpi")
    fail("{}: comm.p2p must be \"auto\" or \"mpi\", got '{}'", source, comm_p2p);
  if (!is_shm_algorithm(comm_algorithm))
    fail("{}: comm.algorithm must be {}, got '{}'", source, kShmAlgorithmChoices, comm_algorithm);
  // Paths with a newline or another control character are never meant (and break the lines
  // of job scripts and logs they are written into); the sample prompt is text and may hold them.
  for (auto [key, value] : {std::pair<const char*, const std::string*>{"train.out_dir", &out_dir},
                            {"train.init_from", &init_from},
                            {"data.train", &train_data},
                            {"data.val", &val_data}})
    if (has_control_char(*value, false))
      fail("{}: {} = \"{}\" holds a control character", source, key, printable(*value));
  if (has_control_char(sample_prompt, true))
    fail("{}: train.sample_prompt holds a control character other than newline and tab: \"{}\"",
         source, printable(sample_prompt));
}

GridShape TrainConfig::grid_shape(int world) const {
  GridShape g;
  g.tp = tp;
  g.pp = pp;
  if (world % (tp * pp) != 0)
    fail("{}: the job has {} processes, not a multiple of parallel.tp x parallel.pp = {} x {}",
         source, world, tp, pp);
  g.dp = dp > 0 ? dp : world / (tp * pp);
  if (g.size() != world)
    fail(
        "{}: parallel.dp = {} x parallel.pp = {} x parallel.tp = {} is {} ranks but the job has "
        "{} processes; start {} or set parallel.dp = {} (or 0: world / (tp x pp))",
        source, dp, pp, tp, g.size(), world, g.size(), world / (tp * pp));
  return g;
}

namespace {

std::string bytes_text(double b) {
  const char* units[] = {"MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = b / (1024.0 * 1024.0);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace

void check_memory_fits(const TrainConfig& c, double memory_bytes) {
  const ModelConfig& m = c.model;
  const double B = c.batch_size, T = c.seq_len, C = m.n_embd, L = m.n_layer;
  ModelOptions mo;
  mo.bf16 = c.dtype == "bf16";
  mo.recompute = parse_recompute(c.recompute);
  mo.flash_attention = c.attention == "flash";
  // A rough size in double first: the exact plan counts in int64, which absurd sizes overflow.
  const double rough =
      4.0 * B * T * (L * (20.0 * C + m.n_head * T) + m.padded_vocab_size + 8.0 * C);
  const double activations =
      rough > 0x1p60 ? rough
                     : static_cast<double>(activation_plan(m, c.batch_size, c.seq_len, mo).total());
  // Per parameter, what a rank keeps whatever the number of ranks: ZeRO shards the rest.
  const double params = static_cast<double>(param_layout(m).total);
  double per_param = 0;
  if (c.zero < 3) per_param += mo.bf16 ? 6 : 4;  // fp32 weights (and their bf16 copy)
  if (c.zero < 2) per_param += 4;                // gradients
  if (c.zero < 1) per_param += 8;                // AdamW m and v
  const double state = params * per_param;
  // checkpoint.async copies what rank 0 writes into host memory at the step boundary: the
  // weights in fp32, and with ZeRO 0 the whole AdamW state too.
  const double async_copy = c.ckpt_async ? params * (c.zero == 0 ? 12 : 4) : 0;
  if (activations + state + async_copy <= memory_bytes) return;
  std::string what;
  if (async_copy > 0 && activations + state <= memory_bytes) {
    what = "set checkpoint.async = false (saves then write from the training state itself)";
  } else if (activations >= state) {
    what = "lower train.batch_size (raising train.grad_accum keeps the batch) or train.seq_len";
    if (c.recompute != "full") what += ", or set train.recompute = \"full\"";
    if (c.attention != "flash") what += ", or train.attention = \"flash\"";
  } else {
    what = "use a smaller model";
    if (c.zero < 3) what += ", or shard the model state across ranks with train.zero = 1, 2 or 3";
  }
  fail(
      "{}: training needs at least {} per rank, more than the {} of memory here: {} of "
      "activations for one micro-batch of train.batch_size = {} x train.seq_len = {}, and {} of "
      "weights, gradients and optimizer state for {:.3g} parameters "
      "(model.n_layer = {}, model.n_embd = {}, model.block_size = {}, model.vocab_size = {}){}; {}",
      c.source, bytes_text(activations + state + async_copy), bytes_text(memory_bytes),
      bytes_text(activations), c.batch_size, c.seq_len, bytes_text(state), params, m.n_layer,
      m.n_embd, m.block_size, m.vocab_size,
      async_copy > 0 ? fmt::format(", and {} for checkpoint.async's copy", bytes_text(async_copy))
                     : std::string(),
      what);
}

double usable_memory_bytes() {
  double bytes =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  // cgroup v2, then v1: "max" or a number of bytes.
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    double limit = 0;
    if (f >> limit && limit > 0) bytes = std::min(bytes, limit);
  }
  // `ulimit -v` (address space) and `ulimit -d` (data segment) bound the allocations too.
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit rl;
    if (getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      bytes = std::min(bytes, static_cast<double>(rl.rlim_cur));
  }
  return bytes;
}

}  // namespace kiln
