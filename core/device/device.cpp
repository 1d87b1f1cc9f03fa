// Device and Buffer: the tracked allocation path shared by every device.
#include "core/device/device.hpp"

#include "core/base/error.hpp"

namespace shardlab {

const char* device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::meta: return "meta";
  }
  return "?";
}

std::unique_ptr<Device> Device::make_host_tier(MemoryTracker& host_tracker) const {
  return make_cpu_device(host_tracker);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    dev_ = std::exchange(o.dev_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    cat_ = o.cat_;
  }
  return *this;
}

void Buffer::reset() {
  if (ptr_) {
    dev_->raw_free(ptr_);
    dev_->tracker().release(cat_, bytes_);
  }
  dev_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

Buffer Device::alloc(int64_t bytes, MemCategory c) {
  SL_CHECK(bytes >= 0, "alloc of ", bytes, " bytes");
  tracker_.allocate(c, bytes);  // throws OutOfMemory before anything is taken
  void* p = nullptr;
  try {
    p = raw_alloc(bytes > 0 ? bytes : 1);
  } catch (...) {
    tracker_.release(c, bytes);
    throw;
  }
  return Buffer(this, p, bytes, c);
}

Buffer Device::alloc_zeros(int64_t bytes, MemCategory c) {
  Buffer b = alloc(bytes, c);
  fill_zero(b.data(), bytes);
  return b;
}

void check_gemm_ex_dtypes(DType ab, DType c) {
  SL_CHECK(c == DType::f32 || c == ab, "gemm_ex: C must be f32 or the inputs' dtype (A/B ",
           dtype_name(ab), ", C ", dtype_name(c), ")");
}

void Device::gemm_ex(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda,
                     const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c) {
  check_gemm_ex_dtypes(ab, c);
  SL_CHECK(ab == DType::f32, device_kind_name(kind()), " device: no GEMM with ", dtype_name(ab),
           " inputs");
  gemm(ta, tb, M, N, K, alpha, static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb,
       beta, static_cast<float*>(C), ldc);
}

void Device::gemm_ex_batched(bool ta, bool tb, int M, int N, int K, float alpha, const void* A,
                             int lda, int64_t sa, const void* B, int ldb, int64_t sb, DType ab,
                             float beta, void* C, int ldc, int64_t sc, DType c, int batch) {
  check_gemm_ex_dtypes(ab, c);
  if (ab == DType::f32 && c == DType::f32) {
    gemm_batched(ta, tb, M, N, K, alpha, static_cast<const float*>(A), lda, sa,
                 static_cast<const float*>(B), ldb, sb, beta, static_cast<float*>(C), ldc, sc,
                 batch);
    return;
  }
  const int64_t ea = static_cast<int64_t>(dtype_size(ab)), ec = static_cast<int64_t>(dtype_size(c));
  for (int i = 0; i < batch; ++i)
    gemm_ex(ta, tb, M, N, K, alpha, static_cast<const char*>(A) + i * sa * ea, lda,
            static_cast<const char*>(B) + i * sb * ea, ldb, ab, beta,
            static_cast<char*>(C) + i * sc * ec, ldc, c);
}

std::string Device::gemm_path(DType ab) const {
  return ab == DType::f32 ? std::string(device_kind_name(kind())) + " gemm"
                          : std::string("none (no ") + dtype_name(ab) + " GEMM on this device)";
}

}  // namespace shardlab
