// CudaPool: a caching, stream-ordered allocator for one GPU, in the style of PyTorch's caching
// allocator. cudaMalloc and cudaFree synchronize the whole device, so freed blocks are kept and
// handed out again instead.
//
// Stream order is what makes reuse safe. Every block belongs to the home (compute) stream: a block
// freed while compute kernels that use it are still queued can be reused at once by later compute
// work, which the stream runs after them. A block that another stream used as well (NCCL on the
// communication stream; declared with record_stream) is held back at free time: an event is
// recorded on each such stream and the block becomes reusable only once those events have passed.
//
// The tracker sees the bytes callers asked for; reserved_bytes() is what the pool holds from the
// driver (rounded sizes plus cached blocks), reported separately.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace shardlab {

class CudaPool {
 public:
  // Sizes up to kSmallLimit round to 512 bytes; larger ones to 2 MiB, as PyTorch does.
  static constexpr int64_t kSmallRound = 512;
  static constexpr int64_t kSmallLimit = int64_t{1} << 20;
  static constexpr int64_t kLargeRound = int64_t{2} << 20;

  CudaPool(int ordinal, cudaStream_t home);
  ~CudaPool();
  CudaPool(const CudaPool&) = delete;
  CudaPool& operator=(const CudaPool&) = delete;

  // A block of at least `bytes`; throws OutOfMemory when the GPU has no room even after the
  // cache was returned to the driver.
  void* allocate(int64_t bytes);
  // Returns the block holding `p` (its base pointer) to the pool.
  void free(void* p);
  // Declares that `p` (any address inside a live block) is used by work queued on `stream`: the
  // block will not be reused before that work is done. No-op for the home stream and for memory
  // the pool did not hand out.
  void record_stream(const void* p, cudaStream_t stream);
  // Frees every cached block that no stream still uses (waits for pending ones first).
  void empty_cache();

  int64_t reserved_bytes() const;  // held from cudaMalloc, live and cached
  int64_t peak_reserved_bytes() const;
  int64_t cached_bytes() const;  // free blocks kept for reuse (including pending ones)
  int64_t live_blocks() const;

  static int64_t round_size(int64_t bytes);

 private:
  struct Block {
    char* ptr = nullptr;
    int64_t size = 0;                   // rounded, what cudaMalloc was asked for
    std::vector<cudaStream_t> streams;  // other streams that used it while live
    std::vector<cudaEvent_t> pending;   // recorded at free on those streams
  };

  void collect_pending_locked();  // moves blocks whose events passed to the free list
  void release_cached_locked();   // cudaFree of all free blocks
  Block* take_free_locked(int64_t size);
  cudaEvent_t new_event_locked();

  mutable std::mutex mu_;
  int ordinal_;
  cudaStream_t home_;
  std::map<const char*, Block*> live_;   // by base address, for record_stream lookups
  std::multimap<int64_t, Block*> free_;  // by size, best fit
  std::vector<Block*> pending_;          // freed, waiting for other streams' events
  std::vector<cudaEvent_t> spare_events_;
  int64_t reserved_ = 0;
  int64_t peak_reserved_ = 0;
  int64_t cached_ = 0;
};

}  // namespace shardlab
