// The CPU CSR product behind sparsegcn's packed CSR layout, as an XLA FFI handler.
//
//   y[i, :] = sum over k in [indptr[i], indptr[i + 1]) of data[k] * x[columns[k], :]
//
// float32 values, int32 row offsets and columns, any feature width F. The
// product is bound by gathering one row of x per entry, so the loop is built
// around that gather:
//
// - rows are split into chunks of about equal cost (entries plus a per-row
//   overhead), claimed through an atomic counter by the calling thread and
//   by helper std::threads kept for the process (see Job and Helpers);
// - where x is larger than half the L2 cache, the rows of x 16 entries
//   ahead are prefetched, so several cache misses are in flight while the
//   current row is summed (a smaller x stays in the cache: no prefetch);
// - each output row is summed in registers, one column tile (64 floats with
//   AVX2, 32 in baseline code) at a time, and stored once: y is written,
//   never read.
//
// Each output row is summed by one thread in entry order, so the result is
// bitwise the same for every thread count and chunking. The hot loop is
// compiled twice on x86-64, for the baseline ISA and for AVX2 + FMA, and the
// second is chosen at load time when the CPU has both (no -march=native: the
// library runs on any x86-64).
//
// Loaded and registered by sparsegcn/backends/native.py; built by setup.py.

// Python.h comes first, as Python asks; the library is also an (empty)
// Python extension module, see PyInit__csr_kernel at the end.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#include <unistd.h>
#endif

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// A vector of 8 floats read from unaligned memory (rows of x start anywhere
// when F is not a multiple of 8). Baseline x86-64 code splits it into two SSE
// registers; the AVX2 clone keeps it in one.
typedef float Vec8 __attribute__((vector_size(32), aligned(4), may_alias));

// A column tile: 8 vectors, 64 floats (256 bytes, four cache lines) where
// there are 16 vector registers of 8 floats (AVX2); 4 vectors in baseline
// x86-64 code, whose 16 registers hold 4 floats each.
constexpr int kWideTileVectors = 8;
constexpr int kBaselineTileVectors = 4;
constexpr std::int64_t kPrefetchDistance = 16;  // entries ahead
constexpr std::int64_t kRowCost = 4;            // a row's overhead, in entries, for chunking
constexpr int kChunksPerThread = 8;             // slack for uneven rows and a busy core
// Below this many multiply-adds a second thread costs more than it saves.
constexpr std::int64_t kMinWorkPerThread = std::int64_t{1} << 19;

struct Problem {
  const std::int32_t* indptr;
  const std::int32_t* columns;
  const float* data;
  const float* x;
  float* y;
  std::int64_t num_x_rows;
  std::int64_t features;
};

// One row's columns [c0, c0 + 8 K), summed in K vector registers. Returns
// whether a column id was out of range (a local flag, not a pointer, so the
// compiler may keep the problem's fields in registers).
template <int K, bool kPrefetch>
__attribute__((always_inline)) inline bool TileRow(const Problem& p, std::int64_t begin,
                                                   std::int64_t end, std::int64_t last,
                                                   std::int64_t c0, float* out) {
  bool bad = false;
  Vec8 acc[K];
  for (int k = 0; k < K; ++k) acc[k] = Vec8{};
  const std::int64_t f = p.features;
  for (std::int64_t e = begin; e < end; ++e) {
    if (kPrefetch) {
      const std::int64_t ahead = std::min(e + kPrefetchDistance, last);
      const std::uint32_t next = static_cast<std::uint32_t>(p.columns[ahead]);
      if (next < static_cast<std::uint64_t>(p.num_x_rows)) {
        const char* line = reinterpret_cast<const char*>(p.x + next * f + c0);
        for (int b = 0; b < K * 32; b += 64) __builtin_prefetch(line + b, 0, 3);
      }
    }
    const std::uint32_t col = static_cast<std::uint32_t>(p.columns[e]);
    if (__builtin_expect(col >= static_cast<std::uint64_t>(p.num_x_rows), 0)) {
      bad = true;
      continue;
    }
    const float w = p.data[e];
    const float* row = p.x + col * f + c0;
    for (int k = 0; k < K; ++k) {
      acc[k] += w * *reinterpret_cast<const Vec8*>(row + 8 * k);
    }
  }
  for (int k = 0; k < K; ++k) *reinterpret_cast<Vec8*>(out + 8 * k) = acc[k];
  return bad;
}

