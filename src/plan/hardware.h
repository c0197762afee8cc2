// Hardware the planner knows: accelerators (with datasheet numbers and the fraction of them that
// real kernels reach), the links inside a node, the network between nodes and its topology.
// A hardware TOML file describes custom hardware or this machine as `kiln plan --calibrate`
// measured it (configs/hardware/*.toml; docs/planner.md lists the keys).
#pragma once
#include <string>
#include <vector>

#include "plan/torus.h"

namespace kiln::plan {

// Training precision: fp32, 16-bit mixed precision, or fp8 (linear layers' matmuls in fp8 with
// per-tensor scales, everything else as bf16 mixed precision: Transformer Engine, torchao).
enum class Dtype { fp32, bf16, fp16, fp8 };
Dtype parse_dtype(const std::string& s);
const char* dtype_name(Dtype d);
inline int activation_bytes(Dtype d) {
  return d == Dtype::fp32 ? 4 : 2;
}

// One accelerator, or one CPU process. Rates are per device; GB/s means 1e9 bytes per second.
struct DeviceSpec {
  std::string name;  // catalog key
  std::string description;
  std::string source;  // where the numbers come from
  bool cpu = false;
  // Architecture: ampere, hopper, blackwell, ada, cdna2, cdna3, tpu-v4, davinci, cpu (software
  // profiles give kernel rates per architecture; "" for none known).
  std::string arch;
  double peak_tflops_16 = 0;     // dense bf16/fp16 matrix peak (0: not supported)
  bool bf16 = true;              // false: that peak is fp16's only (no bf16 multipliers)
  double peak_tflops_8 = 0;      // dense fp8 matrix peak (0: no fp8 tensor cores)
  double peak_tflops_32 = 0;     // fp32 peak
  double memory_gib = 0;         // capacity
  double reserved_gib = 0;       // taken before training: runtime, library workspaces, buffers
  double mem_bw_gbs = 0;         // memory bandwidth
  double matmul_efficiency = 0;  // fraction of the peak a large matmul sustains
  // The same for fp8 matmuls (of peak_tflops_8); 0: matmul_efficiency × the H100's fp8/bf16
  // burst ratio (docs/planner.md, "fp8").
  double matmul_efficiency_fp8 = 0;
  // The attention core's products (score and value, or a flash kernel) relative to the matmul
  // rate; 1 on GPUs (batched GEMMs), measured for kiln's own attention loops on CPUs.
  double attention_efficiency = 1;
  // The share of a short burst's rate a compute-bound kernel keeps through training, when power
  // and heat lower the clocks (the ML Engineering book's MSMF over MAMF). matmul_efficiency
  // already includes it; kernel rates a software profile takes from burst benchmarks (flash
  // attention's) are scaled by it. 1: the device sustains what it bursts.
  double sustained = 1;
  double mem_bw_efficiency = 0;   // fraction of the bandwidth a streaming kernel reaches
  double kernel_overhead_us = 0;  // fixed cost of every kernel: launch, ramp-up, tail
  // The fixed cost of one matmul (launch, tile set-up, the last wave's tail), where a measured
  // GEMM table gives it; 0: kernel_overhead_us.
  double matmul_overhead_us = 0;
  // How much slower compute runs while a data-parallel collective is in flight beside it (its
  // kernels hold SMs and memory bandwidth): 0.189 is 18.9% slower. 0: no contention.
  double overlap_slowdown = 0;
  double cache_mib = 0;        // last-level cache that memory-bound kernels run from when
  double cache_bw_gbs = 0;     //   their data fits (measured on CPUs; 0 leaves it out)
  double tdp_w = 0;            // power of one device at full load
  double node_overhead_w = 0;  // the rest of a server (CPUs, NICs, fans, storage), per node
  // The server this device usually comes in; cluster flags override each.
  int gpus_per_node = 8;
  std::string intra_link = "nvlink";
  double intra_link_gbs = 0;  // per device and direction
  std::string network = "ib-ndr";
  int nics_per_node = 8;
  double nic_gbps = 400;  // Gb/s per NIC
  // TPU-style chips: joined by ICI links in a torus of this many dimensions (3; 0: none), in
  // slices of at most max_slice_chips (one pod). intra_link_gbs is then one link's one-way
  // rate, and the chip has 2 links per dimension; nodes are the hosts, network their
  // data-centre NICs.
  int torus_dims = 0;
  int max_slice_chips = 0;
  // Training throughput against the board's power limit, measured: (limit W, tokens/s at that
  // limit over tokens/s at the curve's highest limit), increasing in W; empty: none published for
  // this part, and --power-cap-w is refused. The peaks above are at the limit tdp_w.
  std::vector<std::pair<double, double>> power_curve;
  std::string power_curve_source;
  double power_cap_w = 0;  // the limit --power-cap-w set (0: the part's own, tdp_w)
  // The name as plans print it: "h100-sxm", or "h100-sxm at 500 W" under --power-cap-w.
  std::string label() const;

