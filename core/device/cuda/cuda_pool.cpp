// CudaPool: caching, stream-ordered GPU allocations (see cuda_pool.hpp for the reuse rules).
#include "core/device/cuda/cuda_pool.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/device/cuda/cuda_check.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {

int64_t CudaPool::round_size(int64_t bytes) {
  if (bytes <= 0) return kSmallRound;
  int64_t r = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

CudaPool::CudaPool(int ordinal, cudaStream_t home) : ordinal_(ordinal), home_(home) {}

CudaPool::~CudaPool() {
  CudaDeviceGuard guard(ordinal_);
  std::lock_guard<std::mutex> lock(mu_);
  // The owner synchronized its streams; whatever is still pending has passed its events.
  for (Block* b : pending_) {
    for (cudaEvent_t e : b->pending) cudaEventDestroy(e);
    cudaFree(b->ptr);
    delete b;
  }
  for (auto& [size, b] : free_) {
    cudaFree(b->ptr);
    delete b;
  }
  // Live blocks here mean a Buffer outlived its device: free the memory, the owner is gone.
  for (auto& [ptr, b] : live_) {
    cudaFree(b->ptr);
    delete b;
  }
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
}

cudaEvent_t CudaPool::new_event_locked() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void CudaPool::collect_pending_locked() {
  auto still_pending = [&](Block* b) {
    while (!b->pending.empty()) {
      cudaError_t q = cudaEventQuery(b->pending.back());
      if (q == cudaErrorNotReady) return true;
      CUDA_CHECK(q);
      spare_events_.push_back(b->pending.back());
      b->pending.pop_back();
    }
    free_.emplace(b->size, b);
    return false;
  };
  pending_.erase(
      std::remove_if(pending_.begin(), pending_.end(), [&](Block* b) { return !still_pending(b); }),
      pending_.end());
}

CudaPool::Block* CudaPool::take_free_locked(int64_t size) {
  auto it = free_.lower_bound(size);
  // Best fit, and never a block much larger than asked: a 2 MiB request must not pin a 1 GiB block.
  if (it == free_.end() || it->first > size + size / 4) return nullptr;
  Block* b = it->second;
  free_.erase(it);
  cached_ -= b->size;
  return b;
}

void CudaPool::release_cached_locked() {
  for (auto& [size, b] : free_) {
    CUDA_CHECK(cudaFree(b->ptr));
    reserved_ -= b->size;
    cached_ -= b->size;
    delete b;
  }
  free_.clear();
}

void* CudaPool::allocate(int64_t bytes) {
  const int64_t size = round_size(bytes);
  CudaDeviceGuard guard(ordinal_);
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty()) collect_pending_locked();
  Block* b = take_free_locked(size);
  if (!b) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, static_cast<size_t>(size));
    if (e == cudaErrorMemoryAllocation) {
      // Out of room: give the cache back to the driver (after pending work drains) and retry.
      cudaGetLastError();
      CUDA_CHECK(cudaDeviceSynchronize());
      collect_pending_locked();
      release_cached_locked();
      e = cudaMalloc(&p, static_cast<size_t>(size));
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      SL_THROW(OutOfMemory, "GPU ", ordinal_, " out of memory allocating ", format_bytes(bytes),
               ": the pool holds ", format_bytes(reserved_), ", the GPU has ",
               format_bytes(static_cast<int64_t>(free_b)), " free of ",
               format_bytes(static_cast<int64_t>(total_b)));
    }
    CUDA_CHECK(e);
    b = new Block;
    b->ptr = static_cast<char*>(p);
    b->size = size;
    reserved_ += size;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  live_.emplace(b->ptr, b);
  return b->ptr;
}

void CudaPool::free(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(static_cast<const char*>(p));
  if (it == live_.end()) {
    std::fprintf(stderr, "shardlab: %sCudaPool::free of %p, which the pool did not hand out\n",
                 rank_prefix().c_str(), p);
    std::abort();
  }
  Block* b = it->second;
  live_.erase(it);
  cached_ += b->size;
  if (b->streams.empty()) {
    free_.emplace(b->size, b);
    return;
  }
  CudaDeviceGuard guard(ordinal_);
  for (cudaStream_t s : b->streams) {
    cudaEvent_t e = new_event_locked();
    CUDA_CHECK(cudaEventRecord(e, s));
    b->pending.push_back(e);
  }
  b->streams.clear();
  pending_.push_back(b);
}

void CudaPool::record_stream(const void* p, cudaStream_t stream) {
  if (stream == home_ || p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const char* c = static_cast<const char*>(p);
  auto it = live_.upper_bound(c);
  if (it == live_.begin()) return;
  --it;
  Block* b = it->second;
  if (c >= b->ptr + b->size) return;
  if (std::find(b->streams.begin(), b->streams.end(), stream) == b->streams.end())
    b->streams.push_back(stream);
}

void CudaPool::empty_cache() {
  CudaDeviceGuard guard(ordinal_);
  std::lock_guard<std::mutex> lock(mu_);
  for (Block* b : pending_)
    for (cudaEvent_t e : b->pending) CUDA_CHECK(cudaEventSynchronize(e));
  collect_pending_locked();
  release_cached_locked();
}

int64_t CudaPool::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}
int64_t CudaPool::peak_reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_reserved_;
}
int64_t CudaPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}
int64_t CudaPool::live_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(live_.size());
}

}  // namespace shardlab