// The last F % 8 columns, one float at a time.
__attribute__((always_inline)) inline bool TailRow(const Problem& p, std::int64_t begin,
                                                   std::int64_t end, std::int64_t c0,
                                                   std::int64_t width, float* out) {
  bool bad = false;
  float acc[8] = {};
  const std::int64_t f = p.features;
  for (std::int64_t e = begin; e < end; ++e) {
    const std::uint32_t col = static_cast<std::uint32_t>(p.columns[e]);
    if (__builtin_expect(col >= static_cast<std::uint64_t>(p.num_x_rows), 0)) {
      bad = true;
      continue;
    }
    const float w = p.data[e];
    const float* row = p.x + col * f + c0;
    for (std::int64_t j = 0; j < width; ++j) acc[j] += w * row[j];
  }
  for (std::int64_t j = 0; j < width; ++j) out[j] = acc[j];
  return bad;
}

// Rows [r0, r1), every column, in tiles of kTile vectors; the body both builds share.
template <int kTile, bool kPrefetch>
__attribute__((always_inline)) inline bool RowsPass(const Problem& p, std::int64_t r0,
                                                    std::int64_t r1) {
  constexpr std::int64_t kTileFloats = 8 * kTile;
  bool bad = false;
  const std::int64_t f = p.features;
  const std::int64_t last = std::max<std::int64_t>(p.indptr[r1] - 1, 0);
  const std::int64_t full = f / kTileFloats * kTileFloats;
  const std::int64_t vectors = (f - full) / 8;
  const std::int64_t tail = full + 8 * vectors;
  for (std::int64_t i = r0; i < r1; ++i) {
    const std::int64_t begin = p.indptr[i], end = p.indptr[i + 1];
    float* out = p.y + i * f;
    for (std::int64_t c0 = 0; c0 < full; c0 += kTileFloats) {
      bad |= TileRow<kTile, kPrefetch>(p, begin, end, last, c0, out + c0);
    }
    switch (vectors) {
      case 1: bad |= TileRow<1, kPrefetch>(p, begin, end, last, full, out + full); break;
      case 2: bad |= TileRow<2, kPrefetch>(p, begin, end, last, full, out + full); break;
      case 3: bad |= TileRow<3, kPrefetch>(p, begin, end, last, full, out + full); break;
      case 4: bad |= TileRow<4, kPrefetch>(p, begin, end, last, full, out + full); break;
      case 5: bad |= TileRow<5, kPrefetch>(p, begin, end, last, full, out + full); break;
      case 6: bad |= TileRow<6, kPrefetch>(p, begin, end, last, full, out + full); break;
      case 7: bad |= TileRow<7, kPrefetch>(p, begin, end, last, full, out + full); break;
      default: break;
    }
    if (tail < f) bad |= TailRow(p, begin, end, tail, f - tail, out + tail);
  }
  return bad;
}

// An x of at most this many bytes (half the L2 cache a core has, read at
// load; 128 KiB where the system does not say) stays in that cache while a
// product runs: prefetching its rows only adds instructions (measured on a
// Cora GAE step: 10-30 % faster products without it).
std::int64_t ResidentBytes() {
  long l2 = -1;
#if defined(_SC_LEVEL2_CACHE_SIZE)
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return l2 > 0 ? static_cast<std::int64_t>(l2) / 2 : std::int64_t{128} << 10;
}

const std::int64_t kResidentBytes = ResidentBytes();

template <int kTile>
__attribute__((always_inline)) inline bool RowsBody(const Problem& p, std::int64_t r0,
                                                    std::int64_t r1) {
  if (p.num_x_rows * p.features * 4 <= kResidentBytes) return RowsPass<kTile, false>(p, r0, r1);
  return RowsPass<kTile, true>(p, r0, r1);
}

