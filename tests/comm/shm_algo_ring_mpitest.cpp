// The ring algorithm of the shared-memory engine (src/comm/shm_algo_ring.cpp), forced
// by name: all-reduce and reduce-scatter against the reference summed in the
// ring's order (slice j: j+1, ..., j), fp32 and bf16, on awkward sizes and counts.
#include <gtest/gtest.h>

#include "comm/shm_algorithm_check.h"

namespace kiln {
namespace {

TEST(ShmAlgorithms, RingAllReduceMatchesTheReferenceInItsOrderOnEverySize) {
  test::check_all_reduce_on_every_size("ring");
}

TEST(ShmAlgorithms, RingReduceScatterMatchesTheReferenceWithEvenAndUnevenCounts) {
  test::check_reduce_scatter_on_every_size("ring", "ring");
}

}  // namespace
}  // namespace kiln
