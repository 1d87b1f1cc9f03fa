// A model the engine has never heard of, defined here only: token and position embeddings, then
// L layers of two residual MLP stages each (x + W2 gelu(W1 x + b1) + b2, hidden widths 2C and
// 3C), then a linear head and cross-entropy, untied or tied to the token embedding. No LayerNorm,
// no attention: nothing of GPT-2's. Built from core/model's Stage and Pass and the core kernels,
// so it runs on every device, the meta device included. It proves the engine schedules any list
// of stages (tests/stage_model_test.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/error.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/elementwise.hpp"
#include "core/kernels/encoder.hpp"
#include "core/kernels/gelu.hpp"
#include "core/kernels/linear.hpp"
#include "core/model/model.hpp"

namespace shardlab::stack_test {

struct StackShape {
  int vocab = 48, max_t = 16, layers = 3, width = 24;
  bool tied = false;  // the head reads the token embedding instead of a weight of its own
};

// One micro-batch: the stream (the input of every stage after the embedding, then the head's),
// each MLP stage's saved pre-activation and GELU output, the head's probabilities.
class StackPass : public Pass {
 public:
  StackPass(Device& d, const StackShape& s, const MicroBatch& b) : Pass(d, b), shape(s) {
    SL_CHECK(b.B >= 1 && b.T >= 1 && b.T <= s.max_t, "stack: bad (B, T)");
    n = static_cast<int64_t>(b.B) * b.T;
    stream = d.alloc((2 * s.layers + 1) * n * s.width * 4, MemCategory::activations);
    saved.resize(static_cast<size_t>(2 * s.layers));
  }
  void begin_backward() override { dx = dev.alloc(n * shape.width * 4, MemCategory::workspace); }
  void end_backward() override { dx.reset(); }
  float* x(int i) { return stream.f32() + i * n * shape.width; }

  StackShape shape;
  int64_t n = 0;  // B T
  Buffer stream, dx;
  std::vector<Buffer> saved;  // per MLP stage: (n, H) pre-activation then (n, H) GELU output
  Buffer probs, losses;       // the head's
};

inline StageParam weight(std::string name, std::vector<int64_t> shape) {
  return {std::move(name), std::move(shape), {InitKind::normal, 0.05f}, "", HfLayout::same};
}
inline StageParam bias(std::string name, int64_t n) {
  return {std::move(name), {n}, {InitKind::zeros, 0.0f}, "", HfLayout::same};
}

class Embed : public Stage {
 public:
  explicit Embed(const StackShape& s)
      : Stage("embed", "embed",
              {weight("tok.weight", {s.vocab, s.width}), weight("pos.weight", {s.max_t, s.width})}),
        s_(s) {}
  int64_t saved_bytes(int, int) const override { return 0; }
  void forward(Pass& pass, const StageArgs& a) const override {
    auto& p = static_cast<StackPass&>(pass);
    encoder_forward(p.dev, p.x(0), p.batch.tokens, a.own.w, a.own.w + s_.vocab * s_.width,
                    p.batch.B, p.batch.T, s_.width, s_.vocab);
  }
  void backward(Pass& pass, const StageArgs& a) const override {
    auto& p = static_cast<StackPass&>(pass);
    // encoder_backward adds; a tied token embedding was written by the head's backward already.
    if (a.own.write == GradWrite::overwrite) {
      const int64_t tok = static_cast<int64_t>(s_.vocab) * s_.width;
      if (!s_.tied) p.dev.fill_zero(a.own.g, tok * 4);
      p.dev.fill_zero(a.own.g + tok, static_cast<int64_t>(s_.max_t) * s_.width * 4);
    }
    encoder_backward(p.dev, a.own.g, a.own.g + s_.vocab * s_.width, p.dx.f32(), p.batch.tokens,
                     p.batch.B, p.batch.T, s_.width, s_.vocab);
  }
  void release(Pass&) const override {}

 private:
  StackShape s_;
};

// Stream entry i -> i + 1: y = x + W2 gelu(W1 x + b1) + b2, W1 (C, H), W2 (H, C).
class Mlp : public Stage {
 public:
  Mlp(const StackShape& s, int layer, int part, int hidden)
      : Stage("layer " + std::to_string(layer) + " ffn" + std::to_string(part),
              "ffn" + std::to_string(part), params(layer, part, s.width, hidden)),
        s_(s),
        i_(2 * layer + part),
        h_(hidden) {}
  int64_t saved_bytes(int B, int T) const override { return 2 * int64_t{B} * T * h_ * 4; }

  void forward(Pass& pass, const StageArgs& a) const override { run(pass, a, false); }
  void recompute(Pass& pass, const StageArgs& a) const override { run(pass, a, true); }
  void backward(Pass& pass, const StageArgs& a) const override {
    auto& p = static_cast<StackPass&>(pass);
    const int N = static_cast<int>(p.n), C = s_.width;
    const float *w1 = a.own.w, *w2 = w1 + C * h_ + h_;
    float *dw1 = a.own.g, *dw2 = dw1 + C * h_ + h_;
    const bool acc = a.own.write == GradWrite::accumulate;
    const float* h = p.saved[i_].f32();
    const float* g = h + p.n * h_;
    Buffer wide = p.dev.alloc(p.n * h_ * 4, MemCategory::workspace);
    Buffer narrow = p.dev.alloc(p.n * C * 4, MemCategory::workspace);
    linear_backward(p.dev, wide.f32(), dw2, dw2 + h_ * C, p.dx.f32(), g, w2, N, h_, C, acc);
    gelu_backward(p.dev, wide.f32(), h, wide.f32(), p.n * h_);
    linear_backward(p.dev, narrow.f32(), dw1, dw1 + C * h_, wide.f32(), p.x(i_), w1, N, C, h_, acc);
    axpy(p.dev, p.dx.f32(), 1.0f, narrow.f32(), p.n * C);  // the residual's gradient plus the MLP's
  }
  void release(Pass& pass) const override { static_cast<StackPass&>(pass).saved[i_].reset(); }