bool RowsBaseline(const Problem& p, std::int64_t r0, std::int64_t r1) {
  return RowsBody<kBaselineTileVectors>(p, r0, r1);
}

using RowsFn = bool (*)(const Problem&, std::int64_t, std::int64_t);

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) bool RowsAvx2(const Problem& p, std::int64_t r0,
                                                   std::int64_t r1) {
  return RowsBody<kWideTileVectors>(p, r0, r1);
}

RowsFn SelectRows() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return RowsAvx2;
  return RowsBaseline;
}
#else
RowsFn SelectRows() { return RowsBaseline; }
#endif

// Chosen once, when the library is loaded.
const RowsFn kBestRows = SelectRows();

int AvailableCores() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

// Cores this process may use, capped by SPARSEGCN_CSR_THREADS when set.
int DefaultThreads() {
  int threads = AvailableCores();
  if (const char* cap = std::getenv("SPARSEGCN_CSR_THREADS")) {
    const int value = std::atoi(cap);
    if (value > 0) threads = std::min(threads, value);
  }
  return threads;
}

const int kDefaultThreads = DefaultThreads();

// First row r with indptr[r] + kRowCost * r >= target (rows are monotone in cost).
std::int64_t RowAtCost(const std::int32_t* indptr, std::int64_t rows, std::int64_t target) {
  std::int64_t lo = 0, hi = rows;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (indptr[mid] + kRowCost * mid < target) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// One product split into chunks of rows. The caller and any helper threads
// claim chunks from `next`; the caller returns once `done` covers every chunk.
// A helper that wakes after the last chunk was claimed touches nothing but
// this (shared) record, so the caller never waits for a thread that has not
// started: on a busy machine it simply does more of the chunks itself.
struct Job {
  Problem p;
  RowsFn rows_fn;
  std::vector<std::int64_t> bounds;  // chunk c is rows [bounds[c], bounds[c + 1])
  std::int64_t chunks;
  std::atomic<std::int64_t> next{0};
  std::atomic<std::int64_t> done{0};
  std::atomic<bool> bad{false};
  std::mutex mutex;
  std::condition_variable finished;
};

void Work(Job& job) {
  bool bad = false;
  std::int64_t mine = 0;
  for (std::int64_t c; (c = job.next.fetch_add(1, std::memory_order_relaxed)) < job.chunks;) {
    if (job.bounds[c] < job.bounds[c + 1]) {
      bad |= job.rows_fn(job.p, job.bounds[c], job.bounds[c + 1]);
    }
    ++mine;
  }
  if (bad) job.bad.store(true, std::memory_order_relaxed);
  if (mine > 0 && job.done.fetch_add(mine, std::memory_order_acq_rel) + mine == job.chunks) {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.finished.notify_all();
  }
}

// Helper threads, started on the first product big enough to share and kept
// for the life of the process (the library is never unloaded). They sleep on
// a condition variable between products; nothing spins.
class Helpers {
 public:
  explicit Helpers(int count) : count_(count) {
    for (int t = 0; t < count; ++t) std::thread([this] { Loop(); }).detach();
  }

  int count() const { return count_; }

  void Offer(const std::shared_ptr<Job>& job, int helpers) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int h = 0; h < helpers; ++h) queue_.push_back(job);
    }
    if (helpers == 1) {
      wake_.notify_one();
    } else {
      wake_.notify_all();
    }
  }

 private:
  void Loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      Work(*job);
    }
  }

  const int count_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
};

Helpers& GetHelpers() {
  static Helpers* helpers = new Helpers(std::max(kDefaultThreads - 1, 0));  // never freed
  return *helpers;
}

