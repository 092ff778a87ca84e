// The GEMM planner and launcher of the matrix ops (gemm.hpp).
#include "ops/runtime/gemm.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kjit/choices.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/log.hpp"
#include "kjit/kernel_family.hpp"
#include "ops/runtime/geometry.hpp"
#include "ops/runtime/kernels.hpp"
#include "ops/runtime/launch_kernel.hpp"
#include "ops/runtime/plan.hpp"
#include "ops/runtime/rows.hpp"
#include "ops/runtime/tensors.hpp"

namespace kjit::ops {

Activation parse_activation(const char* op, const std::optional<c10::string_view>& name) {
  if (!name) return Activation::None;
  const c10::string_view v = *name;
  if (v == "none") return Activation::None;
  if (v == "relu") return Activation::Relu;
  if (v == "gelu") return Activation::Gelu;
  if (v == "gelu_tanh") return Activation::GeluTanh;
  if (v == "silu") return Activation::Silu;
  fail_value(op, "activation must be None, 'relu', 'gelu', 'gelu_tanh' or 'silu', got '" + std::string(v) + "'");
}

void check_gemm_sizes(const char* op, const c10::SymInt& m, const c10::SymInt& n, const c10::SymInt& k,
                      const c10::SymInt& batch) {
  auto over = [](const c10::SymInt& v, std::int64_t limit) {
    const std::optional<std::int64_t> known = v.maybe_as_int();
    return known && *known > limit;
  };
  if (over(m, kMaxGemmDim) || over(n, kMaxGemmDim) || over(k, kMaxGemmDim))
    fail_value(op, "M, N and K must each be at most " + std::to_string(kMaxGemmDim) +
                       " (2^31 - 8: the kernels index with 32-bit integers), got M=" + c10::str(m) +
                       " N=" + c10::str(n) + " K=" + c10::str(k) +
                       "; split the problem into smaller GEMMs (the rows in chunks), or use torch for it");
  if (over(batch, kMaxGemmBatch))
    fail_value(op, "at most " + std::to_string(kMaxGemmBatch) + " matrices per batch, got " + c10::str(batch) +
                       "; split the batch into several calls");
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None: return "none";
    case Activation::Relu: return "relu";
    case Activation::Gelu: return "gelu";
    case Activation::GeluTanh: return "gelu_tanh";
    case Activation::Silu: return "silu";
  }
  return "none";
}

bool gemm_operand_ok(const at::Tensor& t) {
  if (t.size(-1) % 8 || t.stride(-1) != 1) return false;
  if (reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16) return false;
  for (std::int64_t d = 0; d + 1 < t.dim(); ++d)  // a broadcast (stride 0) dim: copied
    if (t.size(d) > 1 && (t.stride(d) % 8 || t.stride(d) <= 0)) return false;
  return true;
}

bool gemm_mn_operand_ok(const at::Tensor& t) {
  if (t.dim() < 2 || t.size(-1) == 0 || t.stride(-2) != 1 || t.stride(-1) <= 0 || t.stride(-1) % 8) return false;
  if (reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16) return false;
  return t.dim() == 2 || t.size(0) == 1 || (t.stride(0) > 0 && t.stride(0) % 8 == 0);
}

