// Point-to-point messages of the shared-memory engine: see shm_p2p.h.
#include "comm/shm_p2p.h"

#include <cerrno>
#include <cstring>

#include "comm/shm_shared.h"
#include "core/clock.h"
#include "core/error.h"

namespace kiln::detail::shm {

struct ShmP2p::Message : public Work {
  ShmP2p* owner = nullptr;
  bool sending = false;
  void* buf = nullptr;  // a send's buffer is only read
  int64_t bytes = 0, count = 0;
  int peer = -1, tag = 0;
  uint64_t seq = 0;   // a send's sequence number once posted
  bool done = false;  // under the owner's mutex
  std::string error;  // set with done when it failed
  OpDesc desc() const {
    return sending ? OpDesc{"send", count, "to rank", peer}
                   : OpDesc{"receive", count, "from rank", peer};
  }
  void wait() override { owner->wait(*this); }
  bool test() override { return owner->test(*this); }
};

ShmP2p::ShmP2p(ShmEngine& engine)
    : e_(engine),
      me_(engine.rank()),
      size_(engine.size()),
      posted_(size_, 0),
      oldest_(size_, 0),
      queued_(size_) {}

std::string ShmP2p::broken_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

void ShmP2p::mark_broken(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken()) return;
  reason_ = why;
  broken_.store(true, std::memory_order_release);
}

std::shared_ptr<Work> ShmP2p::send(const void* buf, int64_t bytes, int64_t count, int peer,
                                   int tag) {
  return start(true, const_cast<void*>(buf), bytes, count, peer, tag);
}

std::shared_ptr<Work> ShmP2p::recv(void* buf, int64_t bytes, int64_t count, int peer, int tag) {
  return start(false, buf, bytes, count, peer, tag);
}

// A send is posted (or queued behind earlier sends to its peer); a receive waits in line.
std::shared_ptr<Work> ShmP2p::start(bool sending, void* buf, int64_t bytes, int64_t count, int peer,
                                    int tag) {
  KILN_CHECK(peer >= 0 && peer < size_ && bytes >= 0);
  auto m = std::make_shared<Message>();
  m->owner = this;
  m->sending = sending;
  m->buf = buf;
  m->bytes = bytes;
  m->count = count;
  m->peer = peer;
  m->tag = tag;
  std::lock_guard<std::mutex> lock(mu_);
  if (broken()) {
    m->done = true;
    m->error = fmt::format("rank {}: {} not run: an earlier operation failed ({})", me_,
                           m->desc().text(), reason_);
  } else if (!sending) {
    receiving_.push_back(m);
  } else if (queued_[peer].empty() && try_post(*m)) {
    sending_.push_back(m);
  } else {
    queued_[peer].push_back(m);
  }
  return m;
}

// The pair's next descriptor is free once the message kMailSlots before it was taken.
bool ShmP2p::try_post(Message& m) {
  const uint64_t s = posted_[m.peer] + 1;
  Mail& d = e_.mail(me_, m.peer, s);
  if (s > kMailSlots && d.taken.load(std::memory_order_acquire) < s - kMailSlots) return false;
  d.tag = m.tag;
  d.bytes = m.bytes;
  d.addr = reinterpret_cast<uint64_t>(m.buf);
  d.region = 0;
  d.offset = 0;
  if (m.bytes <= kMailInline) {
    if (m.bytes > 0) std::memcpy(d.data, m.buf, static_cast<size_t>(m.bytes));
  } else {
    uint32_t id = 0;
    int64_t offset = 0;
    if (SharedRegistry::instance().find_own(m.buf, m.bytes, &id, &offset)) {
      d.region = id;
      d.offset = offset;
    }
  }
  d.posted.store(s, std::memory_order_release);
  posted_[m.peer] = s;
  m.seq = s;
  return true;
}

