// The one-shot algorithm of the shared-memory engine (src/comm/shm_algo_one_shot.cpp), forced
// by name: its all-reduce (in the lines and staged whole) and
// reduce-scatter (in the lines; above them the direct one) against the reference summed in rank
// order, fp32 and bf16, on awkward sizes and counts.
#include <gtest/gtest.h>

#include "comm/shm_algorithm_check.h"

namespace kiln {
namespace {

TEST(ShmAlgorithms, OneShotAllReduceMatchesTheReferenceInItsOrderOnEverySize) {
  test::check_all_reduce_on_every_size("one_shot");
}

TEST(ShmAlgorithms, OneShotReduceScatterMatchesTheReferenceWithEvenAndUnevenCounts) {
  test::check_reduce_scatter_on_every_size("one_shot", "direct");
}

}  // namespace
}  // namespace kiln
