// The direct-copy ("cma") algorithm of the shared-memory engine (src/comm/shm_algo_cma.cpp), forced
// by name: all-gathers and broadcasts read straight from the peers' buffers
// (process_vm_readv; where the kernel refuses, the staged copies run), awkward sizes and counts.
#include <gtest/gtest.h>

#include "comm/shm_algorithm_check.h"

namespace kiln {
namespace {

TEST(ShmAlgorithms, CmaAllGatherAndBroadcastMatchOnEverySize) {
  test::check_all_gather_and_broadcast_on_every_size("cma");
}

}  // namespace
}  // namespace kiln
