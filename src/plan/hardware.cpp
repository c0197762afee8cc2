#include "plan/hardware.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/closest_name.h"
#include "core/error.h"

namespace kiln::plan {

Dtype parse_dtype(const std::string& s) {
  if (s == "fp32") return Dtype::fp32;
  if (s == "bf16") return Dtype::bf16;
  if (s == "fp16") return Dtype::fp16;
  if (s == "fp8") return Dtype::fp8;
  fail("unknown precision '{}': use bf16, fp16 (16-bit mixed precision), fp8 or fp32", s);
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::fp32:
      return "fp32";
    case Dtype::bf16:
      return "bf16";
    case Dtype::fp16:
      return "fp16";
    case Dtype::fp8:
      return "fp8";
  }
  return "?";
}

const DeviceSpec& find_device(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& d : device_catalog()) {
    if (d.name == name) return d;
    names.push_back(d.name);
  }
  std::string close = closest_name(name, names);
  if (!close.empty())
    fail("unknown GPU '{}' (did you mean '{}'?); the catalog has: {}", name, close,
         join_names(names));
  fail("unknown GPU '{}'; the catalog has: {} (or describe yours with --hardware FILE)", name,
       join_names(names));
}

bool DeviceSpec::nvidia() const {
  return arch == "ampere" || arch == "hopper" || arch == "blackwell" || arch == "ada";
}

std::string DeviceSpec::platform() const {
  if (cpu || arch == "cpu") return "cpu";
  if (nvidia()) return "nvidia";
  if (arch.rfind("cdna", 0) == 0) return "amd";
  if (arch.rfind("tpu", 0) == 0) return "tpu";
  if (arch == "davinci") return "ascend";
  return "";
}

void DeviceSpec::validate(const std::string& where) const {
  if (peak_tflops_16 <= 0 && peak_tflops_32 <= 0)
    fail("{}: device '{}' needs peak_tflops_bf16 or peak_tflops_fp32", where, name);
  auto positive = [&](double v, const char* key) {
    if (!(v > 0)) fail("{}: device key '{}' must be positive, got {}", where, key, v);
  };
  positive(memory_gib, "memory_gib");
  positive(mem_bw_gbs, "mem_bw_gbs");
  positive(matmul_efficiency, "matmul_efficiency");
  positive(mem_bw_efficiency, "mem_bw_efficiency");
  positive(attention_efficiency, "attention_efficiency");
  if (matmul_efficiency > 1 || mem_bw_efficiency > 1)
    fail("{}: device '{}': efficiencies are fractions of the peak, at most 1", where, name);
  if (reserved_gib < 0 || reserved_gib >= memory_gib)
    fail("{}: device '{}': reserved_gib must be in [0, memory_gib)", where, name);
  if (peak_tflops_8 < 0 || matmul_efficiency_fp8 < 0 || matmul_efficiency_fp8 > 1)
    fail(
        "{}: device '{}': peak_tflops_fp8 must not be negative and matmul_efficiency_fp8 is a "
        "fraction in [0, 1]",
        where, name);
  if (torus_dims != 0 && (torus_dims != 3 || max_slice_chips < 1))
    fail(
        "{}: device '{}': torus_dims is 3 (a 3D torus; other tori are not modelled) with "
        "max_slice_chips ≥ 1, or 0 for no torus",
        where, name);
  if (kernel_overhead_us < 0 || matmul_overhead_us < 0 || cache_mib < 0 || cache_bw_gbs < 0 ||
      tdp_w < 0 || node_overhead_w < 0)
    fail("{}: device '{}': overheads, cache and power must not be negative", where, name);
  if (!(sustained > 0 && sustained <= 1))
    fail(
        "{}: device '{}': sustained is the share of a burst's rate kept through training, in (0, "
        "1], got {}",
        where, name, sustained);
  if (!(overlap_slowdown >= 0 && overlap_slowdown < 1))
    fail(
        "{}: device '{}': overlap_slowdown is the fraction by which compute slows beside a "
        "collective, in [0, 1), got {}",
        where, name, overlap_slowdown);
}

