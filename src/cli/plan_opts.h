// `kiln plan`'s options as parsed, shared by the files of the command: plan_cmd.cpp (the
// planning), plan_cluster.cpp (the cluster the flags describe, and its summary with no model).
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "plan/hardware.h"
#include "plan/job.h"

namespace kiln::cli {

struct PlanOpts {
  // model
  std::string config;
  std::vector<std::string> sets;
  std::string model;
  // hardware
  std::string gpu, hardware;
  int nodes = 1, gpus = 0, gpus_per_node = 8, nics_per_node = 8;
  std::string intra_link, network, topology = "fat-tree", rank_order = "tp-dp-pp";
  double intra_link_gbs = 0, nic_gbps = 0, oversubscription = 1, power_cap_w = 0;
  int nodes_per_domain = 32, slices = 1;
  // job
  int seq_len = 0;
  std::string batch_tokens, tokens;
  std::string dtype = "bf16", attention = "flash", software, grad_reduce, cp_comm, attention_kernel;
  bool no_overlap = false;
  double mem_allowance = 0.10, usd = 0, gpu_power_w = 0, node_overhead_w = -1, pue = 1.2;
  double gco2 = 480;
  double failures_per_gpu_hour = plan::JobSpec{}.failures_per_gpu_hour;
  double restart_minutes = 10;
  double ckpt_write_gbs = 0;
  double storage_gbs = 2000;
  plan::JobSpec prices;  // the other ways to pay (reserved, spot, owned) and $/kWh
  // what to do
  std::string layout;
  int top = 5;
  double days = 0, budget = 0;  // --days, --budget
  bool json = false, list_models = false, list_gpus = false, list_software = false;
  bool fp8_param_gather = false, attention_unpad = false;
  // The flags given on the command line, by their long names, and those of the Hardware group
  // (the cluster summary's own).
  std::vector<std::string> given, hardware_flags;
  bool flag_given(const std::string& f) const {
    return std::find(given.begin(), given.end(), f) != given.end();
  }
  // calibration
  bool calibrate = false;
  std::string output = "configs/hardware/this-cpu.toml";
  double seconds = 0.2;
  int rounds = 3;
  int threads = 0;
};

// Which flags were given (they override a hardware file and the device's usual server).
struct Given {
  CLI::Option *nodes, *gpus, *gpus_per_node, *intra_link, *intra_link_gbs, *network, *nics_per_node,
      *nic_gbps, *topology, *oversubscription, *nodes_per_domain, *rank_order, *slices, *seq_len,
      *batch_tokens, *tokens, *dtype, *attention, *software, *grad_reduce, *fp8_param_gather,
      *cp_comm, *attention_kernel, *attention_unpad, *days, *budget, *power_cap;
};

// The cluster the flags (and a hardware file) describe: a catalog device's usual server, the
// file's [node] and [cluster], then every flag given.
plan::ClusterSpec cluster_from(const PlanOpts& o, const Given& g);

// --gpu-power-w (an average draw) above --power-cap-w (the most a device may draw) is refused.
void check_power_under_cap(const PlanOpts& o, const plan::ClusterSpec& c);

// No model: what the cluster is (devices, memory, peaks, links, power, and what an hour of it
// costs where priced), for people or --json; a flag only a model uses is refused by name.
void summarize(const PlanOpts& o, const Given& g);

}  // namespace kiln::cli
