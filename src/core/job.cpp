#include "core/job.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace kiln {

namespace {
std::atomic<void (*)(int)> g_abort_all{nullptr};
}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

void set_job_abort(void (*abort_all)(int code)) {
  g_abort_all.store(abort_all);
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (auto f = g_abort_all.load()) f(code);  // returns only when it could not abort
  std::exit(code);
}

}  // namespace kiln