void Run(const Problem& p, std::int64_t rows, RowsFn rows_fn, int threads, bool* bad) {
  const std::int64_t entries = p.indptr[rows];
  const std::int64_t work = (entries + rows) * p.features;
  threads = static_cast<int>(
      std::clamp<std::int64_t>(work / kMinWorkPerThread, 1, std::max(threads, 1)));
  if (threads == 1) {
    *bad = rows_fn(p, 0, rows);
    return;
  }
  auto job = std::make_shared<Job>();
  job->p = p;
  job->rows_fn = rows_fn;
  job->chunks = std::min<std::int64_t>(std::int64_t{threads} * kChunksPerThread, rows);
  const std::int64_t total = entries + kRowCost * rows;
  job->bounds.resize(job->chunks + 1);
  for (std::int64_t c = 0; c <= job->chunks; ++c) {
    job->bounds[c] = c == job->chunks ? rows : RowAtCost(p.indptr, rows, total * c / job->chunks);
  }
  Helpers& helpers = GetHelpers();
  const int helping = std::min(threads - 1, helpers.count());
  if (helping > 0) helpers.Offer(job, helping);
  Work(*job);
  {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->finished.wait(lock, [&] {
      return job->done.load(std::memory_order_acquire) == job->chunks;
    });
  }
  *bad = job->bad.load();
}

// isa: 0 the best the CPU has, 1 the baseline build. threads: 0 the default.
ffi::Error CsrSpmm(ffi::BufferR1<ffi::S32> indptr, ffi::BufferR1<ffi::S32> columns,
                   ffi::BufferR1<ffi::F32> data, ffi::BufferR2<ffi::F32> x,
                   ffi::ResultBufferR2<ffi::F32> y, std::int64_t isa, std::int64_t threads) {
  const std::int64_t rows = static_cast<std::int64_t>(indptr.element_count()) - 1;
  const auto x_dims = x.dimensions();
  const auto y_dims = y->dimensions();
  const std::int64_t num_entries = static_cast<std::int64_t>(columns.element_count());
  if (rows < 0) return ffi::Error::InvalidArgument("csr_spmm: indptr is empty");
  if (static_cast<std::int64_t>(data.element_count()) != num_entries) {
    return ffi::Error::InvalidArgument("csr_spmm: data and columns differ in length");
  }
  if (y_dims[0] != rows || y_dims[1] != x_dims[1]) {
    return ffi::Error::InvalidArgument("csr_spmm: output shape is not [rows, F]");
  }
  const std::int32_t* offsets = indptr.typed_data();
  if (offsets[0] != 0 || offsets[rows] > num_entries) {
    return ffi::Error::InvalidArgument("csr_spmm: indptr must start at 0 and end within columns");
  }
  for (std::int64_t i = 0; i < rows; ++i) {
    if (offsets[i + 1] < offsets[i]) {
      return ffi::Error::InvalidArgument("csr_spmm: indptr decreases at row " + std::to_string(i));
    }
  }
  const std::int64_t features = x_dims[1];
  if (rows == 0 || features == 0) return ffi::Error::Success();
  const Problem p{offsets,        columns.typed_data(), data.typed_data(), x.typed_data(),
                  y->typed_data(), x_dims[0],           features};
  const RowsFn rows_fn = isa == 1 ? RowsBaseline : kBestRows;
  bool bad = false;
  Run(p, rows, rows_fn, threads > 0 ? static_cast<int>(threads) : kDefaultThreads, &bad);
  if (bad) {
    return ffi::Error::InvalidArgument("csr_spmm: a column id is outside [0, " +
                                       std::to_string(x_dims[0]) + ")");
  }
  return ffi::Error::Success();
}

// ---------------------------------------------------------------------------
// Pair scores: the inner-product (and DistMult) link decoder and its gradient.
//
//   s[p] = sum over d of z[u_p, d] * r[d] * z[v_p, d]      (r = 1 unless weighted)
//
// and, for an upstream gradient g[p],
//
//   dz[u_p, :] += g[p] * r * z[v_p, :],   dz[v_p, :] += g[p] * r * z[u_p, :],
//   dr[d] = sum over p of g[p] * z[u_p, d] * z[v_p, d].
//
// Both read two rows of z per pair and nothing else, where XLA's CPU gather
// and scatter-add run as several passes over [P, D] temporaries. One thread:
// a link step's pairs are a few thousand, and the gradient's scatter would
// race across threads. Pairs are taken in order, so results are bitwise
// reproducible.

