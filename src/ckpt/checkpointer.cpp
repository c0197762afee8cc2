#include "ckpt/checkpointer.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "ckpt/checkpoint_dir.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file.h"
#include "core/process.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// Tests only: the writer thread sleeps this long before each file it writes, so that a test can
// kill a rank while an async save is in flight.
void test_writer_delay() {
  static const int ms = [] {
    const char* v = std::getenv("KILN_TEST_CHECKPOINT_WRITER_DELAY_MS");
    return v ? std::atoi(v) : 0;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

constexpr size_t kCarried = 512;  // doubles: 4 KiB of text carried per rank in a collective

}  // namespace

// Writes one shard of sharded state durably; returns its manifest entry.
ManifestEntry write_shard(const std::string& tmp, const std::string& stem,
                          const std::vector<FlatTensor>& tensors,
                          const CheckpointContents::Shard& sh,
                          const std::map<std::string, std::string>& metadata, int rank) {
  write_state_shard(tmp, stem, sh.rank, sh.ranks, tensors, sh.begin, sh.end, sh.buffers, metadata);
  return manifest_entry(tmp, state_shard_name(stem, sh.rank, sh.ranks), rank);
}

// One async save: what this rank copied at the boundary, and what its writer reports.
struct Checkpointer::Pending {
  int64_t step = 0;
  std::string tmp;
  // The copy: rank 0's model tensors (their views point into `model_bytes`), this rank's shard.
  std::vector<SafeTensorOut> model;
  std::unique_ptr<char[]> model_bytes;  // not zeroed: every byte is copied in
  size_t model_size = 0;
  std::string model_file;
  std::map<std::string, std::string> model_metadata;
  std::string shard_stem;
  std::vector<CheckpointContents::Shard> shards;  // their buffers point into shard_copies
  std::vector<FlatTensor> shard_tensors;
  std::vector<std::vector<float>> shard_copies;
  std::map<std::string, std::string> shard_metadata;
  std::vector<std::pair<std::string, std::string>> files;
  bool writer = false;  // rank 0: the model, the text files, the publication

  // Set by the writer thread before `done`; read by the training thread after join().
  std::string error;
  std::vector<ManifestEntry> entries;
  double seconds = 0;
  std::atomic<bool> done{false};
  std::thread thread;

  void write(int rank) {
    const double t0 = now_seconds();
    try {
      for (const auto& sh : shards) {
        test_writer_delay();
        entries.push_back(write_shard(tmp, shard_stem, shard_tensors, sh, shard_metadata, rank));
      }
      if (writer) {
        test_writer_delay();
        write_safetensors((fs::path(tmp) / model_file).string(), model, model_metadata);
        entries.push_back(manifest_entry(tmp, model_file, rank));
        for (const auto& [name, text] : files) {
          write_file_atomic((fs::path(tmp) / name).string(), text);
          entries.push_back(manifest_entry(tmp, name, rank));
        }
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    // The copy is written: its memory goes back before the publication.
    model_bytes.reset();
    std::vector<std::vector<float>>().swap(shard_copies);
    seconds = now_seconds() - t0;
    done.store(true, std::memory_order_release);
  }
};

Checkpointer::Checkpointer(Communicator& world, std::string root, int keep_last)
    : world_(world), root_(std::move(root)), keep_last_(keep_last) {}

Checkpointer::~Checkpointer() {
  if (!pending_) return;
  if (pending_->thread.joinable()) pending_->thread.join();
  if (pending_->writer) discard_checkpoint_temp(pending_->tmp);
}

int64_t Checkpointer::pending_step() const {
  return pending_ ? pending_->step : -1;
}

void Checkpointer::agree(const std::string& error, const std::string& what,
                         const std::string& discard) {
  double failed = error.empty() ? 0.0 : 1.0;
  if (world_.size() > 1) failed = world_.all_reduce_scalar(failed);
  if (failed == 0) return;
  // Whichever rank failed, the one that made the temporary directory removes it.
  if (!discard.empty()) discard_checkpoint_temp(discard);
  if (!error.empty()) throw Error(error);
  fail("rank {}: another rank failed {} (its message says why)", world_.rank(), what);
}

// Rank 0's string on every rank (a file name: far below the 4 KiB carried).
std::string Checkpointer::from_rank0(const std::string& text) {
  if (world_.size() == 1) return text;
  std::vector<double> buf(kCarried, 0.0);
  if (world_.rank() == 0) {
    KILN_CHECK(text.size() < buf.size() * sizeof(double));
    std::memcpy(buf.data(), text.data(), text.size());
  }
  world_.broadcast(buf.data(), static_cast<int64_t>(buf.size()), DType::F64, 0);
  return std::string(reinterpret_cast<const char*>(buf.data()));
}

// Every rank's entries on every rank, as JSON text in 4 KiB per rank (a rank writes at most a
// shard, the model and a few text files: a few hundred bytes).
std::vector<ManifestEntry> Checkpointer::gather_entries(const std::vector<ManifestEntry>& mine) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& e : mine)
    j.push_back({{"name", e.name}, {"bytes", e.bytes}, {"sha256", e.sha256}, {"rank", e.rank}});
  const std::string text = j.dump();
  const int n = world_.size(), r = world_.rank();
  std::vector<double> buf(kCarried * n, 0.0);
  KILN_CHECK(text.size() < kCarried * sizeof(double));
  std::memcpy(buf.data() + kCarried * r, text.data(), text.size());
  if (n > 1) world_.all_gather(buf.data(), std::vector<int64_t>(n, kCarried), DType::F64);
  std::vector<ManifestEntry> all;
  for (int i = 0; i < n; i++) {
    const char* p = reinterpret_cast<const char*>(buf.data() + kCarried * i);
    const std::string part(p, strnlen(p, kCarried * sizeof(double)));
    auto got = parse_manifest("{\"files\": " + part + "}", "the manifest entries of a rank");
    all.insert(all.end(), got.begin(), got.end());
  }
  return all;
}

std::string Checkpointer::open(int64_t step) {
  const bool writer = world_.rank() == 0;
  std::string tmp, error;
  if (writer) {
    tmp = checkpoint_temp_dir(root_, step, host_name(), getpid());
    try {
      create_checkpoint_temp(tmp);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error, fmt::format("opening checkpoint step {}", step), writer ? tmp : "");
  // Its name only: a rank on another node may reach the run directory by another path.
  return (fs::path(root_) / from_rank0(fs::path(tmp).filename().string())).string();
}

std::string Checkpointer::finish(int64_t step, const std::string& tmp, const std::string& error,
                                 const std::vector<ManifestEntry>& mine) {
  const bool writer = world_.rank() == 0;
  agree(error, fmt::format("writing its part of checkpoint step {}", step), writer ? tmp : "");
  const auto all = gather_entries(mine);
  std::string dir, err;
  if (writer) {
    try {
      // The manifest last: a directory holding it has every part, durable.
      write_file_atomic((fs::path(tmp) / kManifestFile).string(), manifest_json(step, all));
      dir = publish_checkpoint(root_, step, tmp, keep_last_);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  // Nobody goes on before the checkpoint is complete (or has failed everywhere).
  agree(err, fmt::format("publishing checkpoint step {}", step), writer ? tmp : "");
  return dir.empty() ? (fs::path(root_) / checkpoint_name(step)).string() : dir;
}

std::string Checkpointer::save(int64_t step, const CheckpointContents& c) {
  complete(true);
  const bool writer = world_.rank() == 0;
  const std::string tmp = open(step);
  std::string error;
  std::vector<ManifestEntry> mine;

  // Each rank's own shards.
  try {
    for (const auto& sh : c.shards)
      mine.push_back(
          write_shard(tmp, c.shard_stem, c.shard_tensors, sh, c.shard_metadata, world_.rank()));
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(error, fmt::format("writing its part of checkpoint step {}", step), writer ? tmp : "");

  // The whole tensors, one at a time. After a write error rank 0 goes on through the hooks, so
  // that no peer is left alone in a gather.
  std::optional<SafeTensorsWriter> file;
  if (writer) {
    try {
      file.emplace((fs::path(tmp) / c.model_file).string(), c.model, c.model_metadata);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  for (size_t i = 0; i < c.model.size(); i++) {
    if (c.before_tensor) c.before_tensor(i);
    if (file && error.empty()) {
      try {
        file->write(c.model[i].data);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (c.after_tensor) c.after_tensor(i);
  }
  if (writer && error.empty()) {
    try {
      file->finish();
      mine.push_back(manifest_entry(tmp, c.model_file, 0));
      for (const auto& [name, text] : c.files) {
        write_file_atomic((fs::path(tmp) / name).string(), text);
        mine.push_back(manifest_entry(tmp, name, 0));
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  return finish(step, tmp, error, mine);
}

void Checkpointer::save_async(int64_t step, const CheckpointContents& c) {
  complete(true);
  auto p = std::make_unique<Pending>();
  p->step = step;
  p->writer = world_.rank() == 0;
  p->tmp = open(step);
  // The copy, at the boundary: every rank runs the hooks (ZeRO-3 gathers each tensor there);
  // rank 0 keeps the bytes.
  p->model_file = c.model_file;
  p->model_metadata = c.model_metadata;
  size_t bytes = 0;
  std::vector<size_t> sizes;
  for (const auto& t : c.model) {
    size_t n = t.dtype == "F32" || t.dtype == "I32" ? 4 : 0;
    KILN_CHECK(n > 0);
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    sizes.push_back(n);
    bytes += n;
  }
  if (p->writer) {
    p->model_bytes.reset(new char[bytes]);
    p->model_size = bytes;
  }
  size_t at = 0;
  for (size_t i = 0; i < c.model.size(); i++) {
    if (c.before_tensor) c.before_tensor(i);
    if (p->writer) {
      std::memcpy(p->model_bytes.get() + at, c.model[i].data, sizes[i]);
      p->model.push_back(c.model[i]);
      p->model.back().data = p->model_bytes.get() + at;
    }
    at += sizes[i];
    if (c.after_tensor) c.after_tensor(i);
  }
  if (!c.shards.empty()) {
    p->shard_stem = c.shard_stem;
    p->shard_tensors = c.shard_tensors;
    p->shard_metadata = c.shard_metadata;
    for (const auto& sh : c.shards)
      for (const auto& b : sh.buffers)
        p->shard_copies.emplace_back(b.data, b.data + (sh.end - sh.begin));
    size_t k = 0;  // the copies in the same order, the shards pointing at them
    for (const auto& sh : c.shards) {
      CheckpointContents::Shard copy = sh;
      for (auto& b : copy.buffers) b.data = p->shard_copies[k++].data();
      p->shards.push_back(std::move(copy));
    }
  }
  p->files = c.files;
  snapshot_bytes_ = static_cast<int64_t>(p->model_size);
  for (const auto& s : p->shard_copies)
    snapshot_bytes_ += static_cast<int64_t>(s.size() * sizeof(float));
  Pending* raw = p.get();
  const int rank = world_.rank();
  pending_ = std::move(p);
  raw->thread = std::thread([raw, rank] { raw->write(rank); });
}

std::string Checkpointer::complete(bool wait) {
  if (!pending_) return "";
  if (!wait) {
    double busy = pending_->done.load(std::memory_order_acquire) ? 0.0 : 1.0;
    if (world_.size() > 1) busy = world_.all_reduce_scalar(busy);
    if (busy > 0) return "";
  }
  pending_->thread.join();
  // From here the save is the training thread's: published or failed, it is no longer pending.
  std::unique_ptr<Pending> p = std::move(pending_);
  last_write_seconds_ = p->seconds;
  return finish(p->step, p->tmp, p->error, p->entries);
}

}  // namespace kiln