  // The dense peak MFU is quoted against: fp32's, or the 16-bit one (fp8 runs too, as torchtitan
  // and Meta report them; the fp8 peak is peak_tflops_8).
  double peak_tflops(Dtype d) const { return d == Dtype::fp32 ? peak_tflops_32 : peak_tflops_16; }
  // FLOP/s a large matmul of a linear layer sustains in training: fp8 runs them on the fp8
  // tensor cores, every other precision at its own peak.
  double linear_flops(Dtype d) const;
  // An NVIDIA GPU (CUDA): ampere, hopper, blackwell or ada.
  bool nvidia() const;
  // The device's family, which decides the software that runs on it: "nvidia", "amd" (cdna),
  // "tpu", "ascend" (davinci), "cpu", or "" when the architecture is not one kiln knows.
  std::string platform() const;
  void validate(const std::string& where) const;
};

// Why `d` cannot train in `dt` ("" when it can): no peak for the precision, or no fp8 tensor
// cores for fp8, naming what to plan with instead.
std::string precision_problem(const DeviceSpec& d, Dtype dt);

// `d` run at a board power limit of `cap_w` (nvidia-smi -pl): its peaks and memory bandwidth
// scaled by the measured throughput at that limit over the throughput at its own (power_curve,
// interpolated linearly in W), and its power `cap_w`. Throws naming the parts with a curve when `d`
// has none, and the measured range when `cap_w` is outside it.
DeviceSpec with_power_cap(const DeviceSpec& d, double cap_w);

// The catalog, with each entry's sources beside it (plan/device_catalog.cpp).
const std::vector<DeviceSpec>& device_catalog();
// Throws kiln::Error listing the catalog (and the closest name) when `name` is unknown.
const DeviceSpec& find_device(const std::string& name);

// A kind of link or network, with the constants the collective cost model uses.
struct LinkKind {
  std::string name;
  bool network = false;   // between nodes (bandwidth per NIC in Gb/s) or inside one
  double default_bw = 0;  // GB/s per device and direction (intra) or Gb/s per NIC (network)
  double efficiency = 0;  // fraction of the bandwidth a collective's bus bandwidth reaches
  double latency_us = 0;  // per step of a ring or tree
  // A full mesh of point-to-point links (HCCS): default_bw is a device's links together, and a
  // group reaches its k−1 peers in the node over k−1 of the node's n−1 links; a switch (NVLink)
  // gives any group all of it.
  bool mesh = false;
  std::string what;
};
const std::vector<LinkKind>& link_kinds();
const LinkKind& find_link(const std::string& name, bool network);

enum class Topology { fat_tree, spine_leaf, dragonfly, ring, torus };
Topology parse_topology(const std::string& s);
const char* topology_name(Topology t);

// Rank order on the cluster, innermost first: Megatron-LM places tp, then dp, then pp; Llama 3
// and torchtitan place tp, then pp, then dp. It decides which groups share nodes and switches.
enum class RankOrder { tp_dp_pp, tp_pp_dp };
RankOrder parse_rank_order(const std::string& s);
const char* rank_order_name(RankOrder o);

struct ClusterSpec {
  DeviceSpec device;
  int gpus_per_node = 8;
  int nodes = 1;
  std::string intra_link = "nvlink";
  double intra_link_gbs = 0;  // per device and direction
  std::string network = "ib-ndr";
  int nics_per_node = 8;
  double nic_gbps = 400;
  Topology topology = Topology::fat_tree;
  double oversubscription = 1;  // spine-leaf: leaf down/up bandwidth; dragonfly: global taper
  int nodes_per_domain = 32;    // nodes under one leaf (spine-leaf) or in one group (dragonfly)
  RankOrder order = RankOrder::tp_dp_pp;
  // A torus cluster of several slices joined over the hosts' data-centre network (MaxText's
  // multi-slice): ranks fill one slice after another; 1 for one slice (and for non-torus).
  int slices = 1;

  int total_gpus() const { return gpus_per_node * nodes; }
  // Why no cluster of this kind has this many devices ("" when one can: always, except a torus
  // size no slice has).
  std::string size_problem() const;
  // The torus slice of a torus cluster, one of `slices` alike (plan/torus.h); throws
  // kiln::Error with size_problem().
  TorusShape torus() const;
  // Devices a tensor-parallel group may span on the fast link: a node, or on a torus one axis.
  int tp_domain() const;
  // Effective bandwidths in bytes/s and latencies in seconds (datasheet × link efficiency).
  double intra_bw() const;
  // A group with `members` ranks on one node: intra_bw(), or on a full mesh the share of the
  // links that reach its members (members − 1 of gpus_per_node − 1; one link for a send).
  double intra_bw_among(int members) const;
  double inter_bw_per_gpu() const;  // a node's NICs shared by its devices, all sending at once
  double intra_latency() const;
  double inter_latency() const;
  void validate() const;
  std::string describe() const;  // one line: "64 × a100-80gb (8 nodes × 8, nvlink 300 GB/s, ...)"
};

// A cluster with the device's usual server: gpus per node, links and network from the catalog.
ClusterSpec default_cluster(const DeviceSpec& d, int nodes);

// Reads a hardware file: [device] (optionally `base = "<catalog name>"` to start from a catalog
// entry), [node] (server defaults) and [cluster] (nodes, topology). Unknown keys are errors that
// name the key and the file.
struct HardwareFile {
  DeviceSpec device;
  ClusterSpec cluster;  // device's server defaults, then [node] and [cluster]
  bool has_nodes = false;
};
HardwareFile load_hardware_file(const std::string& path);
HardwareFile parse_hardware_toml(const std::string& text, const std::string& source);
// The TOML text of a hardware file for `d` (what --calibrate writes); `comment` goes on top.
std::string hardware_toml(const DeviceSpec& d, const std::string& comment);

}  // namespace kiln::plan