std::string DeviceSpec::label() const {
  return power_cap_w > 0 ? fmt::format("{} at {:g} W", name, power_cap_w) : name;
}

DeviceSpec with_power_cap(const DeviceSpec& d, double cap_w) {
  if (d.power_curve.empty()) {
    std::vector<std::string> with;
    for (const DeviceSpec& c : device_catalog())
      if (!c.power_curve.empty()) with.push_back(c.name);
    fail(
        "--power-cap-w: no measurement of training throughput under a power limit is known for "
        "'{}'; kiln has one for {} (docs/planner.md, \"Power limits\"; a hardware file that "
        "changes its base's peaks, tdp_w or arch has none)",
        d.name, join_names(with, "and"));
  }
  const double lo = d.power_curve.front().first, hi = d.power_curve.back().first;
  if (!std::isfinite(cap_w) || cap_w < lo || cap_w > hi)
    fail("--power-cap-w {:g}: the measurement for {} covers limits from {:g} to {:g} W", cap_w,
         d.name, lo, hi);
  if (d.tdp_w < lo || d.tdp_w > hi)
    fail("--power-cap-w: {}'s own limit, {:g} W, is outside its measured curve ({:g} to {:g} W)",
         d.name, d.tdp_w, lo, hi);
  auto at = [&](double w) {
    for (size_t k = 1; k < d.power_curve.size(); k++) {
      const auto [w0, f0] = d.power_curve[k - 1];
      const auto [w1, f1] = d.power_curve[k];
      if (w <= w1) return f0 + (f1 - f0) * (w - w0) / (w1 - w0);
    }
    return d.power_curve.back().second;
  };
  DeviceSpec out = d;
  const double scale = at(cap_w) / at(d.tdp_w);
  // The measurement is the whole step's (matmuls, attention, memory-bound kernels), so every
  // rate of the device takes it: a step kiln sees as compute- and memory-bound slows by exactly
  // the measured ratio (its collectives do not).
  out.peak_tflops_16 *= scale;
  out.peak_tflops_8 *= scale;
  out.peak_tflops_32 *= scale;
  out.mem_bw_gbs *= scale;
  out.cache_bw_gbs *= scale;
  out.tdp_w = cap_w;
  out.power_cap_w = cap_w;
  out.description += fmt::format(", at a {:g} W power limit", cap_w);
  out.source += fmt::format("; at {:g} W: {}", cap_w, d.power_curve_source);
  return out;
}

// Link constants. Efficiencies are the bus bandwidth NCCL's all-reduce reaches over the
// datasheet rate (nccl-tests: about 230–240 of 300 GB/s on DGX A100 NVLink, 23–24 of 25 GB/s
// per HDR NIC); latencies per ring step follow NCCL's own tuning model (src/graph/tuning.cc,
// ring/Simple: 3.4 µs NVLink, 5.7 µs PCIe, 9.6 µs network) and 30 µs for TCP over Ethernet.
// HCCS (Ascend 910): 3 links of 240 Gb/s per chip (Huawei, Hot Chips 2019), a full mesh of 4;
// efficiency and step latency are NVLink's, assumed (no HCCL bus-bandwidth figure is published).
// xGMI on the MI300X platform: each GPU's 7 Infinity Fabric links (128 GB/s both ways each, the
// MI300X datasheet) reach the 7 others directly, 896 GB/s in all: a full mesh, so a group of k
// gets k − 1 links, not the 448 GB/s each way that all of them give together.
// ICI (TPU torus links): the Scaling Book's (sharding.md) 1 µs per hop, and its profiled
// all-gather on a TPU v5e 4×4 axis, 680 µs against the 560 µs its link rate gives: 0.82.
const std::vector<LinkKind>& link_kinds() {
  static const std::vector<LinkKind> kinds = {
      {"nvlink", false, 300, 0.80, 3.4, false, "NVLink/NVSwitch"},
      {"xgmi", false, 50, 0.70, 3.4, false, "AMD Infinity Fabric (xGMI)"},
      {"xgmi-mesh", false, 448, 0.70, 3.4, true,
       "AMD Infinity Fabric, 8 GPUs fully meshed (MI300X platform: 7 × 64 GB/s each way)"},
      {"pcie", false, 32, 0.80, 5.7, false, "PCIe (Gen4 x16: 32 GB/s, Gen5: 64 GB/s each way)"},
      {"ici", false, 45, 0.82, 1.0, false, "TPU inter-chip interconnect: GB/s per link, one way"},
      {"hccs", false, 90, 0.80, 3.4, true, "Huawei HCCS: 4 Ascend 910s fully meshed, 3 × 30 GB/s"},
      {"shm", false, 50, 1.00, 1.0, false, "shared memory between processes of one machine"},
      {"ib-hdr", true, 200, 0.92, 9.6, false, "InfiniBand HDR, 200 Gb/s per NIC"},
      {"ib-ndr", true, 400, 0.92, 9.6, false, "InfiniBand NDR, 400 Gb/s per NIC"},
      {"roce", true, 400, 0.90, 9.6, false, "RDMA over Converged Ethernet"},
      {"slingshot", true, 200, 0.90, 9.6, false, "HPE Slingshot-11, 200 Gb/s per NIC"},
      {"ethernet", true, 100, 0.70, 30, false, "Ethernet with TCP sockets"},
  };
  return kinds;
}