namespace {

// A tile configuration. wgmma: BM x BN tiles, BK 64, STAGES, and the consumers' schedule (cooperative on
// a tile, or ping-pong: gemm_sm90.cuh). mma.sync: also BK and the warp layout WM x WN x WK (WK > 1 splits
// K inside the block: the small-M form).
struct Config {
  bool wgmma;
  int bm, bn, bk, wm, wn, wk, stages;
  bool pingpong = false;
  // wgmma: how fast its tiles run, relative to the fastest configuration's, with a light epilogue (none or a
  // bias) and a heavy one (an activation, a residual, the pre-activation kept): measured on an H200
  // (bench/gemm_tiles.py; bench/results/2026-12-02-H200-gemm_tiles.md), the heuristic's weights.
  double light = 0, heavy = 0;
  std::string name() const {
    std::string s = std::string(wgmma ? (pingpong ? "wgmma-pingpong:" : "wgmma:") : "mma:") + std::to_string(bm) + "x" +
                    std::to_string(bn);
    if (!wgmma)
      s += "x" + std::to_string(bk) + ":w" + std::to_string(wm) + "x" + std::to_string(wn) + "x" + std::to_string(wk);
    return s + ":s" + std::to_string(stages);
  }
};

// The candidates of each kernel: all fit 227 KB of shared memory with the output tiles of the TMA store
// (wgmma_shared_bytes), the ping-pong ones first.
const std::vector<Config>& wgmma_configs(bool swiglu) {
  static const std::vector<Config> plain = {
      {true, 64, 256, 64, 0, 0, 0, 4, true, 0.91, 0.87},  {true, 128, 128, 64, 0, 0, 0, 5, true, 0.955, 0.89},
      {true, 64, 192, 64, 0, 0, 0, 5, true, 0.865, 0.84}, {true, 64, 128, 64, 0, 0, 0, 8, true, 0.72, 0.72},
      {true, 128, 256, 64, 0, 0, 0, 3, false, 1.0, 0.8},  {true, 128, 192, 64, 0, 0, 0, 4, false, 0.985, 0.8},
      {true, 128, 128, 64, 0, 0, 0, 6, false, 0.94, 0.8}, {true, 64, 128, 64, 0, 0, 0, 8, false, 0.82, 0.72},
      {true, 64, 64, 64, 0, 0, 0, 8, false, 0.56, 0.5}};
  static const std::vector<Config> gated = {{true, 64, 128, 64, 0, 0, 0, 4, true, 0.97, 0.97},
                                            {true, 128, 128, 64, 0, 0, 0, 4, false, 1.0, 1.0},
                                            {true, 128, 64, 64, 0, 0, 0, 6, false, 0.945, 0.945},
                                            {true, 64, 128, 64, 0, 0, 0, 5, false, 0.88, 0.88}};
  return swiglu ? gated : plain;
}
const std::vector<Config>& mma_configs() {
  static const std::vector<Config> all = {
      {false, 128, 128, 32, 2, 2, 1, 4}, {false, 64, 128, 32, 2, 2, 1, 4}, {false, 64, 64, 32, 2, 2, 1, 4}};
  return all;
}
// Small M (decode): 16 rows, the weight streamed through a STAGES-deep pipeline by WK warp groups splitting
// K; narrower tiles make more blocks (the weight read needs every multiprocessor streaming). A decode GEMM is
// bound by the bytes of weight in flight per multiprocessor: the deep forms (BK 128, 64-96 KB of pipeline)
// keep 1.2-2.8x the weight bytes in flight of the shallow ones (BK 64, 24-60 KB; 2.8x at 16 columns) and are
// listed first, the heuristic's pick for each width; the shallow ones stay candidates for tuning.
const std::vector<Config>& small_m_configs() {
  static const std::vector<Config> all = {{false, 16, 64, 128, 1, 2, 8, 4}, {false, 16, 32, 128, 1, 2, 8, 6},
                                          {false, 16, 16, 128, 1, 1, 8, 8}, {false, 16, 16, 128, 1, 1, 8, 12},
                                          {false, 16, 64, 64, 1, 2, 4, 6},  {false, 16, 32, 64, 1, 2, 8, 6},
                                          {false, 16, 16, 64, 1, 1, 8, 6}};
  return all;
}

constexpr std::int64_t kSmallM = 16;

// Elements of a k-tile of the mma.sync kernel: the configurations' BK is for 16-bit types; float (TF32)
// takes the same bytes per row.
int tile_k(const Config& c, const Gemm& g) { return g.dtype == at::ScalarType::Float ? c.bk / 2 : c.bk; }

// Whether the wgmma kernel can store C by TMA: 16-byte aligned rows (and matrices of a batch).
bool tma_store_ok(const Gemm& g) {
  if (reinterpret_cast<std::uintptr_t>(g.c.ptr) % 16 || g.c.ld % 8) return false;
  return g.batch == 1 || g.c.batch % 8 == 0;
}

// The wgmma kernel's consumer warpgroups (gemm_sm90.cuh's gemm_consumers).
int wgmma_consumers(const Config& c) { return c.pingpong ? 2 : c.bm / 64; }

unsigned shared_bytes(const Config& c, const Gemm& g) {
  const std::int64_t elem = g.dtype == at::ScalarType::Float ? 4 : 2, b_tiles = g.swiglu ? 2 : 1;
  if (c.wgmma) {
    const std::int64_t out = tma_store_ok(g) ? (c.pingpong ? 2 : 1) * c.bm * c.bn * elem : 0;
    return static_cast<unsigned>(1024 + c.stages * (c.bm + c.bn * b_tiles) * 64 * elem + out);
  }
  const std::int64_t pipe = c.stages * (c.bm + c.bn * b_tiles) * tile_k(c, g) * elem;
  const std::int64_t reduce = c.wk > 1 ? (c.wk - 1) * c.bm * c.bn * b_tiles * 4 : 0;
  return static_cast<unsigned>(std::max(pipe, reduce));
}

// Split-K (both kernels): a tile's k-tiles in `splits` parts of ceil(k_tiles / splits) each, on as many blocks;
// each part's fp32 accumulators go to a workspace and the last part to finish adds them up (in part order:
// the same sum whichever finishes last) and runs the epilogue. kMaxSplits parts at most; a part costs
// about kSplitCost k-tiles more (its accumulators written and read back).
constexpr int kMaxSplits = 8;
constexpr double kSplitCost = 4;

// Relative time of `splits` parts per tile: the waves of parts, each ceil(k_tiles / splits) k-tiles long
// (plus the fix-up's), and the last part's reading of every part's accumulators.
double split_time(std::int64_t tiles, std::int64_t k_tiles, int splits, int sms) {
  const std::int64_t waves = cdiv(tiles * splits, sms);
  const double part = static_cast<double>(cdiv(k_tiles, splits)) + (splits > 1 ? kSplitCost : 0);
  return static_cast<double>(waves) * part + (splits > 1 ? 0.5 * kSplitCost * splits : 0);
}

// The parts per tile of a mma.sync configuration, whose tiles are blocks (several resident on a
// multiprocessor), each part at least kMinPartKTiles k-tiles deep (and grid.z, batch * parts, within a
// launch's 65535). Tiles of M > 16 (128 threads): where they are fewer than the multiprocessors, as many parts
// as bring the blocks closest to two per multiprocessor. The small-M form (256-512 threads streaming the
// weight): only where its tiles give at most a quarter of the multiprocessors a block, up to one block each.
// Measured on an H200 (bench/conv1d.py, 2026-12-04, whole conv1d calls) with this rule: TF32 at M = 1024, a
// [1024, 1024] output over K = 5120 from 134 to 81 us and [1024, 512] over K = 10240 from 262 to 97 us; at M = 16,
// [16, 512] over K = 10240 from 33 to 20 us. A first rule (parts of 8 k-tiles, up to two blocks per
// multiprocessor everywhere) ran parts of 8-16 k-tiles up to 2x slower than no split, and the small-M form's 64
// blocks of a [16, 1024] output gained nothing from it.
//
// OFF (kMmaSplitK): the figures above are an earlier form's (a float per register, which compiled a 128x128 tile
// in 3.1 s). The current form (float4 partial sums) ran on an H200 on 2026-12-04 with this on: its direct-launch
// tests (test_gemm_split_k_*) passed under memcheck and racecheck, opcheck over every op passed, and the float32
// U-Net at batch 64 went from 2.98 to 1.83 ms; but the GPU tests of the GEMM, matmul, convolution and example
// files did not finish (5-10 of ~400 still running after 170-250 s, none failed): find out why before this is on.
constexpr bool kMmaSplitK = false;
constexpr std::int64_t kMinPartKTiles = 32;
int mma_split_k(const Config& c, const Gemm& g, int sms) {
  if (!kMmaSplitK) return 1;
  const std::int64_t tiles = cdiv(g.m, c.bm) * cdiv(g.n, c.bn) * g.batch, k_tiles = cdiv(g.k, tile_k(c, g));
  const bool small_m = c.bm <= kSmallM;
  if (small_m ? 4 * tiles > sms : tiles >= sms) return 1;
  const std::int64_t fill = (small_m ? sms : 2 * sms) / tiles;
  std::int64_t s = std::min<std::int64_t>({kMaxSplits, fill, k_tiles / kMinPartKTiles, 65535 / g.batch});
  while (s > 1 && (s - 1) * cdiv(k_tiles, s) >= k_tiles) --s;  // no part past K altogether
  return static_cast<int>(std::max<std::int64_t>(s, 1));
}

// The parts per tile of a configuration: for wgmma, more than one only where the tiles leave multiprocessors
// idle (fewer tiles than them, or a last wave mostly empty) and splitting K saves a tenth of the time.
int split_k(const Config& c, const Gemm& g, int sms) {
  if (!c.wgmma) return mma_split_k(c, g, sms);
  const std::int64_t tiles = cdiv(g.m, c.bm) * cdiv(g.n, c.bn) * g.batch, k_tiles = cdiv(g.k, 64);
  int best = 1;
  double best_time = split_time(tiles, k_tiles, 1, sms);
  for (int s = 2; s <= kMaxSplits && cdiv(k_tiles, s) >= 8; ++s) {
    if ((s - 1) * cdiv(k_tiles, s) >= k_tiles) continue;  // a part past K altogether
    const double t = split_time(tiles, k_tiles, s, sms);
    if (t < 0.9 * best_time && (best == 1 || t < best_time)) best = s, best_time = t;
  }
  return best;
}

// Relative cost of a configuration: the tiles of the waves it runs (their parts, split-K), weighted by
// how efficiently a tile of its size runs (wgmma: measured, by epilogue; mma.sync: small tiles reread more
// of A and B per output).
double estimate(const Config& c, const Gemm& g, int sms) {
  const std::int64_t tiles = cdiv(g.m, c.bm) * cdiv(g.n, c.bn) * g.batch, k_tiles = cdiv(g.k, 64);
  const double area = static_cast<double>(c.bm) * c.bn;
  if (c.wgmma) {
    const bool heavy = g.act != Activation::None || g.residual.ptr || g.aux.ptr;
    const double time = split_time(tiles, k_tiles, split_k(c, g, sms), sms) / static_cast<double>(k_tiles);
    return time * area / (heavy ? c.heavy : c.light);
  }
  const double efficiency = area >= 128 * 256 ? 1.0 : area >= 128 * 128 ? 0.92 : area >= 64 * 128 ? 0.8 : 0.62;
  return static_cast<double>(cdiv(tiles, sms)) * area / efficiency;
}

bool uses_wgmma(const Gemm& g, int device) {
  return target_of(device).arch == 90 && g.m > kSmallM && g.dtype != at::ScalarType::Float;
}

bool mn_operands(const Gemm& g) { return g.a.mn_major || g.b.mn_major; }

// The configurations of the kernel `g` runs on whose shared memory the device grants (sm_86 / sm_89 / sm_120
// opt in to 99 KB a block: not the deep small-M tiles of SwiGLU), in their order.
std::vector<Config> candidates(const Gemm& g, int device) {
  const std::vector<Config>& all =
      g.m <= kSmallM ? small_m_configs() : (uses_wgmma(g, device) ? wgmma_configs(g.swiglu) : mma_configs());
  const unsigned limit = max_shared_optin(device);
  std::vector<Config> out;
  for (const Config& c : all)
    if (shared_bytes(c, g) <= limit) out.push_back(c);
  return out;
}

Config heuristic(const Gemm& g, int device) {
  const int sms = sm_count(device);
  const std::vector<Config> all = candidates(g, device);
  if (all.empty())
    throw LaunchError("no GEMM tile configuration fits the " + std::to_string(max_shared_optin(device)) +
                      " bytes of shared memory a block of this GPU may use");
  if (g.m <= kSmallM) {  // the first listed of the widest tile that still gives every multiprocessor a block
    const Config* narrowest = &all[0];
    for (const Config& c : all) {
      if (cdiv(g.n, c.bn) * g.batch >= sms) return c;
      if (c.bn < narrowest->bn) narrowest = &c;
    }
    return *narrowest;
  }
  const Config* best = &all[0];
  double best_cost = std::numeric_limits<double>::max();
  for (const Config& c : all) {
    const double cost = estimate(c, g, sms);
    if (cost < best_cost) best_cost = cost, best = &c;
  }
  return *best;
}

// The M bucket a choice covers: the power of two at or above M (one choice per bucket, as one kernel per
// tile configuration serves every M).
std::int64_t m_bucket(std::int64_t m) {
  std::int64_t b = 1;
  while (b < m && b < (std::int64_t(1) << 40)) b <<= 1;
  return b;
}

// The tuned choice's key: everything the best configuration depends on.
std::string choice_key(const Gemm& g, int device) {
  std::string epi = activation_name(g.act);
  if (g.bias) epi += "+bias";
  if (g.residual.ptr) epi += "+residual";
  if (g.aux.ptr) epi += "+aux";
  if (g.swiglu) epi = std::string("swiglu") + (g.residual.ptr ? "+residual" : "") + (g.aux.ptr ? "+aux" : "");
  return "gemm|" + target_of(device).str() + "|" + c10::toString(g.dtype) + "|N=" + std::to_string(g.n) +
         "|K=" + std::to_string(g.k) + "|batch=" + (g.batch > 1 ? "many" : "1") + "|epi=" + epi +
         "|m<=" + std::to_string(m_bucket(g.m)) +
         (mn_operands(g) ? std::string("|major=") + (g.a.mn_major ? "m" : "k") + (g.b.mn_major ? "n" : "k") : "");
}

void launch(const char* op, const Config& c, const Gemm& g, int device, const LaunchContext& ctx);

// Times every candidate on ctx.stream (each compiled and run once first, then the median of a few runs)
// and returns the fastest. A candidate that fails to compile or launch is left out.
Config time_candidates(const char* op, const Gemm& g, int device, const LaunchContext& ctx, const Config& fallback) {
  const DriverLibrary& d = DriverLibrary::get();
  CUevent start = nullptr, stop = nullptr;
  d.check(d.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  d.check(d.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  Config best = fallback;
  float best_ms = std::numeric_limits<float>::max();
  std::string timings;  // "name time, ..." for the log
  constexpr int kRuns = 5;
  for (const Config& c : candidates(g, device)) {
    try {
      launch(op, c, g, device, ctx);
      d.check(d.cuEventRecord(start, ctx.stream), "cuEventRecord");
      for (int i = 0; i < kRuns; ++i) launch(op, c, g, device, ctx);
      d.check(d.cuEventRecord(stop, ctx.stream), "cuEventRecord");
      d.check(d.cuEventSynchronize(stop), "cuEventSynchronize");
      float ms = 0;
      d.check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
      if (ms < best_ms) best_ms = ms, best = c;
      timings += (timings.empty() ? "" : ", ") + c.name() + " " + std::to_string(1000.0 * ms / kRuns) + " us";
    } catch (const Error& e) {
      log::warn_once("gemm-tune:" + c.name() + ":" + e.what(),
                     std::string(op) + ": tuning left out the GEMM configuration " + c.name() + ": " + e.what());
    }
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  log::info(1, std::string(op) + ": timed M=" + std::to_string(g.m) + " N=" + std::to_string(g.n) +
                   " K=" + std::to_string(g.k) + " (default " + fallback.name() + "): " + timings);
  return best;
}

// The configuration for `g`: this process's earlier pick for the key, else a stored (or warmed) tuned
// choice, else (KJIT_TUNE=1, not strict, not capturing a CUDA graph) the fastest candidate, timed now and
// stored, else the heuristic's.
Config pick(const char* op, const Gemm& g, int device, const LaunchContext& ctx) {
  using Memo =
      std::tuple<int, int, std::int64_t, std::int64_t, bool, int, bool, bool, bool, bool, std::int64_t, bool, bool>;
  static std::mutex mu;
  static std::map<Memo, Config> memo;
  const Memo m{device,
               static_cast<int>(g.dtype),
               g.n,
               g.k,
               g.batch > 1,
               static_cast<int>(g.act),
               g.bias != nullptr,
               g.residual.ptr != nullptr,
               g.aux.ptr != nullptr,
               g.swiglu,
               m_bucket(g.m),
               g.a.mn_major,
               g.b.mn_major};
  // A compile-only plan (plan.hpp) picks as a GPU of its target would, each time (its target and count
  // differ from one plan to the next), and neither tunes nor records.
  const bool planning = device == kPlanDevice;
  if (!planning) {
    const std::lock_guard<std::mutex> lock(mu);
    const auto it = memo.find(m);
    if (it != memo.end()) return it->second;
  }
  Choices& choices = Choices::global();
  const std::string key = choice_key(g, device);
  Config c = heuristic(g, device);
  bool known = false;
  if (const auto stored = choices.find(key)) {
    for (const Config& candidate : candidates(g, device))
      if (candidate.name() == *stored) c = candidate, known = true;
    if (!known)
      log::warn_once("gemm-choice:" + key, std::string(op) + ": the tuned choice '" + *stored + "' for " + key +
                                               " names no configuration of this kjit; using the default (" + c.name() +
                                               ")");
  }
  if (planning) return c;
  if (!known && choices.tuning_allowed() && !ctx.compile_forbidden) {
    c = time_candidates(op, g, device, ctx, c);
    choices.store(key, c.name());
    log::info(1, std::string(op) + ": tuned " + key + ": " + c.name());
  } else if (!known) {
    // The heuristic reads the multiprocessor count: a strict deployment on another model of this
    // architecture replays this pick (warmed from the manifest), whose kernels were warmed.
    choices.record(key, c.name());
  }
  const std::lock_guard<std::mutex> lock(mu);
  memo.emplace(m, c);
  return c;
}

const KernelFamily& wgmma_family() {
  static const std::shared_ptr<const Template> t = builtin_template("gemm_sm90");
  static const KernelFamily f(Engine::global(), t, "gemm_wgmma", CompileOptions::library(), /*arch_specific=*/true);
  return f;
}
const KernelFamily& mma_family() {
  static const std::shared_ptr<const Template> t = builtin_template("gemm");
  static const KernelFamily f(Engine::global(), t, "gemm_mma", CompileOptions::library());
  return f;
}

// A CUtensorMap, and what it was encoded from: a 3-D tensor of 16-bit elements {inner, rows, batch} with
// row and batch strides in bytes, a box of {64, box_rows, 1}, 128-byte swizzle.
struct alignas(64) TensorMap {
  CUtensorMap map;
};
struct TensorMapKey {
  const void* ptr;
  std::uint64_t dims[3], strides[2];
  std::uint32_t box_rows;
  bool bf16;
  bool operator==(const TensorMapKey& o) const {
    return ptr == o.ptr && std::equal(dims, dims + 3, o.dims) && std::equal(strides, strides + 2, o.strides) &&
           box_rows == o.box_rows && bf16 == o.bf16;
  }
};

// The descriptor for `key`, encoded by the driver, or a copy of the same one encoded before on this thread:
// the last few are kept (a descriptor is a function of its key alone), so that a model's GEMMs, whose
// weights and (through the caching allocator) activations come back at the same addresses, encode none
// per call. A copy, never a reference into the ring: a launch takes three, and a miss overwrites the
// oldest slot, which an earlier hit of the same launch may be. ValueError naming `what` if the driver refuses.
TensorMap cached_tensor_map(const char* op, const TensorMapKey& key, const char* what) {
  struct Entry {
    TensorMapKey key;
    TensorMap map;
  };
  constexpr std::size_t kSlots = 16;
  thread_local std::array<Entry, kSlots> slots{};
  thread_local std::size_t used = 0, next = 0;
  for (std::size_t i = 0; i < used; ++i)
    if (slots[i].key == key) return slots[i].map;
  const DriverLibrary& d = DriverLibrary::get();
  TensorMap t{};
  const cuuint32_t box[3] = {64, key.box_rows, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = d.cuTensorMapEncodeTiled(
      &t.map, key.bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
      const_cast<void*>(key.ptr), key.dims, key.strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail_value(op, std::string("the driver refused a TMA descriptor of ") + what + " [" + std::to_string(key.dims[1]) +
                       ", " + std::to_string(key.dims[0]) + "] with row stride " + std::to_string(key.strides[0] / 2) +
                       " (" + d.error_name(r) + "); pass contiguous tensors");
  Entry& e = slots[next];
  e.key = key;
  e.map = t;
  next = (next + 1) % kSlots;
  used = std::max(used, next == 0 ? kSlots : next);
  return e.map;
}

// The descriptor of a matrix of g's dtype: {inner, rows, batch} elements, row and batch strides in
// elements, a {64, box_rows, 1} box.
TensorMap matrix_map(const char* op, const Gemm& g, const void* ptr, std::int64_t inner, std::int64_t rows,
                     std::int64_t ld, std::int64_t batch_stride, int box_rows, const char* what) {
  return cached_tensor_map(
      op,
      {ptr,
       {static_cast<std::uint64_t>(inner), static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(g.batch)},
       {static_cast<std::uint64_t>(ld * 2), static_cast<std::uint64_t>(batch_stride * 2)},
       static_cast<std::uint32_t>(box_rows),
       g.dtype == at::ScalarType::BFloat16},
      what);
}

// An operand's descriptor: {K, rows, batch} elements, a {64, box_rows, 1} box.
TensorMap operand_map(const char* op, const Gemm& g, const GemmMatrix& x, std::int64_t rows, int box_rows) {
  return matrix_map(op, g, x.ptr, g.k, rows, x.ld, x.batch ? x.batch : x.ld * rows, box_rows, "an operand");
}

// An M- / N-major operand's descriptor: {rows, K, batch} elements (rows contiguous, ld apart), a {64, 64, 1}
// box: gemm_sm90.cuh loads BM / 64 (BN / 64) of them a stage. K is the rows the operand holds (g.k_rows).
TensorMap mn_operand_map(const char* op, const Gemm& g, const GemmMatrix& x, std::int64_t rows) {
  const std::int64_t k = g.k_rows ? g.k_rows : g.k;
  return matrix_map(op, g, x.ptr, rows, k, x.ld, x.batch ? x.batch : x.ld * k, 64, "an operand");
}

// C's descriptor for the TMA store: {N, M, batch} elements, a {64, 64, 1} box.
TensorMap output_map(const char* op, const Gemm& g) {
  return matrix_map(op, g, g.c.ptr, g.n, g.m, g.c.ld, g.batch > 1 ? g.c.batch : g.c.ld * g.m, 64, "the output");
}

// The template arguments shared by both kernels after their tile parameters.
void epilogue_args(const Gemm& g, std::vector<TemplateArg>& args) {
  args.push_back(int_arg(static_cast<int>(g.act)));
  args.push_back(bool_arg(g.bias != nullptr));
  args.push_back(bool_arg(g.residual.ptr != nullptr));
  args.push_back(bool_arg(g.aux.ptr != nullptr));
  args.push_back(bool_arg(g.swiglu));
}

std::vector<TemplateArg> template_args(const Config& c, const Gemm& g) {
  std::vector<TemplateArg> args;
  args.reserve(16);
  args.push_back(type_arg(g.dtype));
  args.push_back(int_arg(specialized_d("gemm.N", g.n)));
  args.push_back(int_arg(specialized_d("gemm.K", g.k)));
  args.push_back(int_arg(c.bm));
  args.push_back(int_arg(c.bn));
  if (!c.wgmma) {
    args.push_back(int_arg(tile_k(c, g)));
    args.push_back(int_arg(c.wm));
    args.push_back(int_arg(c.wn));
    args.push_back(int_arg(c.wk));
  }
  args.push_back(int_arg(c.stages));
  if (c.wgmma) {
    args.push_back(bool_arg(c.pingpong));
    args.push_back(bool_arg(tma_store_ok(g)));
  }
  epilogue_args(g, args);
  if (mn_operands(g)) {  // A_MN, B_MN (defaults false: the K-major kernels keep their names)
    args.push_back(bool_arg(g.a.mn_major));
    args.push_back(bool_arg(g.b.mn_major));
  }
  return args;
}

// Split-K's workspace for `slots` arrival counters after `floats` fp32 partial sums: from PyTorch's caching
// allocator for the launch's stream (ordered after that stream's earlier work with the memory, and captured
// with the launch into a CUDA graph's pool), the counters zeroed on the stream.
struct SplitWorkspace {
  at::Tensor memory;
  float* partials = nullptr;
  int* arrivals = nullptr;
};
SplitWorkspace split_workspace(std::int64_t floats, std::int64_t slots, int device, const LaunchContext& ctx) {
  SplitWorkspace w;
  {
    const c10::cuda::CUDAStreamGuard on_launch_stream(c10::cuda::getStreamFromExternal(ctx.stream, device));
    w.memory = at::empty({floats + slots}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device));
  }
  w.partials = w.memory.data_ptr<float>();
  w.arrivals = reinterpret_cast<int*>(w.partials + floats);
  const DriverLibrary& d = DriverLibrary::get();
  d.check(d.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(w.arrivals), 0, static_cast<size_t>(slots), ctx.stream),
          "cuMemsetD32Async");
  return w;
}

void launch(const char* op, const Config& c, const Gemm& g, int device, const LaunchContext& ctx) {
  if (mn_operands(g) && !c.wgmma)  // the callers ask gemm_reads_mn_major, whose kernels are all wgmma
    throw LaunchError(std::string(op) + ": an M- / N-major operand for the mma.sync GEMM " + c.name() +
                      " (a kjit bug: it reads K-major operands only)");
  const std::vector<TemplateArg> targs = template_args(c, g);
  const auto k =
      kernel_for(c.wgmma ? wgmma_family() : mma_family(), targs.data(), targs.size(), device, ctx.compile_forbidden);
  LaunchConfig cfg;
  const std::int64_t tiles = cdiv(g.n, c.bn) * cdiv(g.m, c.bm) * g.batch;
  if (c.wgmma) {  // persistent: a block per multiprocessor, each looping over tiles
    cfg.grid.x = static_cast<unsigned>(std::min<std::int64_t>(tiles, sm_count(device)));
  } else {
    cfg.grid.x = static_cast<unsigned>(cdiv(g.n, c.bn));
    cfg.grid.y = static_cast<unsigned>(cdiv(g.m, c.bm));
    cfg.grid.z = static_cast<unsigned>(g.batch);
  }
  cfg.shared_mem = shared_bytes(c, g);
  cfg.stream = ctx.stream;
  int m = static_cast<int>(g.m), n = static_cast<int>(g.n), kk = static_cast<int>(g.k);
  void* cp = const_cast<void*>(g.c.ptr);
  long long ldc = g.c.ld, batch_c = g.c.batch;
  const void* bias = g.bias;
  const void* residual = g.residual.ptr;
  void* aux = const_cast<void*>(g.aux.ptr);
  long long ld_res = g.residual.ld, ld_aux = g.aux.ld, batch_res = g.residual.batch, batch_aux = g.aux.batch;
  float scale = g.scale;
  if (!k->kernel) return;  // a compile-only plan: no descriptors to encode, nothing to launch
  if (c.wgmma) {
    cfg.block.x = 128 * (wgmma_consumers(c) + 1);
    if (g.batch > 1 && (!g.a.batch || !g.b.batch))  // a TMA map has no stride-0 dim; the callers copy those
      throw LaunchError(std::string(op) + ": an operand shared by a batch (batch stride 0) for the wgmma GEMM " +
                        c.name() + " (a kjit bug: it reads a matrix per batch)");
    const TensorMap ta = g.a.mn_major ? mn_operand_map(op, g, g.a, g.m) : operand_map(op, g, g.a, g.m, c.bm);
    const TensorMap tb =
        g.b.mn_major ? mn_operand_map(op, g, g.b, g.n) : operand_map(op, g, g.b, g.swiglu ? 2 * g.n : g.n, c.bn);
    const TensorMap tc = tma_store_ok(g) ? output_map(op, g) : ta;  // not read without the TMA store
    int batch = static_cast<int>(g.batch);
    // Split-K: every part's fp32 accumulators, then an arrival counter per consumer's rows of a tile.
    int splits = split_k(c, g, sm_count(device));
    SplitWorkspace w;
    if (splits > 1) {
      const std::int64_t slots = tiles * (c.pingpong ? 1 : wgmma_consumers(c));
      w = split_workspace(tiles * splits * c.bm * c.bn * (g.swiglu ? 2 : 1), slots, device, ctx);
      cfg.grid.x = static_cast<unsigned>(std::min<std::int64_t>(tiles * splits, sm_count(device)));
    }
    launch_kernel(*k, cfg, ta.map, tb.map, tc.map, cp, m, n, kk, ldc, batch_c, bias, residual, aux, ld_res, ld_aux,
                  batch_res, batch_aux, scale, batch, splits, w.partials, w.arrivals);
  } else {
    cfg.block.x = 32 * c.wm * c.wn * c.wk;
    const void* ap = g.a.ptr;
    const void* bp = g.b.ptr;
    long long lda = g.a.ld, ldb = g.b.ld, batch_a = g.a.batch, batch_b = g.b.batch;
    // Split-K (fewer tiles than multiprocessors): the parts of a tile along grid.z, after its batch index; a
    // part's sums are its group-0 threads' registers, a tile's counter one int.
    int splits = split_k(c, g, sm_count(device));
    SplitWorkspace w;
    if (splits > 1) {
      w = split_workspace(tiles * splits * c.bm * c.bn * (g.swiglu ? 2 : 1), tiles, device, ctx);
      cfg.grid.z = static_cast<unsigned>(g.batch * splits);
    }
    launch_kernel(*k, cfg, ap, bp, cp, m, n, kk, lda, ldb, ldc, batch_a, batch_b, batch_c, bias, residual, aux, ld_res,
                  ld_aux, batch_res, batch_aux, scale, splits, w.partials, w.arrivals);
  }
}

}  // namespace

bool gemm_reads_mn_major(const Gemm& g, int device) { return uses_wgmma(g, device) && !g.swiglu; }

void run_gemm(const char* op, const Gemm& g, int device, const LaunchContext& ctx) {
  if (g.dtype != at::ScalarType::BFloat16 && g.dtype != at::ScalarType::Half && g.dtype != at::ScalarType::Float)
    fail_value(op,
               std::string("the GEMM kernels take bfloat16, float16 or float32 (TF32), got ") + c10::toString(g.dtype));
  // The ops checked these sizes on their own shapes already (the same rule as their Meta kernels); here, B's
  // rows (2N for SwiGLU) and the padded K as this GEMM has them.
  check_gemm_sizes(op, g.m, g.swiglu ? 2 * g.n : g.n, g.k, g.batch);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (device == kPlanDevice && PlanScope::require().candidates()) {  // what KJIT_TUNE=1 would time
    for (const Config& c : candidates(g, device)) launch(op, c, g, device, ctx);
    return;
  }
  const Config c = pick(op, g, device, ctx);
  if (cdiv(g.m, c.bm) * cdiv(g.n, c.bn) > std::numeric_limits<int>::max() / std::max<std::int64_t>(g.batch, 1))
    fail_value(op, "M=" + std::to_string(g.m) + ", N=" + std::to_string(g.n) + " and a batch of " +
                       std::to_string(g.batch) + " make more tiles than one launch covers; split the problem");
  if (!c.wgmma && cdiv(g.m, c.bm) > 65535)
    fail_value(op, "M=" + std::to_string(g.m) + " rows are more than one launch covers (" +
                       std::to_string(65535 * c.bm) + "); split the rows");
  launch(op, c, g, device, ctx);
}

}  // namespace kjit::ops
