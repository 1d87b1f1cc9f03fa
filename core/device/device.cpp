// Device and Buffer: the tracked allocation path shared by every device.
#include "core/device/device.hpp"

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

}  // namespace shardlab