 private:
  static std::vector<StageParam> params(int layer, int part, int C, int H) {
    const std::string n = "layers." + std::to_string(layer) + ".ffn" + std::to_string(part) + ".";
    return {weight(n + "w1", {C, H}), bias(n + "b1", H), weight(n + "w2", {H, C}),
            bias(n + "b2", C)};
  }
  void run(Pass& pass, const StageArgs& a, bool again) const {
    auto& p = static_cast<StackPass&>(pass);
    const int N = static_cast<int>(p.n), C = s_.width;
    Buffer& saved = p.saved[i_];
    if (saved.empty()) saved = p.dev.alloc(2 * p.n * h_ * 4, MemCategory::activations);
    float* h = saved.f32();
    float* g = h + p.n * h_;
    const float *w1 = a.own.w, *w2 = w1 + C * h_ + h_;
    linear_forward(p.dev, h, p.x(i_), w1, w1 + C * h_, N, C, h_);
    gelu_forward(p.dev, g, h, p.n * h_);
    if (again) return;  // the next stage's input is in the stream already
    p.dev.copy(p.x(i_ + 1), p.x(i_), p.n * C * 4);
    linear_forward(p.dev, p.x(i_ + 1), g, w2, w2 + h_ * C, N, h_, C, true);
  }

  StackShape s_;
  int i_, h_;  // stream index of the input; hidden width
};

// logits = x Wout^T (Wout (V, C): its own, or the token embedding), softmax, cross-entropy.
class Head : public Stage {
 public:
  explicit Head(const StackShape& s)
      : Stage("head", "head",
              s.tied ? std::vector<StageParam>{}
                     : std::vector<StageParam>{weight("out.weight", {s.vocab, s.width})},
              s.tied ? std::vector<std::string>{"tok.weight"} : std::vector<std::string>{}),
        s_(s) {}
  int64_t saved_bytes(int B, int T) const override { return int64_t{B} * T * (s_.vocab + 1) * 4; }
  void forward(Pass& pass, const StageArgs& a) const override {
    auto& p = static_cast<StackPass&>(pass);
    const int N = static_cast<int>(p.n), C = s_.width, V = s_.vocab;
    if (p.probs.empty()) {
      p.probs = p.dev.alloc(p.n * V * 4, MemCategory::activations);
      p.losses = p.dev.alloc(p.n * 4, MemCategory::activations);
    }
    p.dev.gemm(false, true, N, V, C, 1.0f, p.x(2 * s_.layers), C, wout(a).w, C, 0.0f, p.probs.f32(),
               V);
    crossentropy_forward(p.dev, p.probs.f32(), p.losses.f32(), p.batch.targets, N, V);
    p.loss = p.batch.targets ? mean_loss(p.dev, p.losses.f32(), N) : 0.0f;
  }
  void backward(Pass& pass, const StageArgs& a) const override {
    auto& p = static_cast<StackPass&>(pass);
    const int N = static_cast<int>(p.n), C = s_.width, V = s_.vocab;
    Buffer dlogits = p.dev.alloc(p.n * V * 4, MemCategory::workspace);
    crossentropy_backward(p.dev, dlogits.f32(), p.probs.f32(), p.batch.targets,
                          p.batch.loss_scale / static_cast<float>(N), N, V);
    const ParamView& w = wout(a);
    const float beta = w.write == GradWrite::accumulate ? 1.0f : 0.0f;
    p.dev.gemm(true, false, V, C, N, 1.0f, dlogits.f32(), V, p.x(2 * s_.layers), C, beta, w.g, C);
    p.dev.gemm(false, false, N, C, V, 1.0f, dlogits.f32(), V, w.w, C, 0.0f, p.dx.f32(), C);
  }
  void release(Pass& pass) const override {
    auto& p = static_cast<StackPass&>(pass);
    p.probs.reset();
    p.losses.reset();
  }

 private:
  const ParamView& wout(const StageArgs& a) const { return s_.tied ? a.tied[0] : a.own; }
  StackShape s_;
};

inline Model stack_model(const StackShape& s) {
  ModelDef d;
  d.family = s.tied ? "mlp-stack-tied" : "mlp-stack";
  d.stages.push_back(std::make_shared<Embed>(s));
  for (int l = 0; l < s.layers; ++l) {
    d.layers.push_back({"layer " + std::to_string(l), {1 + 2 * l, 2 + 2 * l}});
    d.stages.push_back(std::make_shared<Mlp>(s, l, 0, 2 * s.width));
    d.stages.push_back(std::make_shared<Mlp>(s, l, 1, 3 * s.width));
  }
  d.stages.push_back(std::make_shared<Head>(s));
  d.layer_item = "layer";
  d.max_seq_len = s.max_t;
  d.vocab_size = s.vocab;
  d.config = {{"family", d.family}, {"vocab", s.vocab}, {"layers", s.layers}, {"width", s.width}};
  d.describe = d.family;
  d.begin = [s](Device& dev, const MicroBatch& b) {
    return std::make_unique<StackPass>(dev, s, b);
  };
  return Model(std::move(d));
}

}  // namespace shardlab::stack_test