const LinkKind& find_link(const std::string& name, bool network) {
  std::vector<std::string> names;
  for (const auto& k : link_kinds()) {
    if (k.network != network) continue;
    if (k.name == name) return k;
    names.push_back(k.name);
  }
  fail("unknown {} '{}'; use one of: {}", network ? "network" : "intra-node link", name,
       join_names(names));
}

Topology parse_topology(const std::string& s) {
  if (s == "fat-tree") return Topology::fat_tree;
  if (s == "spine-leaf") return Topology::spine_leaf;
  if (s == "dragonfly") return Topology::dragonfly;
  if (s == "ring") return Topology::ring;
  if (s == "torus") return Topology::torus;
  fail("unknown topology '{}': use fat-tree, spine-leaf, dragonfly, ring or torus", s);
}

const char* topology_name(Topology t) {
  switch (t) {
    case Topology::fat_tree:
      return "fat-tree";
    case Topology::spine_leaf:
      return "spine-leaf";
    case Topology::dragonfly:
      return "dragonfly";
    case Topology::ring:
      return "ring";
    case Topology::torus:
      return "torus";
  }
  return "?";
}

RankOrder parse_rank_order(const std::string& s) {
  if (s == "tp-dp-pp") return RankOrder::tp_dp_pp;
  if (s == "tp-pp-dp") return RankOrder::tp_pp_dp;
  fail("unknown rank order '{}': use tp-dp-pp (Megatron-LM) or tp-pp-dp (Llama 3, torchtitan)", s);
}

const char* rank_order_name(RankOrder o) {
  return o == RankOrder::tp_dp_pp ? "tp-dp-pp" : "tp-pp-dp";
}

double ClusterSpec::intra_bw() const {
  return intra_link_gbs * 1e9 * find_link(intra_link, false).efficiency;
}

double ClusterSpec::intra_bw_among(int members) const {
  if (!find_link(intra_link, false).mesh || gpus_per_node <= 1) return intra_bw();
  const int peers = std::clamp(members - 1, 1, gpus_per_node - 1);
  return intra_bw() * peers / (gpus_per_node - 1);
}

double ClusterSpec::inter_bw_per_gpu() const {
  const LinkKind& k = find_link(network, true);
  return nics_per_node * nic_gbps / 8.0 * 1e9 * k.efficiency / gpus_per_node;
}

double ClusterSpec::intra_latency() const {
  return find_link(intra_link, false).latency_us * 1e-6;
}
double ClusterSpec::inter_latency() const {
  return find_link(network, true).latency_us * 1e-6;
}

std::string ClusterSpec::size_problem() const {
  std::string problem;
  if (topology != Topology::torus) return "";
  if (slices < 1) return fmt::format("--slices must be at least 1, got {}", slices);
  if (total_gpus() % slices != 0)
    return fmt::format("{} chips do not make {} slices of the same size", total_gpus(), slices);
  torus_shape(total_gpus() / slices, device.max_slice_chips, &problem);
  return problem;
}

