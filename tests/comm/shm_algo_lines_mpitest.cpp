// The lines algorithm of the shared-memory engine (src/comm/shm_algo_lines.cpp), forced
// by name: all-gathers and broadcasts in the ranks' lines (larger ones are
// declined and run as the tuner chooses) on awkward sizes and counts, fp32 and bf16.
#include <gtest/gtest.h>

#include "comm/shm_algorithm_check.h"

namespace kiln {
namespace {

TEST(ShmAlgorithms, LinesAllGatherAndBroadcastMatchOnEverySize) {
  test::check_all_gather_and_broadcast_on_every_size("lines");
}

}  // namespace
}  // namespace kiln