// The oldest posted message from m's peer with m's tag, if any, copied into m's buffer.
bool ShmP2p::try_receive(Message& m) {
  for (uint64_t q = oldest_[m.peer] + 1;; q++) {
    Mail& d = e_.mail(m.peer, me_, q);
    if (d.taken.load(std::memory_order_relaxed) >= q) continue;  // taken out of order earlier
    if (d.posted.load(std::memory_order_acquire) < q) return false;
    if (d.tag != m.tag) continue;
    if (d.bytes > m.bytes) {
      m.error = fmt::format(
          "rank {}: {} (tag {}): the message has {} bytes, more than the {} its buffer holds (the "
          "two ranks disagree about the tensor's size)",
          me_, m.desc().text(), m.tag, d.bytes, m.bytes);
    } else {
      copy_in(m, d);
    }
    if (!m.error.empty()) return true;  // not taken: the sender's wait fails by its timeout
    d.taken.store(q, std::memory_order_release);
    const int p = m.peer;
    while (e_.mail(p, me_, oldest_[p] + 1).taken.load(std::memory_order_relaxed) >= oldest_[p] + 1)
      oldest_[p]++;
    return true;
  }
}

void ShmP2p::copy_in(Message& m, Mail& d) {
  if (d.bytes <= kMailInline) {
    if (d.bytes > 0) std::memcpy(m.buf, d.data, static_cast<size_t>(d.bytes));
    return;
  }
  // A shared buffer this process has mapped is read in place; any other through the kernel.
  const char* p = d.region == 0 ? nullptr
                                : SharedRegistry::instance().find_peer(e_.pid_of(m.peer), d.region,
                                                                       d.offset, d.bytes);
  if (p) {
    std::memcpy(m.buf, p, static_cast<size_t>(d.bytes));
  } else if (!e_.read_from(m.peer, m.buf, d.addr, d.bytes)) {
    m.error = fmt::format("rank {}: {} (tag {}): cannot read rank {}'s buffer: {}", me_,
                          m.desc().text(), m.tag, m.peer, std::strerror(errno));
  }
}

void ShmP2p::progress() {
  for (int p = 0; p < size_; p++)
    while (!queued_[p].empty() && try_post(*queued_[p].front())) {
      sending_.push_back(std::move(queued_[p].front()));
      queued_[p].pop_front();
    }
  for (size_t i = 0; i < sending_.size();) {
    Message& m = *sending_[i];
    if (e_.mail(me_, m.peer, m.seq).taken.load(std::memory_order_acquire) >= m.seq) {
      m.done = true;
      sending_[i] = std::move(sending_.back());
      sending_.pop_back();
    } else {
      i++;
    }
  }
  // In posting order; a receive waits while an earlier one for the same peer and tag does.
  for (auto it = receiving_.begin(); it != receiving_.end();) {
    Message& m = **it;
    bool behind = false;
    for (auto e = receiving_.begin(); e != it && !behind; ++e)
      behind = (*e)->peer == m.peer && (*e)->tag == m.tag;
    if (!behind && try_receive(m)) {
      m.done = true;
      if (!m.error.empty() && !broken()) {
        reason_ = m.error;
        broken_.store(true, std::memory_order_release);
      }
      it = receiving_.erase(it);
    } else {
      ++it;
    }
  }
}

bool ShmP2p::test(Message& m) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!m.done) progress();
  return m.done;
}

void ShmP2p::wait(Message& m) {
  const double limit = e_.options().timeout_seconds;
  double start = 0, waited = 0;
  for (int spins = 0;; spins++) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!m.done) progress();
      if (m.done) {
        if (!m.error.empty()) throw Error(m.error);
        return;
      }
      if (broken())
        fail_message(m, fmt::format("not completed: an earlier operation failed ({})", reason_));
      if (waited > limit)
        fail_message(m, fmt::format("(tag {}) timed out after {:.0f} s (a peer may have died or be "
                                    "stuck)",
                                    m.tag, limit));
    }
    if (spins >= 32) {  // the clock only once a wait is not short
      const double now = now_seconds();
      if (start == 0) start = now;
      waited = now - start;
    }
    ShmEngine::pause(waited, !e_.oversubscribed());
  }
}

// Called with mu_ held: the message leaves the lists (a receive never writes its buffer after
// this), the communicator is broken, and the error is thrown.
void ShmP2p::fail_message(Message& m, const std::string& why) {
  auto drop = [&](auto& v) {
    for (auto it = v.begin(); it != v.end(); ++it)
      if (it->get() == &m) {
        v.erase(it);
        return;
      }
  };
  drop(receiving_);
  drop(sending_);
  drop(queued_[m.peer]);
  m.done = true;
  m.error = fmt::format("rank {}: {} {}", me_, m.desc().text(), why);
  if (!broken()) {
    reason_ = m.error;
    broken_.store(true, std::memory_order_release);
  }
  throw Error(m.error);
}

}  // namespace kiln::detail::shm