struct PairProblem {
  const float* z;
  const std::int32_t* pairs;  // [P, 2]
  const float* relation;      // [D], read only when weighted
  std::int64_t nodes, dim, count;
  bool weighted;
};

__attribute__((always_inline)) inline bool PairIds(const PairProblem& p, std::int64_t i,
                                                   std::int64_t* u, std::int64_t* v) {
  const std::uint32_t a = static_cast<std::uint32_t>(p.pairs[2 * i]);
  const std::uint32_t b = static_cast<std::uint32_t>(p.pairs[2 * i + 1]);
  *u = a;
  *v = b;
  return a < static_cast<std::uint64_t>(p.nodes) && b < static_cast<std::uint64_t>(p.nodes);
}

// z_u . (r * z_v), 8 columns at a time in one vector register, then the rest.
__attribute__((always_inline)) inline float PairDot(const PairProblem& p, const float* zu,
                                                    const float* zv) {
  const std::int64_t dim = p.dim, vectors = dim / 8 * 8;
  Vec8 acc{};
  float rest = 0.0f;
  if (p.weighted) {
    for (std::int64_t d = 0; d < vectors; d += 8) {
      acc += *reinterpret_cast<const Vec8*>(zu + d) *
             *reinterpret_cast<const Vec8*>(p.relation + d) * *reinterpret_cast<const Vec8*>(zv + d);
    }
    for (std::int64_t d = vectors; d < dim; ++d) rest += zu[d] * p.relation[d] * zv[d];
  } else {
    for (std::int64_t d = 0; d < vectors; d += 8) {
      acc += *reinterpret_cast<const Vec8*>(zu + d) * *reinterpret_cast<const Vec8*>(zv + d);
    }
    for (std::int64_t d = vectors; d < dim; ++d) rest += zu[d] * zv[d];
  }
  // A tree, not a chain of 8 adds: the next pair's loads need not wait on it.
  typedef float Vec4 __attribute__((vector_size(16)));
  const Vec4 quad = Vec4{acc[0], acc[1], acc[2], acc[3]} + Vec4{acc[4], acc[5], acc[6], acc[7]};
  return ((quad[0] + quad[2]) + (quad[1] + quad[3])) + rest;
}

__attribute__((always_inline)) inline bool ScoresBody(const PairProblem& p, float* s) {
  for (std::int64_t i = 0; i < p.count; ++i) {
    std::int64_t u, v;
    if (__builtin_expect(!PairIds(p, i, &u, &v), 0)) return false;
    s[i] = PairDot(p, p.z + u * p.dim, p.z + v * p.dim);
  }
  return true;
}

// dz[u] += w r z_v, then dz[v] += w r z_u (each read after the write before it,
// so a self-pair, u == v, adds both halves to its one row), and dr += w z_u z_v.
__attribute__((always_inline)) inline bool ScoresGradBody(const PairProblem& p, const float* g,
                                                          float* dz, float* dr) {
  const std::int64_t dim = p.dim, vectors = dim / 8 * 8;
  std::fill(dz, dz + p.nodes * dim, 0.0f);
  std::fill(dr, dr + dim, 0.0f);
  for (std::int64_t i = 0; i < p.count; ++i) {
    std::int64_t u, v;
    if (__builtin_expect(!PairIds(p, i, &u, &v), 0)) return false;
    const float* zu = p.z + u * dim;
    const float* zv = p.z + v * dim;
    float* du = dz + u * dim;
    float* dv = dz + v * dim;
    const float w = g[i];
    for (std::int64_t d = 0; d < vectors; d += 8) {
      const Vec8 a = *reinterpret_cast<const Vec8*>(zu + d);
      const Vec8 b = *reinterpret_cast<const Vec8*>(zv + d);
      Vec8 wa = w * a, wb = w * b;
      if (p.weighted) {
        const Vec8 r = *reinterpret_cast<const Vec8*>(p.relation + d);
        *reinterpret_cast<Vec8*>(dr + d) += wa * b;
        wa *= r;
        wb *= r;
      }
      *reinterpret_cast<Vec8*>(du + d) += wb;
      *reinterpret_cast<Vec8*>(dv + d) += wa;
    }
    for (std::int64_t d = vectors; d < dim; ++d) {
      const float a = zu[d], b = zv[d];
      const float r = p.weighted ? p.relation[d] : 1.0f;
      if (p.weighted) dr[d] += w * a * b;
      du[d] += w * r * b;
      dv[d] += w * r * a;
    }
  }
  return true;
}

