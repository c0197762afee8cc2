// The device catalog: each accelerator's datasheet numbers with their sources, the share of
// them real kernels reach, and the server it usually comes in (docs/planner.md, "Hardware").
#include <fmt/format.h>

#include <algorithm>

#include "plan/hardware.h"

namespace kiln::plan {

// Matmul efficiency = the best matmul rate measured in a short burst over the dense peak ×
// the share of that burst rate a power-saturated device sustains in training.
//   Burst ("maximum achievable matmul FLOPS", MAMF, BF16), Stas Bekman's ML Engineering book:
//   https://github.com/stas00/ml-engineering/tree/master/compute/accelerator#maximum-achievable-matmul-flops-comparison-table
//     A100 SXM 267.9/312 = 85.9%, H100 SXM 792.1/989 = 80.1%, H100/H200 SXM 794.5/989 = 80.3%,
//     MI250X 147.0/191.5 per GCD = 76.7% (the book's first method); MI300X 668.4 over kiln's
//     peak of 1,307 = 51.1%, from the table's second method (since 2025-01-06: the cache reset
//     between iterations, which the first lacked; torch 2.5.1 + ROCm 6.3, TunableOp on). Its
//     first-method 781.9 (2024-10, ROCm 6.2), which kiln used before, left the book on
//     2025-09-01. The A100 and H100 figures are the first method's, within 1.3% of the second's.
//   Sustained over burst ("maximum sustainable matmul FLOPS", MSMF, measured near TDP after a
//   thermal soak): H200 702.9/828.0 = 0.849, B200 1455.7/1732.6 = 0.840 (the same book,
//   compute/accelerator/benchmarks/README.md); kiln uses their mean, 0.845, for NVIDIA parts and
//   the MI250X (not measured there), and 1.0 for the MI300X, whose burst already runs at its
//   750 W cap ("there is no boost burst to filter out", same page).
// This is the one calibration factor per device class. It is not fitted to any training run;
// docs/planner.md compares the resulting predictions with published runs.
// Memory-bandwidth efficiencies are about what STREAM-like kernels (BabelStream) reach: 85% of
// the datasheet on NVIDIA HBM, 80% on AMD's. Kernel overhead: about 4 µs per kernel launch.
// A matmul's fixed cost, where a measured GEMM table exists: OpenXLA's default matmul
// performance table (xla/service/gpu/model/matmul_interpolator_data.h, as in ROCm/xla at
// ea2c45f2ca, 2026-07-31) gives XLA's measured BF16 GEMM rates for M, N, K each a power of two
// from 256 to 4096 on sm_90 (H100), sm_100 (B200) and gfx942 (MI300X). A least-squares line
// time = FLOPs / R + t0 through its shapes with every dimension ≥ 2048 (the transformer blocks'
// sizes) gives t0 = 4.6 µs on H100, 6.3 µs on B200 and 19.8 µs on MI300X, kiln's
// matmul_overhead_us for them (and the H100's other parts: H100 PCIe, the 500 W H100, H200).
// tests/plan/gemm_shape_test.cpp checks the fit and that kiln's matmul times then follow the
// table's shapes within 10%. Other devices keep the 4 µs kernel overhead for matmuls too.
// Memory capacity: what the driver reports, where a report was found: nvidia-smi's total in MiB
// (its Memory-Usage column, as published in many logs): A100-SXM4-40GB 40,960, A100-SXM4-80GB
// 81,920, H100 80GB HBM3 and H100 PCIe 81,559, H200 143,771, B200 183,359, L40S 46,068, RTX 4090
// 24,564; on AMD, ROCm's VRAM total in bytes: MI300X 205,822,885,888 (rocm-smi), one MI250X GCD
// 68,702,699,520 (the KFD node's memory bank, as HPE Cray's runtime prints it on Frontier). An
// "80 GB" HBM part is 80 GiB of stacks (less the driver's share on Hopper and later), not 80·10⁹
// bytes: reading the datasheet's GB as decimal under-counted these parts by up to 7.4%. The
// parts for which no driver figure was found (the 500 W H100 96 GB, the Ascend 910) keep the
// datasheet's decimal GB, a floor. PyTorch's "total capacity" (cudaMemGetInfo) reads 0.4-0.7 GiB
// below nvidia-smi's total (39.5-39.6 GiB on an A100 40 GB); that, the CUDA/ROCm context,
// cuBLAS/hipBLAS workspaces and NCCL/RCCL buffers are the ~2 GiB reserved.
constexpr double kMiB = 1.0 / 1024;  // GiB per MiB
constexpr double kSustained = 0.845;
// fp8: the ML Engineering book's MAMF table (compute/accelerator/README.md, as at 996698d,
// 2026-08-15) measures the H100 SXM with torch 2.7.0+cu126 at 1,402.6 of 1,979 TFLOP/s in fp8
// (float8_e4m3fn through torch._scaled_mm, cuBLASLt: the GEMM torchao's Float8Linear calls, and
// the library Transformer Engine's fp8 GEMMs run on) against 794.5 of 989 in bf16 in the same
// software: fp8 reaches 0.709 of its peak in a burst where bf16 reaches 0.803. The H100 parts
// run fp8 matmuls at 0.709 × 0.845 of the fp8 peak (the H200 and B200 at their own measured
// sustained rates, below); devices with no fp8 measurement take their bf16 efficiency ×
// 0.709/0.803. (kiln had used tilelang's hand-written FP8 GEMM, 0.75 of the peak, a kernel none
// of the frameworks here runs.)
// Compute beside a collective: NCCL and RCCL run collectives as kernels that hold SMs (CUs) and
// memory bandwidth for as long as they are in flight, so a matmul overlapped with a gather or a
// reduce-scatter runs slower than alone. "Characterizing Compute-Communication
// Overlap in GPU-Accelerated Distributed Deep Learning" (arXiv:2507.03114, 2025), measure GPT
// and Llama training kernels on 4 × A100, H100, MI250 and MI210: overlapped compute is 18.9%
// slower on average (at most 40%) than the same compute alone. The SM count agrees: an NCCL
// all-gather beside a GEMM on an H100 holds 24 of its 132 SMs (18%; NVIDIA developer forum,
// "Compute-communication overlap causes severe GEMM performance degradation"). kiln
// charges the average to every GPU whose collectives are NCCL/RCCL kernels. TPU and Ascend
// keep 0: no such measurement was found for them.
constexpr double kOverlapSlowdown = 0.189;
constexpr double kFp8Burst = 1402.6 / 1979;
constexpr double kFp8OverBf16 = kFp8Burst / (794.5 / 989);

// Mayr et al. 2026, "AI Application Benchmarking: Power-Aware Performance Analysis for Vision and
// Language Models" (arXiv:2603.16164), table 4, row "Pre-training / H100": Llama 3 8B continued
// pre-training with LitGPT on one node of four H100 SXM (94 GB HBM2e), tokens/s per GPU at power
// limits of 200 to 700 W: 9,699.3, 17,982.3, 24,853.4, 27,705.3, 29,250.0, 30,271.0. Read in a
// third party's transcription of the table (the paper's page was not reachable from here). The
// whole step's ratio stands for every rate of the part (peaks and memory bandwidth:
// with_power_cap); the HBM3 SXM part is taken to lose what the measured HBM2e one does.
static std::vector<std::pair<double, double>> h100_training_power_curve() {
  const double w[] = {200, 300, 400, 500, 600, 700};
  const double tokens[] = {9699.3, 17982.3, 24853.4, 27705.3, 29250.0, 30271.0};
  std::vector<std::pair<double, double>> curve;
  for (int k = 0; k < 6; k++) curve.emplace_back(w[k], tokens[k] / tokens[5]);
  return curve;
}

const std::vector<DeviceSpec>& device_catalog() {
  static const std::vector<DeviceSpec> cat = [] {
    std::vector<DeviceSpec> c;
    // What every NVIDIA and AMD GPU shares (the header comments above), at its HBM efficiency.
    auto gpu = [](DeviceSpec d, double mem_bw_efficiency) {
      d.mem_bw_efficiency = mem_bw_efficiency;
      d.kernel_overhead_us = 4;
      d.reserved_gib = 2;
      d.overlap_slowdown = kOverlapSlowdown;
      return d;
    };
    auto nvidia = [&](DeviceSpec d) { return gpu(d, 0.85); };
    // A100 SXM4:
    // https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    // 312 TFLOP/s BF16 dense, 19.5 FP32, 40 GB HBM2 at 1,555 GB/s or 80 GB HBM2e at 2,039 GB/s,
    // 400 W, NVLink 3 600 GB/s (300 each way). DGX A100 (8 GPUs, 8 × 200 Gb/s HDR InfiniBand,
    // 6.5 kW max):
    // https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/nvidia-dgx-a100-datasheet.pdf
    DeviceSpec a100;
    a100.arch = "ampere";
    a100.peak_tflops_16 = 312;
    a100.peak_tflops_32 = 19.5;
    a100.matmul_efficiency = 0.859 * kSustained;
    a100.sustained = kSustained;
    a100.tdp_w = 400;
    a100.node_overhead_w = 6500 - 8 * 400;
    a100.intra_link = "nvlink";
    a100.intra_link_gbs = 300;
    a100.network = "ib-hdr";
    a100.nic_gbps = 200;
    a100.source =
        "NVIDIA A100 datasheet; DGX A100 datasheet; MAMF 267.9 of 312 TFLOP/s (ML Engineering)";
    {
      DeviceSpec d = a100;
      d.name = "a100-40gb";
      d.description = "NVIDIA A100 SXM4 40 GB";
      d.memory_gib = 40960 * kMiB;
      d.mem_bw_gbs = 1555;
      c.push_back(nvidia(d));
      d.name = "a100-80gb";
      d.description = "NVIDIA A100 SXM4 80 GB";
      d.memory_gib = 81920 * kMiB;
      d.mem_bw_gbs = 2039;
      c.push_back(nvidia(d));
    }
    // H100 SXM5 and PCIe:
    // https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet SXM: 989
    // TFLOP/s BF16 dense (1,979 with sparsity), 67 FP32, 80 GB HBM3 at 3.35 TB/s, up to 700 W,
    // NVLink 4 900 GB/s (450 each way). PCIe: 756 BF16 dense, 51 FP32, 80 GB HBM2e at 2.0 TB/s, 350
    // W, PCIe Gen5 128 GB/s (64 each way). DGX H100 (8 × 400 Gb/s NDR, ~10.2 kW):
    // https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html
    {
      DeviceSpec d;
      d.name = "h100-sxm";
      d.description = "NVIDIA H100 SXM5 80 GB";
      d.arch = "hopper";
      d.peak_tflops_16 = 989;
      d.peak_tflops_8 = 1979;  // 3,958 with sparsity
      d.matmul_efficiency_fp8 = kFp8Burst * kSustained;
      d.peak_tflops_32 = 67;
      d.memory_gib = 81559 * kMiB;  // the PCIe part's too
      d.mem_bw_gbs = 3350;
      d.matmul_efficiency = 0.801 * kSustained;
      d.sustained = kSustained;
      d.tdp_w = 700;
      d.node_overhead_w = 10200 - 8 * 700;
      d.intra_link = "nvlink";
      d.intra_link_gbs = 450;
      d.network = "ib-ndr";
      d.nic_gbps = 400;
      d.matmul_overhead_us = 4.6;  // OpenXLA's sm_90 GEMM table (above)
      d.source = "NVIDIA H100 datasheet; DGX H100 user guide; MAMF 792.1 of 989 TFLOP/s";
      d.power_curve = h100_training_power_curve();
      d.power_curve_source =
          "Mayr et al. 2026 (arXiv:2603.16164) table 4, Llama 3 8B training on an HBM2e H100 SXM "
          "from 200 to 700 W";
      c.push_back(nvidia(d));
      const DeviceSpec sxm = d;
      d.power_curve.clear();  // the PCIe board (350 W) was not measured
      d.power_curve_source.clear();
      d.name = "h100-pcie";
      d.description = "NVIDIA H100 PCIe 80 GB";
      d.peak_tflops_16 = 756;
      d.peak_tflops_8 = 1513;       // 3,026 with sparsity
      d.matmul_efficiency_fp8 = 0;  // no benchmark of the PCIe part: the rule
      d.peak_tflops_32 = 51;
      d.mem_bw_gbs = 2000;
      d.tdp_w = 350;
      // A PCIe server has no DGX datasheet; 2 kW for CPUs, NICs and fans is an assumption.
      d.node_overhead_w = 2000;
      d.intra_link = "pcie";
      d.intra_link_gbs = 64;
      d.source =
          "NVIDIA H100 datasheet; matmul efficiency of the SXM part assumed (no PCIe MAMF); "
          "node overhead assumed";
      c.push_back(nvidia(d));
      // H100 SXM5 96 GB HBM2e at a 500 W power limit: Meta's Grand Teton hosts, where
      // torchtitan's published H100 benchmarks ran (pytorch/torchtitan docs/performance.md at
      // d4c86e375: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "the default 500W power
      // limit", 400 Gb/s RDMA per GPU; its footnote: "the actual peak TFLOPs number is between
      // SXM and NVL, and we don't know its exact value"). What the cap costs is measured on
      // this HBM2e SXM part (h100_training_power_curve, above): 0.915 of 700 W's throughput at
      // 500 W, so 905 TFLOP/s bf16 and 1,811 fp8, inside the interval torchtitan gives (the NVL's
      // 835 to the SXM's 989). Otherwise the SXM part, with RoCE as Meta's RDMA fabric.
      d = sxm;
      d.memory_gib = 96e9 / (1 << 30);
      d.mem_bw_gbs = 2400;  // at 700 W; the cap scales it with the peaks
      d = with_power_cap(d, 500);
      d.power_cap_w = 0;  // the part's own limit
      d.name = "h100-96gb-500w";
      d.description = "NVIDIA H100 SXM5 96 GB HBM2e at 500 W (Grand Teton)";
      d.network = "roce";
      d.source =
          "torchtitan docs/performance.md (96 GB HBM2e, 2.4 TB/s, 500 W); the 500 W cap's cost: "
          "Mayr et al. 2026 (arXiv:2603.16164) table 4, Llama 3 8B on an HBM2e H100 SXM, 0.915 "
          "of 700 W; H100 SXM datasheet; MAMF of the SXM part";
      c.push_back(nvidia(d));
    }
    // H200 SXM: https://www.nvidia.com/en-us/data-center/h200/ — 989 TFLOP/s BF16 dense,
    // 141 GB HBM3e at 4.8 TB/s, up to 700 W, NVLink 900 GB/s; DGX H200 as DGX H100. Matmul: its
    // own sustained rates, as the B200's, from the same book: MSMF 702.9 of 989 TFLOP/s in bf16
    // (702.9 over its MAMF 828.0 = 0.849 sustained; benchmarks/README.md, GPU0 alone) and
    // 1,288.7 of 1,979 in fp8 (README.md's fp8 table).
    {
      DeviceSpec d;
      d.name = "h200";
      d.description = "NVIDIA H200 SXM 141 GB";
      d.arch = "hopper";
      d.peak_tflops_16 = 989;
      d.peak_tflops_8 = 1979;
      d.matmul_efficiency_fp8 = 1288.7 / 1979;
      d.peak_tflops_32 = 67;
      d.memory_gib = 143771 * kMiB;
      d.mem_bw_gbs = 4800;
      d.matmul_efficiency = 702.9 / 989;
      d.sustained = 702.9 / 828.0;
      d.tdp_w = 700;
      d.node_overhead_w = 10200 - 8 * 700;
      d.intra_link = "nvlink";
      d.intra_link_gbs = 450;
      d.network = "ib-ndr";
      d.nic_gbps = 400;
      d.matmul_overhead_us = 4.6;  // OpenXLA's sm_90 GEMM table (above)
      d.source = "NVIDIA H200 product page; MSMF 702.9 of 989 TFLOP/s (fp8 1288.7 of 1979)";
      c.push_back(nvidia(d));
    }
    // B200 (HGX/DGX B200, 1,000 W): NVIDIA's Blackwell datasheet figures for the HGX part, as
    // collected at https://glennklockwood.com/garden/processors/B200 — 2,250 TFLOP/s BF16 dense,
    // 80 FP32, 8 TB/s; DGX B200 datasheet: 1,440 GB of HBM3e over 8 GPUs (180 GB each), NVLink 5
    // at 1.8 TB/s per GPU both ways (900 each), 8 × 400 Gb/s ConnectX-7, about 14.3 kW at most.
    // Matmul: the ML Engineering book's sustained rate (MSMF) 1,455.7 TFLOP/s, measured after a
    // thermal soak near TDP, used as it is; fp8 likewise (MSMF 2,795.7 TFLOP/s).
    {
      DeviceSpec d;
      d.name = "b200";
      d.description = "NVIDIA B200 (HGX, 1,000 W) 180 GB";
      d.arch = "blackwell";
      d.peak_tflops_16 = 2250;
      d.peak_tflops_8 = 4500;  // 9 PFLOP/s with sparsity
      d.peak_tflops_32 = 80;
      d.memory_gib = 183359 * kMiB;
      d.mem_bw_gbs = 8000;
      d.matmul_efficiency = 1455.7 / 2250;
      // fp8 at its own sustained rate too: MSMF 2,795.7 of 4,500 (the same book's fp8 table).
      d.matmul_efficiency_fp8 = 2795.7 / 4500;
      d.sustained = 1455.7 / 1732.6;  // its own MSMF over MAMF
      d.matmul_overhead_us = 6.3;     // OpenXLA's sm_100 GEMM table (above)
      d.tdp_w = 1000;
      d.node_overhead_w = 14300 - 8 * 1000;
      d.intra_link = "nvlink";
      d.intra_link_gbs = 900;
      d.network = "ib-ndr";
      d.nic_gbps = 400;
      d.source =
          "NVIDIA B200 (HGX) and DGX B200 datasheets; MSMF 1455.7 of 2250 TFLOP/s (fp8 2795.7 of "
          "4500)";
      c.push_back(nvidia(d));
    }
    // L40S: https://www.nvidia.com/en-us/data-center/l40s/ — 362 TFLOP/s BF16 dense (733 with
    // sparsity), 91.6 FP32, 48 GB GDDR6 at 864 GB/s, 350 W, PCIe Gen4 x16, no NVLink. RTX 4090
    // (NVIDIA Ada architecture whitepaper, appendix): 165.2 TFLOP/s FP16/BF16 with FP32
    // accumulate, dense (GeForce runs that at half the FP16-accumulate rate), 82.6 FP32, 24 GB
    // GDDR6X at 1,008 GB/s, 450 W, PCIe Gen4 x16. Neither has a published MAMF: the H100 SXM's
    // fraction is assumed. Servers: 8 cards on PCIe Gen4, 2 × 200 Gb/s RoCE for the L40S, one
    // 100 Gb/s Ethernet port for a 4090 box; 2 kW (L40S) and 1 kW (4090) for the rest of a server
    // are assumptions.
    {
      DeviceSpec d;
      d.name = "l40s";
      d.description = "NVIDIA L40S 48 GB (PCIe)";
      d.arch = "ada";
      d.peak_tflops_16 = 362;
      d.peak_tflops_8 = 733;  // 1,466 with sparsity
      d.peak_tflops_32 = 91.6;
      d.memory_gib = 46068 * kMiB;
      d.mem_bw_gbs = 864;
      d.matmul_efficiency = 0.801 * kSustained;
      d.sustained = kSustained;
      d.tdp_w = 350;
      d.node_overhead_w = 2000;
      d.intra_link = "pcie";
      d.intra_link_gbs = 32;
      d.network = "roce";
      d.nics_per_node = 2;
      d.nic_gbps = 200;
      d.source = "NVIDIA L40S datasheet; matmul efficiency of the H100 SXM assumed; server assumed";
      c.push_back(nvidia(d));
      d.name = "rtx4090";
      d.description = "NVIDIA GeForce RTX 4090 24 GB (PCIe)";
      d.peak_tflops_16 = 165.2;
      d.peak_tflops_8 = 330.3;  // FP32 accumulate, dense (whitepaper: 660.6 with sparsity)
      d.peak_tflops_32 = 82.6;
      d.memory_gib = 24564 * kMiB;
      d.mem_bw_gbs = 1008;
      d.tdp_w = 450;
      d.node_overhead_w = 1000;
      d.network = "ethernet";
      d.nics_per_node = 1;
      d.nic_gbps = 100;
      d.source =
          "NVIDIA Ada whitepaper (FP32-accumulate tensor rate); matmul efficiency of the H100 "
          "SXM assumed; server assumed";
      c.push_back(nvidia(d));
    }
    auto amd = [&](DeviceSpec d) { return gpu(d, 0.80); };
    // MI250X: https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html — one
    // package is two graphics compute dies (GCDs), each of which software sees as one GPU: per
    // GCD 191.5 TFLOP/s BF16 (383 per package), 47.9 FP32 vector, 64 GB HBM2e at 1.6 TB/s,
    // 280 W (560 per package). Frontier-style node (HPE Cray EX235a): 4 packages = 8 GCDs,
    // Infinity Fabric 50 GB/s each way between GCD pairs, 4 × 200 Gb/s Slingshot-11 NICs,
    // dragonfly network; node overhead not published, 1.5 kW assumed.
    {
      DeviceSpec d;
      d.name = "mi250x";
      d.description = "AMD Instinct MI250X, one GCD (half a package)";
      d.arch = "cdna2";
      d.peak_tflops_16 = 191.5;
      d.peak_tflops_32 = 47.9;
      d.memory_gib = 68702699520.0 / (1 << 30);  // the driver's total (above)
      d.mem_bw_gbs = 1600;
      d.matmul_efficiency = 0.767 * kSustained;
      d.sustained = kSustained;
      d.tdp_w = 280;
      d.node_overhead_w = 1500;
      d.intra_link = "xgmi";
      d.intra_link_gbs = 50;
      d.network = "slingshot";
      d.nics_per_node = 4;
      d.nic_gbps = 200;
      d.source =
          "AMD MI250X product page; MAMF 147.0 of 191.5 TFLOP/s per GCD; node overhead assumed";
      c.push_back(amd(d));
    }
    // MI300X: https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html —
    // 1,307 TFLOP/s BF16 dense, 163.4 FP32, 192 GB HBM3 at 5.3 TB/s, 750 W, Infinity Fabric to
    // the 7 other GPUs of the platform, 896 GB/s aggregate (448 each way). Server as Azure's
    // ND MI300X v5 (8 GPUs, 8 × 400 Gb/s InfiniBand); node overhead not published, 4 kW assumed.
    {
      DeviceSpec d;
      d.name = "mi300x";
      d.description = "AMD Instinct MI300X 192 GB";
      d.arch = "cdna3";
      d.peak_tflops_16 = 1307;
      d.peak_tflops_8 = 2614.9;  // 5,229.8 with sparsity
      d.peak_tflops_32 = 163.4;
      d.memory_gib = 205822885888.0 / (1 << 30);  // rocm-smi's total (above)
      d.mem_bw_gbs = 5300;
      d.matmul_efficiency = 668.4 / 1307;  // its burst is already sustained
      d.matmul_overhead_us = 19.8;         // OpenXLA's gfx942 GEMM table (above)
      d.tdp_w = 750;
      d.node_overhead_w = 4000;
      d.intra_link = "xgmi-mesh";  // a pair gets one link, 64 GB/s each way
      d.intra_link_gbs = 448;
      d.network = "ib-ndr";
      d.nic_gbps = 400;
      d.source =
          "AMD MI300X product page; MAMF 668.4 TFLOP/s (ML Engineering, ROCm 6.3); "
          "OpenXLA's GEMM table; node overhead assumed";
      c.push_back(amd(d));
    }
    // TPU v4: https://cloud.google.com/tpu/docs/v4 — 275 TFLOP/s bf16 per chip, 32 GiB HBM2 at
    // 1,200 GB/s, measured power 90/170/192 W (min/mean/max), pods of 4,096 chips in a 3D
    // torus, 1.1 PB/s of all-reduce and 24 TB/s of bisection bandwidth per pod. The Scaling
    // Book (jax-ml/scaling-book tpus.md, 0819a7d): 4 chips per host (2×2×1), 45 GB/s per ICI
    // link each way (6 links: 4,096 × 6 × 45 GB/s = 1.1 PB/s), about 25 GB/s of data-centre
    // network per host. Matmul efficiency: the JAX Pallas guide (docs/pallas/tpu/matmul) times
    // XLA's bf16 8192³ matmul at 92.3% of a TPU v5e's peak (same 128×128 MXUs; no v4
    // measurement, and no sustained-versus-burst figure, is published). Assumed: HBM
    // efficiency as NVIDIA's HBM (0.85), no per-kernel cost (XLA runs a step as one compiled
    // program), 1 GiB reserved; the host's own power is not published and is left out.
    {
      DeviceSpec d;
      d.name = "tpu-v4";
      d.description = "Google TPU v4 (ICI 3D torus)";
      d.arch = "tpu-v4";
      d.peak_tflops_16 = 275;
      d.memory_gib = 32;
      d.reserved_gib = 1;
      d.mem_bw_gbs = 1200;
      d.mem_bw_efficiency = 0.85;
      d.matmul_efficiency = 0.923;
      d.kernel_overhead_us = 0;
      d.tdp_w = 192;
      d.node_overhead_w = 0;
      d.gpus_per_node = 4;
      d.intra_link = "ici";
      d.intra_link_gbs = 45;
      d.network = "ethernet";
      d.nics_per_node = 2;
      d.nic_gbps = 100;
      d.torus_dims = 3;
      d.max_slice_chips = 4096;
      d.source =
          "Google Cloud TPU v4 page; Scaling Book (ICI, hosts); XLA matmul 92.3% of peak on TPU "
          "v5e (JAX Pallas guide); host power not published (left out)";
      c.push_back(d);
    }
    // Ascend 910 (2019; not the 910B, whose figures Huawei does not publish and secondary
    // sources disagree on). Huawei's Hot Chips 31 talk (2019): 256 TFLOP/s FP16 from 32 Da Vinci
    // cores whose cube units multiply FP16 and INT8 (no bf16), 350 W, 3 HCCS ports of 240 Gb/s,
    // 2 × 100 Gb/s RoCE v2 on the I/O die; Huawei's launch (2019-08-23, and the Atlas 900
    // announcement of 2019-09-18): 256 TFLOP/s FP16 per chip, clusters of "thousands" of chips,
    // 256–1,024 PFLOP/s (1,024–4,096 chips), HCCS inside a server, 100G RoCE between servers.
    // Memory: four HBM2 stacks, 32 GB (The Linley Group, Microprocessor Report, 2019-10-08:
    // "Including 32GB of HBM2, the Ascend 910 processor dissipates 350W (TDP)"), 1.2 TB/s over
    // the four (Huawei's book on the Ascend architecture, as summarised; four HBM2 stacks at
    // 2.4 Gb/s per pin are 1.23 TB/s). The server (Atlas 800, model 9000): 8 processors, in two
    // groups of 4 joined by HCCS; a job of up to 4 processors must sit in one group (Huawei's
    // MindCluster scheduling guide, "Resource Allocation Constraints of Atlas Training
    // Products"), and each processor has its own RoCE port, processors i and i+4 on one network
    // plane (Huawei's HCCN Tool guide). kiln's node is one HCCS group: 4 processors, each with
    // 3 links of 30 GB/s to the other three (90 GB/s each way), and 4 × 100 Gb/s RoCE; the
    // traffic between a server's two groups is charged to RoCE, the plane HCCN puts it on.
    // Assumed, as for the parts without a published MAMF: the H100 SXM's matmul fraction, HBM
    // efficiency 0.85, 4 µs per kernel, 2 GiB reserved; no FP32 matrix rate is published (the
    // vector unit's is not), so fp32 plans are refused. Host power: Huawei's Hot Chips slide
    // gives a server of 8 processors and 2 CPUs at 6 kW, so 1.6 kW per group of 4 beyond the
    // processors' 4 × 350 W.
    {
      DeviceSpec d;
      d.name = "ascend-910";
      d.description = "Huawei Ascend 910 32 GB (Atlas 800 model 9000, fp16 only)";
      d.arch = "davinci";
      d.peak_tflops_16 = 256;
      d.bf16 = false;
      d.memory_gib = 32e9 / (1 << 30);
      d.reserved_gib = 2;
      d.mem_bw_gbs = 1200;
      d.mem_bw_efficiency = 0.85;
      d.matmul_efficiency = 0.801 * kSustained;
      d.sustained = kSustained;
      d.kernel_overhead_us = 4;
      d.tdp_w = 350;
      d.node_overhead_w = 6000 / 2 - 4 * 350;
      d.gpus_per_node = 4;
      d.intra_link = "hccs";
      d.intra_link_gbs = 90;
      d.network = "roce";
      d.nics_per_node = 4;
      d.nic_gbps = 100;
      d.source =
          "Huawei Hot Chips 2019 and launch; Linley Microprocessor Report (32 GB HBM2, 350 W); "
          "Huawei MindCluster and HCCN guides (server); matmul efficiency of the H100 SXM "
          "assumed";
      c.push_back(d);
    }
    // This machine's CPU: 2 vCPUs of an AMD EPYC (AVX-512), one kiln process. docs/performance.md
    // measured the best fp32 oneDNN matmul at 180–200 GFLOP/s and a GPT-2 step's matmuls at
    // 150–180, so 0.85 of the peak; `kiln plan --calibrate` measured a STREAM triad at 52 GB/s on
    // 2 threads (2026-11-22), which AdamW's 91 ms for about 4.5 GB of traffic in
    // docs/performance.md agrees with; 24 GiB. `kiln plan --calibrate` measures it all again
    // and writes configs/hardware/this-cpu.toml. Power: 2 of the 96 cores of a 360 W EPYC 9654,
    // about 8 W, plus memory: 10 W is an estimate.
    {
      DeviceSpec d;
      d.name = "cpu";
      d.description =
          "this machine's CPU (2 cores, one kiln process), as docs/performance.md measured";
      d.cpu = true;
      d.arch = "cpu";
      d.peak_tflops_16 = 0;
      d.peak_tflops_32 = 0.2;
      d.memory_gib = 24;
      d.reserved_gib = 1;
      d.mem_bw_gbs = 50;
      d.matmul_efficiency = 0.85;
      d.mem_bw_efficiency = 1;
      d.kernel_overhead_us = 5;
      d.tdp_w = 10;
      d.node_overhead_w = 0;
      d.gpus_per_node = 1;
      d.intra_link = "shm";
      d.intra_link_gbs = 50;
      d.network = "ethernet";
      d.nics_per_node = 1;
      d.nic_gbps = 25;
      d.source = "docs/performance.md (kiln bench peak, kiln bench train)";
      c.push_back(d);
    }
    return c;
  }();
  return cat;
}

std::string precision_problem(const DeviceSpec& d, Dtype dt) {
  if (dt == Dtype::fp8 && d.peak_tflops_8 <= 0)
    return fmt::format(
        "{} has no fp8 tensor cores (fp8 needs Hopper, Ada or Blackwell, or an MI300X: h100-sxm, "
        "h100-pcie, h200, b200, l40s, rtx4090, mi300x); plan with --dtype bf16",
        d.name);
  const char* sixteen = d.bf16 ? "bf16" : "fp16";
  if (dt == Dtype::bf16 && !d.bf16 && d.peak_tflops_16 > 0)
    return fmt::format(
        "{} multiplies fp16, not bf16 (its matrix units have no bf16); plan with --dtype fp16 "
        "(mixed precision with loss scaling)",
        d.name);
  if (d.peak_tflops(dt) <= 0)
    return fmt::format("{} has no {} peak in its description; plan with --dtype {}", d.name,
                       dtype_name(dt), dt == Dtype::fp32 ? sixteen : "fp32");
  return "";
}

double DeviceSpec::linear_flops(Dtype d) const {
  if (d != Dtype::fp8) return peak_tflops(d) * 1e12 * matmul_efficiency;
  const double eff = matmul_efficiency_fp8 > 0 ? matmul_efficiency_fp8
                                               : std::min(1.0, matmul_efficiency * kFp8OverBf16);
  return peak_tflops_8 * 1e12 * eff;
}

}  // namespace kiln::plan
