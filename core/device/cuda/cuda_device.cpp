// CudaDevice: streams, copies, the pool and device discovery. cuBLAS calls are in cuda_blas.cpp.
#include "core/device/cuda/cuda_device.hpp"

#include <algorithm>

namespace shardlab {

namespace {

// cuBLAS wants its own scratch per handle; NVIDIA recommends 32 MiB on Hopper, 4 MiB before.
int64_t cublas_workspace_bytes(int cc) {
  return cc >= 90 ? (int64_t{32} << 20) : (int64_t{4} << 20);
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // error 35 (no driver) or 100 (no GPU): clear it, report none
    return 0;
  }
  return std::max(n, 0);
}

std::string cuda_unavailable_reason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (" +
           cudaGetErrorName(e) + ", " + std::to_string(static_cast<int>(e)) + ")";
  }
  if (n <= 0) return "cudaGetDeviceCount found 0 GPUs";
  return "";
}

std::unique_ptr<Device> make_cuda_device(MemoryTracker& tracker, int ordinal) {
  return std::make_unique<CudaDevice>(tracker, ordinal);
}

CudaDevice& as_cuda(Device& dev) {
  SL_CHECK(dev.kind() == DeviceKind::cuda, "expected a CUDA device, got ",
           device_kind_name(dev.kind()));
  return static_cast<CudaDevice&>(dev);
}

CudaDevice::CudaDevice(MemoryTracker& tracker, int ordinal) : Device(tracker), ordinal_(ordinal) {
  const int count = cuda_device_count();
  if (count == 0)
    SL_THROW(Error, "no CUDA device: ", cuda_unavailable_reason(),
             "; run with --device cpu, or on a machine with an NVIDIA GPU and driver");
  if (ordinal < 0 || ordinal >= count)
    SL_THROW(InvalidArgument, "CUDA device ", ordinal, " requested but ", count,
             " GPU(s) are visible (CUDA_VISIBLE_DEVICES limits them)");
  CudaDeviceGuard guard(ordinal_);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
  name_ = prop.name;
  const int cc = prop.major * 10 + prop.minor;  // 80 for A100, 90 for H100

  // Non-blocking streams: no implicit joins with the legacy default stream. Collectives get the
  // higher priority so their kernels start as soon as an SM is free (overlap with compute).
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&compute_, cudaStreamNonBlocking, least));
  CUDA_CHECK(cudaStreamCreateWithPriority(&comm_, cudaStreamNonBlocking, greatest));
  CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  // The copy stream gets the compute stream's (lowest) priority: copies are bandwidth, not latency.
  CUDA_CHECK(cudaStreamCreateWithPriority(&copy_, cudaStreamNonBlocking, least));
  CUDA_CHECK(cudaEventCreateWithFlags(&copy_ready_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&copy_done_, cudaEventDisableTiming));
  pool_ = std::make_unique<CudaPool>(ordinal_, compute_);

  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, compute_));
  CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  try {
    // Can throw OutOfMemory under a small --mem-limit: no destructor runs then, so clean up here.
    cublas_workspace_ = alloc(cublas_workspace_bytes(cc), MemCategory::workspace);
  } catch (...) {
    release_resources();
    throw;
  }
  CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_.data(),
                                  static_cast<size_t>(cublas_workspace_.bytes())));
}

CudaDevice::~CudaDevice() {
  CudaDeviceGuard guard(ordinal_);
  cudaStreamSynchronize(copy_);
  cudaStreamSynchronize(comm_);
  cudaStreamSynchronize(compute_);
  release_resources();
}

void CudaDevice::release_resources() {
  if (cublas_) cublasDestroy(cublas_);
  cublas_ = nullptr;
  cublas_workspace_.reset();
  pool_.reset();
  if (join_) cudaEventDestroy(join_);
  if (copy_ready_) cudaEventDestroy(copy_ready_);
  if (copy_done_) cudaEventDestroy(copy_done_);
  if (copy_) cudaStreamDestroy(copy_);
  if (comm_) cudaStreamDestroy(comm_);
  if (compute_) cudaStreamDestroy(compute_);
  join_ = copy_ready_ = copy_done_ = nullptr;
  copy_ = comm_ = compute_ = nullptr;
}

void CudaDevice::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0 || dst == src) return;
  CudaDeviceGuard guard(ordinal_);
  CUDA_CHECK(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, compute_));
}

void CudaDevice::copy_to_host(void* host_dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  CUDA_CHECK(
      cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, compute_));
  CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaDevice::copy_from_host(void* dst, const void* host_src, int64_t bytes) {
  if (bytes <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  // From pageable memory the call returns once the source was staged, so the caller may reuse
  // host_src at once; the copy itself stays ordered on the compute stream.
  CUDA_CHECK(
      cudaMemcpyAsync(dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, compute_));
}

void CudaDevice::fill_zero(void* dst, int64_t bytes) {
  if (bytes <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), compute_));
}

void CudaDevice::copy_to_host_tier(void* host_dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  CUDA_CHECK(cudaEventRecord(copy_ready_, compute_));  // `src` is written by earlier compute
  CUDA_CHECK(cudaStreamWaitEvent(copy_, copy_ready_, 0));
  CUDA_CHECK(
      cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, copy_));
  CUDA_CHECK(cudaStreamSynchronize(copy_));  // the host reads `host_dst` next
}

void CudaDevice::copy_from_host_tier(void* dst, const void* host_src, int64_t bytes,
                                     ReadBy read_by) {
  if (bytes <= 0) return;
  CudaDeviceGuard guard(ordinal_);
  // `dst` may be pool memory that compute work queued earlier still reads (stream-ordered reuse).
  CUDA_CHECK(cudaEventRecord(copy_ready_, compute_));
  CUDA_CHECK(cudaStreamWaitEvent(copy_, copy_ready_, 0));
  CUDA_CHECK(
      cudaMemcpyAsync(dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, copy_));
  CUDA_CHECK(cudaEventRecord(copy_done_, copy_));
  // Only the reader waits: a shard copied up for its all-gather holds back the comm stream, not
  // the compute that runs meanwhile. The pool reuses `dst` in compute-stream order after the
  // reader is done (a collective's Work::wait joins compute to comm), so no record_stream.
  CUDA_CHECK(cudaStreamWaitEvent(read_by == ReadBy::collective ? comm_ : compute_, copy_done_, 0));
}

void CudaDevice::wait_copies() const {
  CudaDeviceGuard guard(ordinal_);
  CUDA_CHECK(cudaStreamSynchronize(copy_));
}

std::optional<PoolReport> CudaDevice::pool_report() const {
  CudaDeviceGuard guard(ordinal_);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return PoolReport{reserved_bytes(), peak_reserved_bytes(), static_cast<int64_t>(free_b),
                    static_cast<int64_t>(total_b)};
}

void CudaDevice::synchronize() {
  CudaDeviceGuard guard(ordinal_);
  CUDA_CHECK(cudaStreamSynchronize(copy_));
  CUDA_CHECK(cudaStreamSynchronize(comm_));
  CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaDevice::comm_waits_for_compute() {
  CudaDeviceGuard guard(ordinal_);
  CUDA_CHECK(cudaEventRecord(join_, compute_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_, join_, 0));
}

void CudaDevice::compute_waits_for(cudaEvent_t e) {
  CudaDeviceGuard guard(ordinal_);
  CUDA_CHECK(cudaStreamWaitEvent(compute_, e, 0));
}

void CudaDevice::empty_cache() {
  synchronize();
  pool_->empty_cache();
}

}  // namespace shardlab
