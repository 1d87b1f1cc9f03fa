// Device: where a rank's tensors live and its math runs. Every allocation goes through the rank's
// MemoryTracker under a category; buffers are move-only and free themselves.
// CpuDevice (OpenBLAS) is the reference; CudaDevice (cuBLAS) implements the same interface;
// MetaDevice (meta_device.hpp) holds no memory and charges a simulated rank's virtual clock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/base/dtype.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {

enum class DeviceKind : uint8_t { cpu, cuda, meta };
const char* device_kind_name(DeviceKind k);

class Device;

// What first reads the bytes of a copy up from the host tier: device compute, or a collective (on
// a GPU these run on different streams, and only the reader's stream needs to wait).
enum class ReadBy : uint8_t { compute, collective };

// An owned, tracked allocation. Move-only: a copy is an explicit Device::copy.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device* dev, void* ptr, int64_t bytes, MemCategory c)
      : dev_(dev), ptr_(ptr), bytes_(bytes), cat_(c) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer() { reset(); }

  void reset();  // frees now; the buffer becomes empty
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  float* f32() const { return static_cast<float*>(ptr_); }
  int64_t bytes() const { return bytes_; }
  MemCategory category() const { return cat_; }
  bool empty() const { return ptr_ == nullptr; }
  Device* device() const { return dev_; }

 private:
  Device* dev_ = nullptr;
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
  MemCategory cat_ = MemCategory::workspace;
};

// What a device's allocator holds beside what the tracker counts (a GPU's caching pool and the
// driver's view); the CPU and meta devices have none.
struct PoolReport {
  int64_t reserved = 0;       // held from the driver now, live and cached
  int64_t peak_reserved = 0;  // the most it held
  int64_t driver_free = 0;    // the driver's free and total bytes of the whole GPU (every process)
  int64_t driver_total = 0;
};

class Device {
 public:
  explicit Device(MemoryTracker& tracker) : tracker_(tracker) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  // False for the MetaDevice: buffers have addresses but no bytes behind them, so nothing may
  // fill them from the host (initial values) or depend on what they hold.
  virtual bool holds_data() const { return true; }
  // The host memory tier beside this device (--offload): a device over `host_tracker` whose
  // buffers live in host memory and whose kernels run on the host. The CPU device's tier is a
  // second CPU device; a GPU's is pinned host memory; the meta device's holds no bytes.
  virtual std::unique_ptr<Device> make_host_tier(MemoryTracker& host_tracker) const;
  MemoryTracker& tracker() const { return tracker_; }
  // The allocator's and the driver's side of memory (docs/gpu.md); nullopt where there is none.
  virtual std::optional<PoolReport> pool_report() const { return std::nullopt; }

  // Uninitialised memory charged to `c`; throws OutOfMemory past the tracker's capacity.
  Buffer alloc(int64_t bytes, MemCategory c);
  Buffer alloc_zeros(int64_t bytes, MemCategory c);

  // Byte copies. `copy` is device to device; the host variants cross to and from host memory.
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, int64_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, int64_t bytes) = 0;
  // Copies between this device and its host tier (buffers from make_host_tier), used by
  // --offload. The CPU device copies at once. A GPU issues them on its copy stream: the copy down
  // returns once the bytes are on the host (the host reads them next); the copy up returns at
  // once, and only the device work queued after it waits for it (an event, not a host wait).
  virtual void copy_to_host_tier(void* host_dst, const void* src, int64_t bytes) {
    copy_to_host(host_dst, src, bytes);
  }
  // `read_by`: what reads `dst` first; on a GPU only that stream waits for the copy.
  virtual void copy_from_host_tier(void* dst, const void* host_src, int64_t bytes,
                                   ReadBy read_by = ReadBy::compute) {
    (void)read_by;
    copy_from_host(dst, host_src, bytes);
  }
  virtual void fill_zero(void* dst, int64_t bytes) = 0;
  // Waits until all work issued on this device has finished.
  virtual void synchronize() = 0;

  // Row-major GEMM: C(M,N) = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T.
  // lda/ldb/ldc are row strides of A, B, C as stored.
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                    int lda, const float* B, int ldb, float beta, float* C, int ldc) = 0;
  // The same GEMM on `batch` matrices, each `stride_*` elements after the previous one.
  virtual void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                            const float* A, int lda, int64_t stride_a, const float* B, int ldb,
                            int64_t stride_b, float beta, float* C, int ldc, int64_t stride_c,
                            int batch) = 0;

  // Mixed-precision GEMM, as cublasGemmEx with CUBLAS_COMPUTE_32F: A and B in `ab` (f32, bf16 or
  // f16), products and sums in fp32, C in `c`: f32, or `ab` (the fp32 result rounded to nearest
  // even once, with beta's C read as `ab`). Conventions as gemm; ab = c = f32 is gemm itself.
  // The base class runs only that case and refuses the others; each device overrides it.
  virtual void gemm_ex(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
                       int lda, const void* B, int ldb, DType ab, float beta, void* C, int ldc,
                       DType c);
  // The same on `batch` matrices, strides in elements.
  virtual void gemm_ex_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                               const void* A, int lda, int64_t stride_a, const void* B, int ldb,
                               int64_t stride_b, DType ab, float beta, void* C, int ldc,
                               int64_t stride_c, DType c, int batch);
  // What runs a GEMM with inputs in `ab` on this device, in words ("OpenBLAS sgemm",
  // "bf16 widened to fp32, OpenBLAS sgemm: this CPU has no AVX512_BF16", "cuBLAS GemmEx ...").
  virtual std::string gemm_path(DType ab) const;

 protected:
  virtual void* raw_alloc(int64_t bytes) = 0;
  virtual void raw_free(void* p) = 0;
  friend class Buffer;

 private:
  MemoryTracker& tracker_;
};

// Throws InvalidArgument unless C's dtype `c` is f32 or the inputs' `ab` (every gemm_ex).
void check_gemm_ex_dtypes(DType ab, DType c);

// The CPU reference device. `blas_threads` OpenBLAS threads (1 per rank when ranks are threads).
std::unique_ptr<Device> make_cpu_device(MemoryTracker& tracker);
// Sets OpenBLAS's thread count for the whole process (ranks as threads want 1).
void set_blas_threads(int n);

// The CUDA device for GPU `ordinal`; throws Error "built without CUDA" or "no CUDA device".
std::unique_ptr<Device> make_cuda_device(MemoryTracker& tracker, int ordinal);
// Number of usable CUDA devices; 0 when built without CUDA or when no driver or GPU is present.
int cuda_device_count();

}  // namespace shardlab
