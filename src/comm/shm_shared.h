// Shared buffers of the shared-memory engine (Communicator::alloc_shared): the process's list of
// its own memfd regions and of the peers' regions it mapped, and the SharedMemory that owns a
// mapping. Used by comm/shm_communicator.cpp.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <random>
#include <vector>

#include "comm/communicator.h"

namespace kiln::detail::shm {

// ---- shared buffers (Communicator::alloc_shared): memfd memory that every rank of the
// allocating communicator maps. The process keeps one list of its own regions and of the peers'
// regions it mapped, so that any engine over those ranks can use them.

class SharedRegistry {
 public:
  static SharedRegistry& instance() {  // never destroyed: memory may outlive static objects
    static SharedRegistry* r = new SharedRegistry;
    return *r;
  }
  uint32_t add_own(char* base, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t id = next_id_;
    next_id_ = next_id_ + 1 < (1u << 24) ? next_id_ + 1 : 1;  // ids travel in 24 bits
    own_.push_back({getpid(), id, base, bytes});
    return id;
  }
  void add_peer(pid_t pid, uint32_t id, const char* base, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    peers_.push_back({pid, id, const_cast<char*>(base), bytes});
  }
  void remove(const char* base) {  // an own or a peer's region, by where it is mapped here
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* v : {&own_, &peers_})
      v->erase(
          std::remove_if(v->begin(), v->end(), [&](const Region& r) { return r.base == base; }),
          v->end());
  }
  // The own region holding [p, p + bytes): its id and p's offset in it.
  bool find_own(const void* p, int64_t bytes, uint32_t* id, int64_t* offset) {
    std::lock_guard<std::mutex> lock(mu_);
    const char* c = static_cast<const char*>(p);
    for (const Region& r : own_)
      if (c >= r.base && c + bytes <= r.base + r.bytes) {
        *id = r.id;
        *offset = c - r.base;
        return true;
      }
    return false;
  }
  // Where [offset, offset + bytes) of process pid's region `id` is mapped here, or null.
  const char* find_peer(pid_t pid, uint32_t id, int64_t offset, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Region& r : peers_)
      if (r.pid == pid && r.id == id && offset >= 0 && offset + bytes <= r.bytes)
        return r.base + offset;
    return nullptr;
  }

 private:
  struct Region {
    pid_t pid;
    uint32_t id;
    char* base;
    int64_t bytes;
  };
  std::mutex mu_;
  std::vector<Region> own_, peers_;
  // Ids start at a random point (below 2^23; they travel in 24 bits), so that a process that
  // reuses an earlier peer's pid does not also reuse its region ids.
  uint32_t next_id_ = 1 + std::random_device{}() % (1u << 22);
};

// This rank's region and its mappings of its peers' (unmapped when destroyed).
class MappedShared : public SharedMemory {
 public:
  MappedShared(char* base, int64_t bytes, int64_t mapped) : mapped_(mapped) {
    data_ = base;
    bytes_ = bytes;
    removable_ = true;  // a memfd mapping, page-aligned, whole pages
  }
  ~MappedShared() override {
    for (auto& [base, bytes] : peers_) {
      SharedRegistry::instance().remove(base);
      munmap(const_cast<char*>(base), bytes);
    }
    SharedRegistry::instance().remove(static_cast<char*>(data_));
    munmap(data_, mapped_);
  }
  std::vector<std::pair<const char*, int64_t>> peers_;

 private:
  int64_t mapped_;
};

}  // namespace kiln::detail::shm
