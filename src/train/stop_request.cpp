#include "train/stop_request.h"

#include <signal.h>

#include <atomic>

namespace kiln {

namespace {

std::atomic<int> g_stop{0};

void on_stop_signal(int sig) {
  g_stop.store(sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() {
  return g_stop.load();
}

void clear_stop_signal() {
  g_stop.store(0);
}

}  // namespace kiln
