// Facts about this process and its machine.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

int64_t peak_rss_bytes();  // the most resident memory this process has held
std::string host_name();
// How many times the job was restarted before this attempt: `kiln launch` sets
// KILN_RESTART_COUNT, Slurm sets SLURM_RESTART_COUNT on a requeued job.
int restart_count();

}  // namespace kiln
