// The meta kernel table: every kernel of every family on the MetaDevice. No arithmetic: each entry
// charges the bytes the kernel reads and writes (as the CPU loop of its family does) to the
// device's virtual clock. Reductions and checks that return a value return what a zero-filled
// buffer would give: sum_squares 0, all_finite true.
#include "core/base/dtype.hpp"
#include "core/device/device_model.hpp"
#include "core/device/meta_device.hpp"
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

namespace shardlab {

namespace meta {
namespace {

// `kernel`: the name calibrate measures the kernel's efficiency under (cluster_spec.hpp,
// CostModel::kernel_efficiency).
void charge(Device& dev, int64_t bytes, const char* kernel) {
  static_cast<MetaDevice&>(dev).charge_kernel(bytes, kernel);
}
int64_t f4(int64_t n) { return 4 * n; }  // n fp32 values

// ---- elementwise
void fill(Device& d, float*, float, int64_t n) { charge(d, f4(n), "fill"); }
void scale(Device& d, float*, float, int64_t n) { charge(d, 2 * f4(n), "scale"); }
void axpy(Device& d, float*, float, const float*, int64_t n) { charge(d, 3 * f4(n), "axpy"); }
void cast_from_f32(Device& d, void*, DType t, const float*, int64_t n) {
  charge(d, f4(n) + static_cast<int64_t>(dtype_size(t)) * n, "cast");
}
void cast_to_f32(Device& d, float*, const void*, DType t, int64_t n) {
  charge(d, f4(n) + static_cast<int64_t>(dtype_size(t)) * n, "cast");
}
double sum_squares(Device& d, const float*, int64_t n) {
  charge(d, f4(n), "sum_squares");
  return 0.0;
}
bool all_finite(Device& d, const void*, DType t, int64_t n) {
  charge(d, static_cast<int64_t>(dtype_size(t)) * n, "all_finite");
  return true;
}

// ---- attention softmax over (BH, T, T)
void softmax_forward(Device& d, float*, int BH, int T) {
  charge(d, 2 * f4(static_cast<int64_t>(BH) * T * T), "softmax_forward");
}
void softmax_backward(Device& d, float*, const float*, const float*, int BH, int T) {
  charge(d, 3 * f4(static_cast<int64_t>(BH) * T * T), "softmax_backward");
}

// ---- cross-entropy over (N, V)
void ce_forward(Device& d, float*, float*, const int*, int N, int V) {
  charge(d, 2 * f4(static_cast<int64_t>(N) * V) + 8 * static_cast<int64_t>(N),
         "crossentropy_forward");
}
void ce_backward(Device& d, float*, const float*, const int*, float, int N, int V) {
  charge(d, 2 * f4(static_cast<int64_t>(N) * V) + 4 * static_cast<int64_t>(N),
         "crossentropy_backward");
}

// ---- encoder: (B, T, C) from two embedding rows per token
// Without a position table (wpe, dwpe null) one row fewer per token.
void enc_forward(Device& d, float*, const int*, const float*, const float* wpe, int B, int T, int C,
                 int) {
  const int64_t btc = static_cast<int64_t>(B) * T * C;
  charge(d, (wpe ? 3 : 2) * f4(btc) + 4 * static_cast<int64_t>(B) * T, "encoder_forward");
}
void enc_backward(Device& d, float*, float* dwpe, const float*, const int*, int B, int T, int C,
                  int) {
  const int64_t btc = static_cast<int64_t>(B) * T * C;
  charge(d, (dwpe ? 5 : 3) * f4(btc) + 4 * static_cast<int64_t>(B) * T,
         "encoder_backward");  // dout, then += on two rows (one without positions)
}

// ---- flash attention: one fused kernel, its FLOPs at the inputs' math and its bytes
// (flash_attention.hpp), whichever takes longer; its efficiency that of a GEMM of its shape
// (T, T, hs), as the tiles' products are.
void flash_charge(Device& d, const FlashShape& s, bool backward) {
  auto& md = static_cast<MetaDevice&>(d);
  const GemmMath math = s.dtype == DType::f32 ? md.math() : GemmMath::bf16;
  md.charge_fused(flash_attention_flops(s, backward), math,
                  gemm_efficiency(md.spec().cost, s.T, s.T, s.hs),
                  flash_attention_bytes(s, backward));
}
void flash_forward(Device& d, const FlashShape& s, RowsOut, float*, RowsIn, RowsIn, RowsIn, void*) {
  flash_charge(d, s, false);
}
void flash_backward(Device& d, const FlashShape& s, RowsOut, RowsOut, RowsOut, RowsIn, RowsIn,
                    RowsIn, RowsIn, RowsIn, const float*, void*) {
  flash_charge(d, s, true);
}

// ---- gelu
void gelu_forward(Device& d, float*, const float*, int64_t n) {
  charge(d, 2 * f4(n), "gelu_forward");
}
void gelu_backward(Device& d, float*, const float*, const float*, int64_t n) {
  charge(d, 3 * f4(n), "gelu_backward");
}

// ---- layernorm over (N, C)
void ln_forward(Device& d, float*, float*, float*, const float*, const float*, const float*, int N,
                int C) {
  const int64_t nc = static_cast<int64_t>(N) * C;
  charge(d, 2 * f4(nc) + 2 * f4(C) + 2 * f4(N), "layernorm_forward");
}
void ln_backward(Device& d, float*, float*, float*, const float*, const float*, const float*,
                 const float*, const float*, int N, int C) {
  const int64_t nc = static_cast<int64_t>(N) * C;
  // dout, x, dx (+=); weight, dweight, dbias
  charge(d, 4 * f4(nc) + 5 * f4(C) + 2 * f4(N), "layernorm_backward");
}

// ---- optimizers over a flat range
void adamw(Device& d, float*, const float*, float*, float*, int64_t n, float, float, float, float,
           float, float, float) {
  charge(d, 7 * f4(n), "adamw");  // p, g, m, v read; p, m, v written
}
// The engine's fused step (optim.hpp, adamw_checked): the finiteness checks and clipping's scale
// ride in registers on AdamW's one pass, so it moves what adamw moves, under its own name (its
// loop is not adamw's: calibrate measures each).
NonFinite adamw_checked(Device& d, float*, const float*, float*, float*, int64_t n, float, float,
                        float, float, float, float, float, float) {
  charge(d, 7 * f4(n), "adamw_checked");
  return {};  // a zero-filled shard is finite
}
void sgd(Device& d, float*, const float*, float* momentum_buf, int64_t n, float, float, float) {
  charge(d, (momentum_buf ? 5 : 3) * f4(n), "sgd");
}

// ---- residual and bias
void residual_forward(Device& d, float*, const float*, const float*, int64_t n) {
  charge(d, 3 * f4(n), "residual_forward");
}
void bias_broadcast(Device& d, float*, const float*, int N, int OC, bool accumulate) {
  charge(d, (accumulate ? 2 : 1) * f4(static_cast<int64_t>(N) * OC) + f4(OC), "bias_broadcast");
}
void bias_backward(Device& d, float*, const float*, int N, int OC) {
  charge(d, f4(static_cast<int64_t>(N) * OC) + 2 * f4(OC), "bias_backward");
}

// ---- rmsnorm over (N, C)
void rms_forward(Device& d, float*, float*, const float*, const float*, int N, int C, float) {
  const int64_t nc = static_cast<int64_t>(N) * C;
  charge(d, 2 * f4(nc) + f4(C) + f4(N), "rmsnorm_forward");  // x, out; weight; rstd
}
void rms_backward(Device& d, float*, float*, const float*, const float*, const float*, const float*,
                  int N, int C) {
  const int64_t nc = static_cast<int64_t>(N) * C;
  // dout, x, dx (+=); weight, dweight (+=); rstd
  charge(d, 4 * f4(nc) + 3 * f4(C) + f4(N), "rmsnorm_backward");
}

// ---- rope: the (T, hs) table, and n_heads heads of hs turned in place per row
void rope_table(Device& d, float*, int T, int hs, const RopeParams&) {
  charge(d, f4(static_cast<int64_t>(T) * hs), "rope_table");
}
void rope_forward(Device& d, float*, const float*, int B, int T, int n_heads, int hs, int64_t) {
  charge(d, 2 * f4(static_cast<int64_t>(B) * T * n_heads * hs) + f4(static_cast<int64_t>(T) * hs),
         "rope_forward");
}
void rope_backward(Device& d, float*, const float*, int B, int T, int n_heads, int hs, int64_t) {
  charge(d, 2 * f4(static_cast<int64_t>(B) * T * n_heads * hs) + f4(static_cast<int64_t>(T) * hs),
         "rope_backward");
}

// ---- swiglu: (N, 2F) gate | up -> (N, F)
void swiglu_forward(Device& d, float*, const float*, int N, int F) {
  charge(d, 3 * f4(static_cast<int64_t>(N) * F), "swiglu_forward");
}
void swiglu_backward(Device& d, float*, const float*, const float*, int N, int F) {
  charge(d, 5 * f4(static_cast<int64_t>(N) * F), "swiglu_backward");  // dout, gate_up; dgate_up
}

}  // namespace
}  // namespace meta

// The spec's causal block: 0 (whole sequences, a GPU's launches) unless it describes a CPU.
const AttentionKernels kMetaAttention = {
    meta::softmax_forward, meta::softmax_backward, [](const Device& d) {
      return static_cast<const MetaDevice&>(d).spec().attention_causal_block;
    }};
const CrossEntropyKernels kMetaCrossEntropy = {meta::ce_forward, meta::ce_backward};
const ElementwiseKernels kMetaElementwise = {
    meta::fill,        meta::scale,       meta::axpy,      meta::cast_from_f32,
    meta::cast_to_f32, meta::sum_squares, meta::all_finite};
const EncoderKernels kMetaEncoder = {meta::enc_forward, meta::enc_backward};
const FlashAttentionKernels kMetaFlashAttention = {meta::flash_forward, meta::flash_backward};
const GeluKernels kMetaGelu = {meta::gelu_forward, meta::gelu_backward};
const LayerNormKernels kMetaLayerNorm = {meta::ln_forward, meta::ln_backward};
const OptimKernels kMetaOptim = {meta::adamw, meta::sgd, meta::adamw_checked};
const ResidualKernels kMetaResidual = {meta::residual_forward, meta::bias_broadcast,
                                       meta::bias_backward};
const RmsNormKernels kMetaRmsNorm = {meta::rms_forward, meta::rms_backward};
const RopeKernels kMetaRope = {meta::rope_table, meta::rope_forward, meta::rope_backward};
const SwiGluKernels kMetaSwiGlu = {meta::swiglu_forward, meta::swiglu_backward};

namespace {
const KernelTable kMetaKernels = {
    "meta",        &kMetaAttention,      &kMetaCrossEntropy, &kMetaElementwise,
    &kMetaEncoder, &kMetaFlashAttention, &kMetaGelu,         &kMetaLayerNorm,
    &kMetaOptim,   &kMetaResidual,       &kMetaRmsNorm,      &kMetaRope,
    &kMetaSwiGlu};
}  // namespace

const KernelTable& meta_kernel_table() { return kMetaKernels; }

}  // namespace shardlab
