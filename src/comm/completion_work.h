// A Work finished by another thread (a backend's communication thread): wait() blocks until
// finish() and rethrows its error.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>

#include "comm/communicator.h"
#include "core/error.h"

namespace kiln {

class CompletionWork : public Work {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (!error_.empty()) throw Error(error_);
  }
  bool test() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  // Marks it finished; a non-empty `error` is thrown from wait().
  void finish(std::string error) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

}  // namespace kiln