bool ScoresBaseline(const PairProblem& p, float* s) { return ScoresBody(p, s); }
bool ScoresGradBaseline(const PairProblem& p, const float* g, float* dz, float* dr) {
  return ScoresGradBody(p, g, dz, dr);
}

using ScoresFn = bool (*)(const PairProblem&, float*);
using ScoresGradFn = bool (*)(const PairProblem&, const float*, float*, float*);

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) bool ScoresAvx2(const PairProblem& p, float* s) {
  return ScoresBody(p, s);
}
__attribute__((target("avx2,fma"))) bool ScoresGradAvx2(const PairProblem& p, const float* g,
                                                        float* dz, float* dr) {
  return ScoresGradBody(p, g, dz, dr);
}
const ScoresFn kBestScores = kBestRows == RowsBaseline ? ScoresBaseline : ScoresAvx2;
const ScoresGradFn kBestScoresGrad =
    kBestRows == RowsBaseline ? ScoresGradBaseline : ScoresGradAvx2;
#else
const ScoresFn kBestScores = ScoresBaseline;
const ScoresGradFn kBestScoresGrad = ScoresGradBaseline;
#endif

// Leading dimensions are a batch (vmapped seeds, a map over chunks): z [B..., N, D],
// pairs [B..., P, 2], relation [B..., D] (or [B..., 0] unweighted), g [B..., P]. An
// argument's leading dimension of size 1 is broadcast (vmap gives unbatched
// arguments one, so a shared z is read in place, never copied per element). One
// problem per batch element, run in turn.
constexpr std::size_t kMaxBatchRank = 8;

struct PairBatch {
  PairProblem p;  // element 0; the others are offset by the strides
  std::size_t rank = 0;
  std::int64_t dims[kMaxBatchRank] = {};     // the batch's leading dimensions
  std::int64_t z_step[kMaxBatchRank] = {};   // elements of z between neighbours, 0: broadcast
  std::int64_t pair_step[kMaxBatchRank] = {};
  std::int64_t rel_step[kMaxBatchRank] = {};
  std::int64_t grad_step[kMaxBatchRank] = {};  // of g (pairs' batch layout, one value a pair)
  std::int64_t batch = 1;                       // product of dims
  std::int64_t relation_size = 0;               // per element: D or 0
};