TorusShape ClusterSpec::torus() const {
  if (const std::string p = size_problem(); !p.empty()) fail("{}: {}", device.name, p);
  return torus_shape(total_gpus() / slices, device.max_slice_chips, nullptr);
}

int ClusterSpec::tp_domain() const {
  if (topology != Topology::torus) return gpus_per_node;
  return size_problem().empty() ? torus().dim[0]
                                : 1;  // a size no slice has: layout_problem says so
}

void ClusterSpec::validate() const {
  device.validate(device.name);
  if (topology != Topology::torus && device.torus_dims > 0)
    fail("{}: its chips join in an ICI torus; --topology {} does not apply to it", device.name,
         topology_name(topology));
  if (topology == Topology::torus && device.torus_dims == 0)
    fail("{}: --topology torus needs chips joined by ICI links (tpu-v4)", device.name);
  if (topology != Topology::torus && slices != 1)
    fail("{}: --slices {} joins TPU slices over the data-centre network; it needs a torus device",
         device.name, slices);
  if (topology == Topology::torus) {
    if (intra_link != "ici")
      fail("{}: a torus slice's links are ICI, not {}", device.name, intra_link);
    torus();
  }
  if (gpus_per_node < 1)
    fail(
        "devices per node (--gpus-per-node, or a hardware file's [node]) must be at least 1, got "
        "{}",
        gpus_per_node);
  if (nodes < 1)
    fail("nodes (--nodes, or a hardware file's [cluster] nodes) must be at least 1, got {}", nodes);
  find_link(intra_link, false);
  find_link(network, true);
  if (!(intra_link_gbs > 0) && gpus_per_node > 1)
    fail("--intra-link-gbs must be positive with {} devices per node", gpus_per_node);
  if (nodes > 1 && (nics_per_node < 1 || !(nic_gbps > 0)))
    fail("a cluster of {} nodes needs --nics-per-node ≥ 1 and a positive --nic-gbps", nodes);
  if (oversubscription < 1)
    fail("--oversubscription is down:up bandwidth at a switch, at least 1 (got {})",
         oversubscription);
  if (topology == Topology::fat_tree && oversubscription != 1)
    fail(
        "a fat-tree is non-blocking; for an oversubscribed network use --topology spine-leaf "
        "--oversubscription {}",
        oversubscription);
  if (nodes_per_domain < 1) fail("--nodes-per-domain must be at least 1");
}

std::string ClusterSpec::describe() const {
  std::string s = fmt::format("{} × {} ({} node{} × {}", total_gpus(), device.label(), nodes,
                              nodes == 1 ? "" : "s", gpus_per_node);
  if (topology == Topology::torus) {
    const TorusShape t = torus();
    s += fmt::format(", {}slice {} of ICI links{}, {} × {:g} GB/s each way per chip",
                     slices > 1 ? fmt::format("{} × ", slices) : "", t.name(),
                     t.wrap[0] ? " with wraparound" : " (no wraparound)", 2 * device.torus_dims,
                     intra_link_gbs);
    if (nodes > 1)
      s += fmt::format(", hosts on {} {} × {:g} Gb/s", network, nics_per_node, nic_gbps);
    return s + ")";
  }
  if (gpus_per_node > 1) s += fmt::format(", {} {:g} GB/s", intra_link, intra_link_gbs);
  if (nodes > 1) {
    s += fmt::format(", {} {} × {:g} Gb/s per node, {}", network, nics_per_node, nic_gbps,
                     topology_name(topology));
    if (topology == Topology::spine_leaf || topology == Topology::dragonfly)
      s += fmt::format(" {:g}:1 over {} nodes", oversubscription, nodes_per_domain);
  }
  return s + ")";
}

ClusterSpec default_cluster(const DeviceSpec& d, int nodes) {
  ClusterSpec c;
  c.device = d;
  c.nodes = nodes;
  c.gpus_per_node = d.gpus_per_node;
  c.intra_link = d.intra_link;
  c.intra_link_gbs = d.intra_link_gbs;
  c.network = d.network;
  c.nics_per_node = d.nics_per_node;
  c.nic_gbps = d.nic_gbps;
  if (d.network == "slingshot") c.topology = Topology::dragonfly;
  if (d.torus_dims > 0) c.topology = Topology::torus;
  return c;
}

