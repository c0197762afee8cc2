// Point-to-point messages of the shared-memory engine (send_async / recv_async of the "shm"
// backend), one copy each, made by the receiver straight from the sender's memory:
//
//   - The sender writes a descriptor of its buffer into the next of the kMailSlots descriptors
//     the pair (sender, receiver) owns in the engine's window (shm_engine.h: Mail) and stores the
//     message's sequence number in it. Nothing is copied and nothing waits: a send whose
//     descriptor is still in use (kMailSlots messages to that peer not yet received) is queued
//     here and posted when one frees.
//   - The receiver finds the oldest posted message from its peer with its tag (MPI's matching:
//     by peer and tag, in posting order for the same pair) and copies it into its buffer: a
//     message of up to kMailInline bytes from the descriptor; a buffer in alloc_shared memory
//     that this process has mapped with memcpy, at memory speed; any other with
//     process_vm_readv (one copy, as MPI's single-copy transport). It then stores the sequence
//     number in the descriptor's `taken`, which completes the send.
//
// No thread polls: a message progresses when a rank waits for or tests any send or receive of
// this communicator, in posting order, so two ranks that each wait for their own send to
// complete receive each other's messages while they wait. The engine's collectives run on their
// own thread beside this; the two share only the window's read-only parts (pids) and nothing is
// ordered between them, as with MPI. Used only when every rank can read its peers' memory
// (ShmEngine::peers_readable); otherwise point-to-point goes through MPI.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/shm_engine.h"

namespace kiln::detail::shm {

class ShmP2p {
 public:
  explicit ShmP2p(ShmEngine& engine);

  std::shared_ptr<Work> send(const void* buf, int64_t bytes, int64_t count, int peer, int tag);
  std::shared_ptr<Work> recv(void* buf, int64_t bytes, int64_t count, int peer, int tag);

  // A message timed out or failed: the reason (the collectives refuse to run after it, too).
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  std::string broken_reason() const;
  // A collective of the same communicator failed: later messages fail too, saying why.
  void mark_broken(const std::string& why);

  struct Message;

 private:
  friend struct Message;
  std::shared_ptr<Work> start(bool sending, void* buf, int64_t bytes, int64_t count, int peer,
                              int tag);
  // Posts queued sends whose descriptors are free, completes sends whose message was taken and
  // receives whose message arrived (copying it). Called with mu_ held.
  void progress();
  bool try_post(Message& m);
  bool try_receive(Message& m);
  void copy_in(Message& m, Mail& d);
  void wait(Message& m);
  bool test(Message& m);
  [[noreturn]] void fail_message(Message& m, const std::string& why);

  ShmEngine& e_;
  const int me_, size_;
  mutable std::mutex mu_;
  std::vector<uint64_t> posted_;  // per peer: messages this rank has posted to it
  std::vector<uint64_t> oldest_;  // per peer: every message from it before this one is taken
  std::vector<std::deque<std::shared_ptr<Message>>> queued_;  // per peer: sends not yet posted
  std::vector<std::shared_ptr<Message>> sending_;             // posted sends not yet taken
  std::deque<std::shared_ptr<Message>> receiving_;  // receives not yet matched, in posting order
  std::atomic<bool> broken_{false};
  std::string reason_;  // under mu_
};

}  // namespace kiln::detail::shm
