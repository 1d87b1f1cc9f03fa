// core/kernels/kernel_table: every device's table is complete (an entry a device forgot would
// crash at its first call, on that device only), and kernel_table() picks the table of the
// device's kind, or refuses a kind that has none.
#include <gtest/gtest.h>

#include <string>

#include "core/base/error.hpp"
#include "core/kernels/attention.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/elementwise.hpp"
#include "core/kernels/encoder.hpp"
#include "core/kernels/flash_attention.hpp"
#include "core/kernels/gelu.hpp"
#include "core/kernels/kernel_table.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/kernels/optim.hpp"
#include "core/kernels/residual.hpp"
#include "core/kernels/rmsnorm.hpp"
#include "core/kernels/rope.hpp"
#include "core/kernels/swiglu.hpp"

using namespace shardlab;

namespace {

// The names of t's null entries, "" when every one is set.
std::string missing_entries(const KernelTable& t) {
  std::string missing;
  auto need = [&](bool set, const char* name) {
    if (!set) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
#define SL_NEED(family, fn) need(t.family&& t.family->fn, #family "." #fn)
  need(t.device != nullptr, "device");
  SL_NEED(attention, softmax_forward);
  SL_NEED(attention, softmax_backward);
  SL_NEED(crossentropy, forward);
  SL_NEED(crossentropy, backward);
  SL_NEED(elementwise, fill);
  SL_NEED(elementwise, scale);
  SL_NEED(elementwise, axpy);
  SL_NEED(elementwise, cast_from_f32);
  SL_NEED(elementwise, cast_to_f32);
  SL_NEED(elementwise, sum_squares);
  SL_NEED(elementwise, all_finite);
  SL_NEED(encoder, forward);
  SL_NEED(encoder, backward);
  SL_NEED(flash_attention, forward);
  SL_NEED(flash_attention, backward);
  SL_NEED(gelu, forward);
  SL_NEED(gelu, backward);
  SL_NEED(layernorm, forward);
  SL_NEED(layernorm, backward);
  SL_NEED(optim, adamw);
  SL_NEED(optim, sgd);
  SL_NEED(residual, forward);
  SL_NEED(residual, bias_broadcast);
  SL_NEED(residual, bias_backward);
  SL_NEED(rmsnorm, forward);
  SL_NEED(rmsnorm, backward);
  SL_NEED(rope, table);
  SL_NEED(rope, forward);
  SL_NEED(rope, backward);
  SL_NEED(swiglu, forward);
  SL_NEED(swiglu, backward);
#undef SL_NEED
  return missing;
}

// A device of a kind no kernel table serves: memory works, kernels must refuse it.
class TablelessDevice final : public Device {
 public:
  using Device::Device;
  DeviceKind kind() const override { return static_cast<DeviceKind>(7); }
  void copy(void*, const void*, int64_t) override {}
  void copy_to_host(void*, const void*, int64_t) override {}
  void copy_from_host(void*, const void*, int64_t) override {}
  void fill_zero(void*, int64_t) override {}
  void synchronize() override {}
  void gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*,
            int) override {}
  void gemm_batched(bool, bool, int, int, int, float, const float*, int, int64_t, const float*, int,
                    int64_t, float, float*, int, int64_t, int) override {}

 protected:
  void* raw_alloc(int64_t) override { return nullptr; }
  void raw_free(void*) override {}
};

}  // namespace

TEST(KernelTable, CpuTableIsComplete) {
  EXPECT_EQ(missing_entries(cpu_kernel_table()), "");
  EXPECT_STREQ(cpu_kernel_table().device, "cpu");
}

TEST(KernelTable, MetaTableIsComplete) {
  EXPECT_EQ(missing_entries(meta_kernel_table()), "");
  EXPECT_STREQ(meta_kernel_table().device, "meta");
}

// Checked without a GPU: the table is data, only its entries need one.
TEST(KernelTable, CudaTableIsCompleteInCudaBuilds) {
#if SHARDLAB_WITH_CUDA
  EXPECT_EQ(missing_entries(cuda_kernel_table()), "");
  EXPECT_STREQ(cuda_kernel_table().device, "cuda");
#else
  EXPECT_THROW(cuda_kernel_table(), Error);
#endif
}

TEST(KernelTable, DispatchFollowsTheDeviceKind) {
  MemoryTracker tracker(0);
  auto cpu = make_cpu_device(tracker);
  EXPECT_EQ(&kernel_table(*cpu), &cpu_kernel_table());
  TablelessDevice other(tracker);
  EXPECT_THROW(kernel_table(other), Error);
  float x[2] = {1.0f, 2.0f};
  EXPECT_THROW(gelu_forward(other, x, x, 2), Error);
  EXPECT_EQ(x[1], 2.0f);
}