namespace {

// One key of a hardware file: where it goes and what it means.
struct HwKey {
  std::string name;  // table.key
  std::function<void(const toml::node&, const std::string&)> set;
};

template <typename T>
T value_of(const toml::node& v, const std::string& key, const std::string& source) {
  std::ostringstream got;
  got << v.type();
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string())
      fail("{}: hardware key '{}' must be a string, got a {}", source, key, got.str());
    return *v.value<std::string>();
  } else if constexpr (std::is_same_v<T, int>) {
    if (!v.is_integer())
      fail("{}: hardware key '{}' must be an integer, got a {}", source, key, got.str());
    return static_cast<int>(*v.value<int64_t>());
  } else {
    if (!v.is_number())
      fail("{}: hardware key '{}' must be a number, got a {}", source, key, got.str());
    const double x = *v.value<double>();
    if (!std::isfinite(x))
      fail("{}: hardware key '{}' must be a finite number, got {}", source, key, x);
    return x;
  }
}

}  // namespace

HardwareFile parse_hardware_toml(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description());
  }
  HardwareFile hw;
  DeviceSpec& d = hw.device;
  // A file may start from a catalog entry and change a few numbers.
  if (const toml::table* dev = root["device"].as_table())
    if (const toml::node* base = dev->get("base")) {
      d = find_device(value_of<std::string>(*base, "device.base", source));
      d.source = source + " (based on " + d.name + ")";
    }
  if (d.source.empty()) d.source = source;
  // [node] and [cluster] keys land in a cluster built on the device's defaults afterwards.
  std::vector<std::function<void(ClusterSpec&)>> cluster_sets;
  auto num = [&](double* p) {
    return [p, &source](const toml::node& v, const std::string& k) {
      *p = value_of<double>(v, k, source);
    };
  };
  auto str = [&](std::string* p) {
    return [p, &source](const toml::node& v, const std::string& k) {
      *p = value_of<std::string>(v, k, source);
    };
  };
  auto cluster_key =
      [&](std::function<void(ClusterSpec&, const toml::node&, const std::string&)> f) {
        return [f, &cluster_sets](const toml::node& v, const std::string& k) {
          const toml::node* node = &v;
          cluster_sets.push_back([f, node, k](ClusterSpec& c) { f(c, *node, k); });
        };
      };
  std::vector<HwKey> keys = {
      {"device.base", [](const toml::node&, const std::string&) {}},
      {"device.name", str(&d.name)},
      {"device.description", str(&d.description)},
      {"device.source", str(&d.source)},
      {"device.cpu",
       [&](const toml::node& v, const std::string& k) {
         if (!v.is_boolean()) fail("{}: hardware key '{}' must be true or false", source, k);
         d.cpu = *v.value<bool>();
       }},
      {"device.arch", str(&d.arch)},
      {"device.peak_tflops_bf16", num(&d.peak_tflops_16)},
      {"device.bf16",
       [&](const toml::node& v, const std::string& k) {
         if (!v.is_boolean()) fail("{}: hardware key '{}' must be true or false", source, k);
         d.bf16 = *v.value<bool>();
       }},
      {"device.peak_tflops_fp8", num(&d.peak_tflops_8)},
      {"device.peak_tflops_fp32", num(&d.peak_tflops_32)},
      {"device.memory_gib", num(&d.memory_gib)},
      {"device.reserved_gib", num(&d.reserved_gib)},
      {"device.mem_bw_gbs", num(&d.mem_bw_gbs)},
      {"device.matmul_efficiency", num(&d.matmul_efficiency)},
      {"device.matmul_efficiency_fp8", num(&d.matmul_efficiency_fp8)},
      {"device.attention_efficiency", num(&d.attention_efficiency)},
      {"device.mem_bw_efficiency", num(&d.mem_bw_efficiency)},
      {"device.kernel_overhead_us", num(&d.kernel_overhead_us)},
      {"device.matmul_overhead_us", num(&d.matmul_overhead_us)},
      {"device.overlap_slowdown", num(&d.overlap_slowdown)},
      {"device.sustained", num(&d.sustained)},
      {"device.cache_mib", num(&d.cache_mib)},
      {"device.cache_bw_gbs", num(&d.cache_bw_gbs)},
      {"device.tdp_w", num(&d.tdp_w)},
      {"device.node_overhead_w", num(&d.node_overhead_w)},
      {"device.torus_dims",
       [&](const toml::node& v, const std::string& k) {
         d.torus_dims = value_of<int>(v, k, source);
       }},
      {"device.max_slice_chips",
       [&](const toml::node& v, const std::string& k) {
         d.max_slice_chips = value_of<int>(v, k, source);
       }},
      {"node.gpus_per_node",
       [&](const toml::node& v, const std::string& k) {
         d.gpus_per_node = value_of<int>(v, k, source);
       }},
      {"node.intra_link", str(&d.intra_link)},
      {"node.intra_link_gbs", num(&d.intra_link_gbs)},
      {"node.network", str(&d.network)},
      {"node.nics_per_node",
       [&](const toml::node& v, const std::string& k) {
         d.nics_per_node = value_of<int>(v, k, source);
       }},
      {"node.nic_gbps", num(&d.nic_gbps)},
      {"cluster.nodes", cluster_key([&](ClusterSpec& c, const toml::node& v, const std::string& k) {
         c.nodes = value_of<int>(v, k, source);
         hw.has_nodes = true;
       })},
      {"cluster.topology",
       cluster_key([&](ClusterSpec& c, const toml::node& v, const std::string& k) {
         c.topology = parse_topology(value_of<std::string>(v, k, source));
       })},
      {"cluster.oversubscription",
       cluster_key([&](ClusterSpec& c, const toml::node& v, const std::string& k) {
         c.oversubscription = value_of<double>(v, k, source);
       })},
      {"cluster.nodes_per_domain",
       cluster_key([&](ClusterSpec& c, const toml::node& v, const std::string& k) {
         c.nodes_per_domain = value_of<int>(v, k, source);
       })},
      {"cluster.slices",
       cluster_key([&](ClusterSpec& c, const toml::node& v, const std::string& k) {
         c.slices = value_of<int>(v, k, source);
       })},
      {"cluster.rank_order",
       cluster_key([&](ClusterSpec& c, const toml::node& v, const std::string& k) {
         c.order = parse_rank_order(value_of<std::string>(v, k, source));
       })},
  };
  std::vector<std::string> names, given;
  for (const auto& k : keys) names.push_back(k.name);
  for (auto&& [section, node] : root) {
    std::string sname(section.str());
    const toml::table* tbl = node.as_table();
    if (!tbl || (sname != "device" && sname != "node" && sname != "cluster"))
      fail("{}: unknown table or key '{}' (a hardware file has [device], [node] and [cluster])",
           source, sname);
    for (auto&& [key, value] : *tbl) {
      std::string name = sname + "." + std::string(key.str());
      auto it =
          std::find_if(keys.begin(), keys.end(), [&](const HwKey& k) { return k.name == name; });
      if (it == keys.end()) {
        std::string close = closest_name(name, names);
        if (!close.empty())
          fail("{}: unknown hardware key '{}' (did you mean '{}'?)", source, name, close);
        fail("{}: unknown hardware key '{}'; docs/planner.md lists the keys", source, name);
      }
      it->set(value, name);
      given.push_back(name);
    }
  }
  // A base's power curve holds for the base's peaks at the base's limit: a file that changes
  // either (or the part) has no measured curve.
  for (const char* k : {"device.peak_tflops_bf16", "device.peak_tflops_fp8",
                        "device.peak_tflops_fp32", "device.tdp_w", "device.arch", "device.cpu"})
    if (std::find(given.begin(), given.end(), k) != given.end()) {
      d.power_curve.clear();
      d.power_curve_source.clear();
    }
  if (d.name.empty()) fail("{}: [device] needs a name (or base = \"<catalog name>\")", source);
  if (d.gpus_per_node < 1) fail("{}: node.gpus_per_node must be at least 1", source);
  d.validate(source);
  find_link(d.intra_link, false);
  find_link(d.network, true);
  hw.cluster = default_cluster(d, 1);
  for (auto& set : cluster_sets) set(hw.cluster);
  return hw;
}

