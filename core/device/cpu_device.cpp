// CpuDevice: host memory and OpenBLAS. The reference every other device is checked against.
//
// Host memory comes from a caching pool per device (per rank), below the tracker, as the CUDA
// caching allocator sits below PyTorch's accounting: the tracker sees every alloc and free as
// before, but a freed block is kept and handed to the next request of the same size class instead
// of going back to the C library. The engine frees and allocates the same sizes every step
// (gathered units, activations, gradient buffers, scratch), and blocks above glibc's mmap
// threshold went back to the kernel on free, so every step faulted their pages in again. The
// pool holds at most kPoolCacheBytes of free blocks; SHARDLAB_CPU_POOL=0 turns it off (every
// block straight to and from the C library, as before), and so do the sanitizer builds, where
// reuse would hide a use after free.
//
// The pool's large blocks are mappings of their own, each starting at a different cache line of
// its first page (its "colour"). A reduction streams several buffers side by side (every rank's
// send block, every rank's recv), and on this project's AMD host it ran up to 3x slower when
// those buffers shared their low address bits than when they did not: docs/collectives.md,
// "Buffer placement". The C library makes such layouts by itself. Local ranks are threads, glibc
// serves each thread from its own arena on a 64 MiB boundary, and every rank makes the same
// requests in the same order, so two ranks' gradient buffers sit at nearly the same offset of
// arenas 128 MiB apart; and same-sized mappings land exactly their size apart. So each mapping is
// one page longer than its block (mappings placed one after another are not a power of two
// apart), and the colours are taken in a stride: blocks allocated one after another (two ranks'
// buffers, a send and its recv) start 23 lines apart within the page, any four in a row at least
// 5, so buffers streamed in step do not use the same cache set at the same time.
#include "core/device/cpu_device.hpp"

#include <cblas.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/device/cpu_gemm.hpp"

namespace shardlab {

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kPoolBuild = false;
#else
constexpr bool kPoolBuild = true;
#endif

// Free blocks a device's pool keeps at most; a block freed beyond it goes back to the system.
constexpr size_t kPoolCacheBytes = size_t{1} << 30;

// Size classes from here up are mapped one block at a time (glibc's own default mmap threshold;
// its dynamic threshold would move such blocks into the arenas once the first one is freed).
constexpr size_t kMapBytes = size_t{128} << 10;

bool pool_enabled() {
  if (!kPoolBuild) return false;
  const char* e = std::getenv("SHARDLAB_CPU_POOL");
  return !(e && std::strcmp(e, "0") == 0);
}

// The size class of a request: whole cache lines up to 4 KiB, then four classes per power of two
// (a block is at most 25% larger than asked; the pages a caller never touches cost no memory).
size_t size_class(size_t bytes) {
  bytes = (bytes + 63) & ~size_t{63};
  if (bytes <= 4096) return bytes;
  size_t top = size_t{1} << (63 - __builtin_clzll(bytes));  // largest power of two <= bytes
  const size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

constexpr size_t kPage = 4096;
constexpr size_t kLine = 64;

// The offset of the next mapped block in its first page: the 64 cache lines of a page in a
// stride of 23, one process-wide sequence (so two ranks' blocks of one request differ too).
size_t next_colour() {
  static std::atomic<uint32_t> next{0};
  constexpr uint32_t kColours = kPage / kLine, kStride = 23;
  return (next.fetch_add(1, std::memory_order_relaxed) * kStride % kColours) * kLine;
}

// A block of size class c: from kMapBytes up a mapping of its own, one page longer than c, with
// the block at its colour; below, from the C library.
void* block_alloc(size_t c) {
  if (c < kMapBytes) return std::aligned_alloc(kLine, c);
  void* m = mmap(nullptr, c + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  return static_cast<char*>(m) + next_colour();
}

void block_free(void* p, size_t c) {
  if (c < kMapBytes) {
    std::free(p);
  } else {
    const uintptr_t page = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(kPage - 1);
    munmap(reinterpret_cast<void*>(page), c + kPage);
  }
}

}  // namespace

// Free blocks by size class, and the class of every block handed out. Called from the rank's
// thread and its communicator's worker (staging), so under a mutex.
class HostPool {
 public:
  ~HostPool() {
    for (auto& kv : free_)
      for (void* p : kv.second) block_free(p, kv.first);
  }
  void* take(size_t bytes) {
    const size_t c = size_class(bytes);
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = free_.find(c);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= c;
        live_[p] = c;
        return p;
      }
    }
    void* p = block_alloc(c);
    if (!p) return nullptr;
    std::lock_guard<std::mutex> lk(mu_);
    live_[p] = c;
    return p;
  }
  void give(void* p) {
    std::unique_lock<std::mutex> lk(mu_);
    auto it = live_.find(p);
    const size_t c = it->second;
    live_.erase(it);
    if (cached_ + c > kPoolCacheBytes) {
      lk.unlock();
      block_free(p, c);
      return;
    }
    free_[c].push_back(p);
    cached_ += c;
  }

 private:
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> live_;
  size_t cached_ = 0;
};

CpuDevice::CpuDevice(MemoryTracker& tracker, bool pooled) : Device(tracker) {
  if (pooled && pool_enabled()) pool_ = std::make_unique<HostPool>();
}

CpuDevice::~CpuDevice() = default;

void CpuDevice::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
}

void CpuDevice::fill_zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

void CpuDevice::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void CpuDevice::gemm_batched(bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                             int lda, int64_t sa, const float* B, int ldb, int64_t sb, float beta,
                             float* C, int ldc, int64_t sc, int batch) {
  for (int i = 0; i < batch; ++i)
    gemm(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}

void CpuDevice::gemm_ex(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda,
                        const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c) {
  cpu_gemm_ex(ta, tb, M, N, K, alpha, A, lda, B, ldb, ab, beta, C, ldc, c);
}

std::string CpuDevice::gemm_path(DType ab) const { return cpu_gemm_path_name(ab); }

void* CpuDevice::raw_alloc(int64_t bytes) {
  // 64-byte alignment: whole cache lines, and what AVX-512 loads like.
  void* p = nullptr;
  if (pool_) {
    p = pool_->take(static_cast<size_t>(bytes));
  } else {
    size_t n = (static_cast<size_t>(bytes) + 63) & ~size_t{63};
    p = std::aligned_alloc(64, n);
  }
  if (!p) SL_THROW(OutOfMemory, "host allocation of ", format_bytes(bytes), " failed");
  return p;
}

void CpuDevice::raw_free(void* p) {
  if (pool_)
    pool_->give(p);
  else
    std::free(p);
}

std::unique_ptr<Device> make_cpu_device(MemoryTracker& tracker) {
  return std::make_unique<CpuDevice>(tracker);
}

void set_blas_threads(int n) { openblas_set_num_threads(n); }

}  // namespace shardlab