// Checks shared by both handlers; fills `b` or says what is wrong. `g` may be null.
ffi::Error PairSetup(const char* name, ffi::Buffer<ffi::F32>& z, ffi::Buffer<ffi::S32>& pairs,
                     ffi::Buffer<ffi::F32>& relation, const ffi::Buffer<ffi::F32>* g,
                     std::int64_t weighted, PairBatch* b) {
  const auto z_dims = z.dimensions();
  const auto pair_dims = pairs.dimensions();
  const auto rel_dims = relation.dimensions();
  const std::string who(name);
  const std::size_t lead = z_dims.size() < 2 ? 0 : z_dims.size() - 2;
  if (z_dims.size() < 2 || pair_dims.size() != lead + 2 || rel_dims.size() != lead + 1 ||
      (g != nullptr && g->dimensions().size() != lead + 1) || lead > kMaxBatchRank) {
    return ffi::Error::InvalidArgument(who + ": expected z [..., N, D], pairs [..., P, 2], "
                                       "relation [..., D] with the same number of leading "
                                       "dimensions");
  }
  const std::int64_t nodes = z_dims[lead], dim = z_dims[lead + 1], count = pair_dims[lead];
  if (pair_dims[lead + 1] != 2) return ffi::Error::InvalidArgument(who + ": pairs must be [P, 2]");
  if (g != nullptr && g->dimensions()[lead] != count) {
    return ffi::Error::InvalidArgument(who + ": g must be [P]");
  }
  const std::int64_t relation_size = rel_dims[lead];
  if (weighted != 0 && relation_size != dim) {
    return ffi::Error::InvalidArgument(who + ": relation must be [D]");
  }
  b->rank = lead;
  b->relation_size = relation_size;
  // Strides from the innermost leading dimension out; size-1 dimensions broadcast.
  std::int64_t z_stride = nodes * dim, pair_stride = count * 2, rel_stride = relation_size,
               grad_stride = count;
  for (std::size_t i = lead; i-- > 0;) {
    const std::int64_t sizes[4] = {z_dims[i], pair_dims[i], rel_dims[i],
                                   g != nullptr ? g->dimensions()[i] : 1};
    std::int64_t n = 1;
    for (std::int64_t size : sizes) n = std::max(n, size);
    for (std::int64_t size : sizes) {
      if (size != n && size != 1) {
        return ffi::Error::InvalidArgument(who + ": leading dimensions differ");
      }
    }
    b->dims[i] = n;
    b->z_step[i] = z_dims[i] == 1 ? 0 : z_stride;
    b->pair_step[i] = pair_dims[i] == 1 ? 0 : pair_stride;
    b->rel_step[i] = rel_dims[i] == 1 ? 0 : rel_stride;
    b->grad_step[i] = g == nullptr || g->dimensions()[i] == 1 ? 0 : grad_stride;
    z_stride *= z_dims[i];
    pair_stride *= pair_dims[i];
    rel_stride *= rel_dims[i];
    grad_stride *= g != nullptr ? g->dimensions()[i] : 1;
    b->batch *= n;
  }
  b->p = PairProblem{z.typed_data(), pairs.typed_data(), relation.typed_data(), nodes, dim, count,
                     weighted != 0};
  return ffi::Error::Success();
}

// Batch element k of `b` (row-major over the leading dimensions), and its g offset.
PairProblem Element(const PairBatch& b, std::int64_t k, std::int64_t* grad_offset) {
  PairProblem p = b.p;
  std::int64_t g = 0;
  for (std::size_t i = b.rank; i-- > 0;) {
    const std::int64_t index = k % b.dims[i];
    k /= b.dims[i];
    p.z += index * b.z_step[i];
    p.pairs += index * b.pair_step[i];
    p.relation += index * b.rel_step[i];
    g += index * b.grad_step[i];
  }
  *grad_offset = g;
  return p;
}

ffi::Error OutOfRange(const char* name, std::int64_t nodes) {
  return ffi::Error::InvalidArgument(std::string(name) + ": a node id is outside [0, " +
                                     std::to_string(nodes) + ")");
}

// isa: 0 the best the CPU has, 1 the baseline build.
ffi::Error PairScores(ffi::Buffer<ffi::F32> z, ffi::Buffer<ffi::S32> pairs,
                      ffi::Buffer<ffi::F32> relation, ffi::ResultBuffer<ffi::F32> s,
                      std::int64_t weighted, std::int64_t isa) {
  PairBatch b;
  if (ffi::Error e = PairSetup("pair_scores", z, pairs, relation, nullptr, weighted, &b);
      e.failure()) {
    return e;
  }
  if (static_cast<std::int64_t>(s->element_count()) != b.batch * b.p.count) {
    return ffi::Error::InvalidArgument("pair_scores: output is not [..., P]");
  }
  const ScoresFn fn = isa == 1 ? ScoresBaseline : kBestScores;
  for (std::int64_t k = 0; k < b.batch; ++k) {
    std::int64_t unused;
    if (!fn(Element(b, k, &unused), s->typed_data() + k * b.p.count)) {
      return OutOfRange("pair_scores", b.p.nodes);
    }
  }
  return ffi::Error::Success();
}

