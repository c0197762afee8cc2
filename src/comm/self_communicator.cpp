#include <cstring>

#include "comm/communicator.h"
#include "core/error.h"

namespace kiln {
namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// One rank: every collective is the identity.
class SelfCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "self"; }
  std::shared_ptr<Work> all_reduce_async(void*, int64_t, DType) override { return done(); }
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out,
                                             const std::vector<int64_t>& counts, DType t) override {
    KILN_CHECK(counts.size() == 1);
    if (in != out) std::memmove(out, in, counts[0] * dtype_bytes(t));
    return done();
  }
  std::shared_ptr<Work> all_gather_async(void*, const std::vector<int64_t>& counts,
                                         DType) override {
    KILN_CHECK(counts.size() == 1);
    return done();
  }
  std::shared_ptr<Work> broadcast_async(void*, int64_t, DType, int root) override {
    KILN_CHECK(root == 0);
    return done();
  }
  std::shared_ptr<Work> send_async(const void*, int64_t, DType, int peer, int) override {
    fail("send to rank {} in a one-rank job", peer);
  }
  std::shared_ptr<Work> recv_async(void*, int64_t, DType, int peer, int) override {
    fail("receive from rank {} in a one-rank job", peer);
  }
  std::shared_ptr<Work> barrier_async() override { return done(); }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override {
    return std::make_unique<SelfCommunicator>();
  }

 private:
  // Every operation is finished when issued: one shared handle serves them all, so a step's
  // collectives allocate nothing.
  static std::shared_ptr<Work> done() {
    static const std::shared_ptr<Work> finished = std::make_shared<DoneWork>();
    return finished;
  }
};

}  // namespace

size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::F64:
      return 8;
  }
  return 0;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::unique_ptr<Communicator> make_self_communicator() {
  return std::make_unique<SelfCommunicator>();
}

}  // namespace kiln
