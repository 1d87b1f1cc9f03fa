// One GPU against the CPU on the same model: the GPT reference (core/model/gpt.hpp) with the same
// seed and batch runs forward, backward and two SGD-with-momentum steps on both devices; losses,
// gradients and parameters must agree within float tolerance. (SGD keeps the comparison linear in
// the gradients; AdamW's m/sqrt(v) can flip the update of a near-zero gradient on rounding alone.
// The AdamW kernel itself is compared in cuda_kernels_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/kernels/optim.hpp"
#include "core/model/gpt.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace shardlab {
namespace {

std::vector<float> unit_vector(Device& dev, const float* p, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  dev.copy_to_host(v.data(), p, n * 4);
  return v;
}

TEST(CudaTrain, GptStepsMatchTheCpu) {
  SL_REQUIRE_CUDA();
  const GPTConfig cfg = GPTConfig::preset("tiny");
  const int B = 4, T = cfg.max_seq_len;
  std::mt19937 gen(7);
  std::vector<int> tokens(B * T + 1);
  for (int& t : tokens) t = static_cast<int>(gen() % static_cast<uint32_t>(cfg.vocab_size));
  std::vector<int> inputs(tokens.begin(), tokens.end() - 1),
      targets(tokens.begin() + 1, tokens.end());

  MemoryTracker t_cpu(0), t_gpu(0);
  auto cpu = make_cpu_device(t_cpu);
  auto gpu = make_cuda_device(t_gpu, 0);
  GPT ref(*cpu, cfg, 1234);
  GPT model(*gpu, cfg, 1234);
  Buffer d_in = testing::to_device_as(*gpu, inputs), d_tg = testing::to_device_as(*gpu, targets);

  std::vector<std::vector<float>> mom_cpu;
  std::vector<Buffer> mom_gpu;
  for (int u = 0; u < ref.num_units(); ++u) {
    const int64_t n = ref.layout(u).numel;
    mom_cpu.emplace_back(n, 0.0f);
    mom_gpu.push_back(gpu->alloc_zeros(n * 4, MemCategory::optimizer_state));
  }

  for (int step = 1; step <= 3; ++step) {
    ref.zero_grad();
    model.zero_grad();
    const float loss_cpu = ref.forward(inputs.data(), targets.data(), B, T);
    const float loss_gpu = model.forward(d_in.as<int>(), d_tg.as<int>(), B, T);
    ASSERT_TRUE(std::isfinite(loss_gpu));
    EXPECT_NEAR(loss_gpu, loss_cpu, 1e-4 * std::fabs(loss_cpu)) << "step " << step;
    if (step == 3) break;
    ref.backward();
    model.backward();
    for (int u = 0; u < ref.num_units(); ++u) {
      const int64_t n = ref.layout(u).numel;
      auto g = unit_vector(*gpu, model.unit_grads(u), n);
      std::vector<float> want(ref.unit_grads(u), ref.unit_grads(u) + n);
      EXPECT_LT(testing::max_rel_error(g, want), 1e-4) << "unit " << u << " step " << step;
      sgd_update(*cpu, ref.unit_params(u), ref.unit_grads(u), mom_cpu[u].data(), n, 0.1f, 0.9f,
                 0.01f);
      sgd_update(*gpu, model.unit_params(u), model.unit_grads(u), mom_gpu[u].f32(), n, 0.1f, 0.9f,
                 0.01f);
    }
  }
  for (int u = 0; u < ref.num_units(); ++u) {
    const int64_t n = ref.layout(u).numel;
    std::vector<float> want(ref.unit_params(u), ref.unit_params(u) + n);
    EXPECT_LT(testing::max_rel_error(unit_vector(*gpu, model.unit_params(u), n), want), 1e-4)
        << "unit " << u;
  }
}

}  // namespace
}  // namespace shardlab