ffi::Error PairScoresGrad(ffi::Buffer<ffi::F32> z, ffi::Buffer<ffi::S32> pairs,
                          ffi::Buffer<ffi::F32> relation, ffi::Buffer<ffi::F32> g,
                          ffi::ResultBuffer<ffi::F32> dz, ffi::ResultBuffer<ffi::F32> dr,
                          std::int64_t weighted, std::int64_t isa) {
  PairBatch b;
  if (ffi::Error e = PairSetup("pair_scores_grad", z, pairs, relation, &g, weighted, &b);
      e.failure()) {
    return e;
  }
  const PairProblem& p = b.p;
  if (static_cast<std::int64_t>(dz->element_count()) != b.batch * p.nodes * p.dim ||
      static_cast<std::int64_t>(dr->element_count()) != b.batch * p.dim) {
    return ffi::Error::InvalidArgument("pair_scores_grad: dz or dr has the wrong shape");
  }
  const ScoresGradFn fn = isa == 1 ? ScoresGradBaseline : kBestScoresGrad;
  for (std::int64_t k = 0; k < b.batch; ++k) {
    std::int64_t offset;
    const PairProblem element = Element(b, k, &offset);
    if (!fn(element, g.typed_data() + offset, dz->typed_data() + k * p.nodes * p.dim,
            dr->typed_data() + k * p.dim)) {
      return OutOfRange("pair_scores_grad", p.nodes);
    }
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SparsegcnCsrSpmm, CsrSpmm,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::BufferR1<ffi::S32>>()  // indptr [rows + 1]
                                  .Arg<ffi::BufferR1<ffi::S32>>()  // columns [E]
                                  .Arg<ffi::BufferR1<ffi::F32>>()  // data [E]
                                  .Arg<ffi::BufferR2<ffi::F32>>()  // x [M, F]
                                  .Ret<ffi::BufferR2<ffi::F32>>()  // y [rows, F]
                                  .Attr<std::int64_t>("isa")
                                  .Attr<std::int64_t>("threads"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SparsegcnPairScores, PairScores,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // z [..., N, D]
                                  .Arg<ffi::Buffer<ffi::S32>>()  // pairs [..., P, 2]
                                  .Arg<ffi::Buffer<ffi::F32>>()  // relation [..., D] or [..., 0]
                                  .Ret<ffi::Buffer<ffi::F32>>()  // s [..., P]
                                  .Attr<std::int64_t>("weighted")
                                  .Attr<std::int64_t>("isa"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SparsegcnPairScoresGrad, PairScoresGrad,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // z [..., N, D]
                                  .Arg<ffi::Buffer<ffi::S32>>()  // pairs [..., P, 2]
                                  .Arg<ffi::Buffer<ffi::F32>>()  // relation [..., D] or [..., 0]
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g [..., P]
                                  .Ret<ffi::Buffer<ffi::F32>>()  // dz [..., N, D]
                                  .Ret<ffi::Buffer<ffi::F32>>()  // dr [..., D]
                                  .Attr<std::int64_t>("weighted")
                                  .Attr<std::int64_t>("isa"));

// The hot loop chosen at load: "avx2+fma" or "baseline".
extern "C" __attribute__((visibility("default"))) const char* SparsegcnCsrIsa() {
  return kBestRows == RowsBaseline ? "baseline" : "avx2+fma";
}

// The largest x (bytes) a product reads without prefetching its rows.
extern "C" __attribute__((visibility("default"))) std::int64_t SparsegcnCsrResidentBytes() {
  return kResidentBytes;
}

// Threads a product uses at most (cores, capped by SPARSEGCN_CSR_THREADS).
extern "C" __attribute__((visibility("default"))) int SparsegcnCsrThreads() {
  return kDefaultThreads;
}

// setup.py builds the library as a Python extension module, so anything that
// walks the package (pkgutil, documentation tools) may import it: it then
// gets an empty module. The kernel itself is reached through ctypes and
// jax.ffi, never through Python.
static PyModuleDef csr_kernel_module = {
    PyModuleDef_HEAD_INIT,
    "_csr_kernel",
    "sparsegcn's native CPU CSR kernel (an XLA FFI handler; see sparsegcn.backends.native).",
    0,
    nullptr,
};

PyMODINIT_FUNC PyInit__csr_kernel() { return PyModuleDef_Init(&csr_kernel_module); }
