// NVTX ranges for Nsight Systems: nvtx_push/nvtx_pop and a scoped NvtxRange. In CUDA builds
// (SHARDLAB_WITH_CUDA) they call the header-only NVTX3 API; otherwise they compile to nothing.
// NVTX ranges are per thread: push and pop on the same thread.
#pragma once

#if defined(SHARDLAB_WITH_CUDA)
#include <nvtx3/nvToolsExt.h>
#endif

namespace shardlab {

#if defined(SHARDLAB_WITH_CUDA)
inline void nvtx_push(const char* name) { nvtxRangePushA(name); }
inline void nvtx_pop() { nvtxRangePop(); }
inline constexpr bool kNvtxEnabled = true;
#else
inline void nvtx_push(const char*) {}
inline void nvtx_pop() {}
inline constexpr bool kNvtxEnabled = false;
#endif

// An NVTX range from construction to destruction: NvtxRange r("all_gather");
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtx_push(name); }
  ~NvtxRange() { nvtx_pop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace shardlab