HardwareFile load_hardware_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot read hardware file {} (write one with `kiln plan --calibrate`)", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_hardware_toml(ss.str(), path);
}

std::string hardware_toml(const DeviceSpec& d, const std::string& comment) {
  std::string out;
  std::istringstream lines(comment);
  for (std::string line; std::getline(lines, line);) out += "# " + line + "\n";
  auto q = [](const std::string& s) {
    std::ostringstream o;
    o << toml::value<std::string>(s);
    return o.str();
  };
  out += "\n[device]\n";
  out += fmt::format("name = {}\n", q(d.name));
  out += fmt::format("description = {}\n", q(d.description));
  out += fmt::format("source = {}\n", q(d.source));
  out += fmt::format("cpu = {}\n", d.cpu ? "true" : "false");
  // A peak of 0 means "not supported": the key is left out rather than written as 0.
  if (d.peak_tflops_16 > 0) out += fmt::format("peak_tflops_bf16 = {:.6g}\n", d.peak_tflops_16);
  if (!d.bf16) out += "bf16 = false\n";  // peak_tflops_bf16 is then fp16's
  if (d.peak_tflops_32 > 0) out += fmt::format("peak_tflops_fp32 = {:.6g}\n", d.peak_tflops_32);
  if (d.peak_tflops_8 > 0) out += fmt::format("peak_tflops_fp8 = {:.6g}\n", d.peak_tflops_8);
  if (!d.arch.empty()) out += fmt::format("arch = {}\n", q(d.arch));
  out += fmt::format("memory_gib = {:.6g}\n", d.memory_gib);
  out += fmt::format("reserved_gib = {:.6g}\n", d.reserved_gib);
  out += fmt::format("mem_bw_gbs = {:.6g}\n", d.mem_bw_gbs);
  out += fmt::format("matmul_efficiency = {:.4g}\n", d.matmul_efficiency);
  if (d.matmul_efficiency_fp8 > 0)
    out += fmt::format("matmul_efficiency_fp8 = {:.4g}\n", d.matmul_efficiency_fp8);
  out += fmt::format("attention_efficiency = {:.4g}\n", d.attention_efficiency);
  out += fmt::format("mem_bw_efficiency = {:.4g}\n", d.mem_bw_efficiency);
  out += fmt::format("kernel_overhead_us = {:.4g}\n", d.kernel_overhead_us);
  if (d.matmul_overhead_us > 0)
    out += fmt::format("matmul_overhead_us = {:.4g}\n", d.matmul_overhead_us);
  out += fmt::format("overlap_slowdown = {:.4g}\n", d.overlap_slowdown);
  out += fmt::format("sustained = {:.4g}\n", d.sustained);
  out += fmt::format("cache_mib = {:.6g}\n", d.cache_mib);
  out += fmt::format("cache_bw_gbs = {:.6g}\n", d.cache_bw_gbs);
  out += fmt::format("tdp_w = {:.6g}\n", d.tdp_w);
  out += fmt::format("node_overhead_w = {:.6g}\n", d.node_overhead_w);
  if (d.torus_dims > 0)
    out += fmt::format("torus_dims = {}\nmax_slice_chips = {}\n", d.torus_dims, d.max_slice_chips);
  out += "\n[node]\n";
  out += fmt::format("gpus_per_node = {}\n", d.gpus_per_node);
  out += fmt::format("intra_link = {}\n", q(d.intra_link));
  out += fmt::format("intra_link_gbs = {:.6g}\n", d.intra_link_gbs);
  out += fmt::format("network = {}\n", q(d.network));
  out += fmt::format("nics_per_node = {}\n", d.nics_per_node);
  out += fmt::format("nic_gbps = {:.6g}\n", d.nic_gbps);
  return out;
}

}  // namespace kiln::plan
