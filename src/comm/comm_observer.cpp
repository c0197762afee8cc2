#include "comm/comm_observer.h"

#include <fmt/format.h>

#include <atomic>

namespace kiln {

namespace {

class NoObserver : public CommObserver {
 public:
  uint64_t issued(std::string_view, uint64_t, std::string_view, bool) override { return 0; }
  uint64_t issued(std::string_view, uint64_t, const OpDesc&, bool) override { return 0; }
  void started(uint64_t) override {}
  void finished(uint64_t, bool) override {}
  bool tracing() const override { return false; }
  void span(const std::string&, double, double, std::string_view, uint64_t) override {}
  void name_thread(const std::string&) override {}
};

NoObserver g_none;
std::atomic<CommObserver*> g_observer{&g_none};

}  // namespace

CommObserver& comm_observer() {
  return *g_observer.load(std::memory_order_acquire);
}

void set_comm_observer(CommObserver* observer) {
  g_observer.store(observer ? observer : &g_none, std::memory_order_release);
}

std::string OpDesc::text() const {
  if (count < 0) return kind;  // no count: "barrier"
  std::string s = fmt::format("{} of {} elements", kind, count);
  if (peer_word) s += fmt::format(" {} {}", peer_word, peer);
  return s;
}

}  // namespace kiln
