// The staged algorithm of the shared-memory engine (src/comm/shm_algo_staged.cpp), forced
// by name: all-gathers and broadcasts through the staging slots, on awkward sizes
// and counts (an empty rank), fp32 and bf16, from every root.
#include <gtest/gtest.h>

#include "comm/shm_algorithm_check.h"

namespace kiln {
namespace {

TEST(ShmAlgorithms, StagedAllGatherAndBroadcastMatchOnEverySize) {
  test::check_all_gather_and_broadcast_on_every_size("staged");
}

}  // namespace
}  // namespace kiln
