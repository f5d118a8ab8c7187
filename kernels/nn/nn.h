// nn.h: the GPT trainer's tensor math on the CPU, fp32, each forward beside its backward (llm.c style).
//
// What this is: stateless functions over raw float pointers. Tensors are dense and row-major; shapes are in
// the comments, with B batch, T sequence length, C channels, OC output channels, NH heads, V vocabulary size
// and N = B * T rows. Parameters and gradients may be views into one flat buffer (what a bucketed all-reduce
// wants); nothing here allocates, and nothing keeps state between calls.
// What this is not: a tensor library. No shape checks, no broadcasting, no autograd: sizes and pointers are
// the caller's contract (dimensions > 0, buffers of the stated sizes, distinct unless an alias is allowed).
//
// Conventions:
// - Backward functions ACCUMULATE into gradient buffers ("+="), as llm.c does, so that gradients of several
//   micro-batches add up; the caller zeroes them once per optimizer step. The exceptions say so
//   (crossEntropyBackward writes).
// - GEMMs go through OpenBLAS (cblas_sgemm), which brings its own threads (OPENBLAS_NUM_THREADS); these
//   functions start none. Other loops are vectorised (AVX-512, AVX2 or baseline SSE2, chosen at load time).
// - Deterministic: the same inputs on the same machine and thread count give the same bits. Reductions run
//   in a fixed order that never depends on the data or on timing.
// - Errors: ids read from data (tokens, targets) are validated, because a bad id would index out of bounds.
//   The functions that read them return an IdCheck value and never throw; on failure they write nothing.
//   Everything else is a precondition. This header includes only standard headers: callers include it
//   directly and link hetcomm_kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hetcomm::kernels::nn {

// Outcome of validating ids (token ids or targets) against [0, limit). ok(), or the first bad id and where.
struct [[nodiscard]] IdCheck {
  const char* what = "";  // which input was checked: "token" or "target"
  int64_t position = -1;  // flat index (b * T + t) of the first id out of range; -1 when all were in range
  int32_t value = 0;      // that id
  int32_t limit = 0;      // valid ids are [0, limit)

  bool ok() const noexcept { return position < 0; }
  // "target 12 at position 7 (row-major over [B,T]) is outside [0, 11)"; empty when ok().
  std::string message() const {
    if (ok()) return {};
    return std::string(what) + " " + std::to_string(value) + " at position " + std::to_string(position) +
           " (row-major over [B,T]) is outside [0, " + std::to_string(limit) + ")";
  }
};

// ---------------------------------------------------------------------------------------------------------
// Encoder: token embedding plus position embedding.

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
// out (B,T,C); tokens (B,T) int32 in [0,V); wte (V,C); wpe (maxT,C) with T <= maxT.
IdCheck encoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       int V);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]. Shapes as encoderForward.
IdCheck encoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C, int V);

// ---------------------------------------------------------------------------------------------------------
// Linear layer (a matmul, through sgemm).

// out = inp @ weight^T + bias.
// out (N,OC); inp (N,C); weight (OC,C), PyTorch's nn.Linear layout; bias (OC) or nullptr for none.
void linearForward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC);
// dinp += dout @ weight; dweight += dout^T @ inp; dbias += column sums of dout (dbias may be nullptr).
// dinp (N,C); dweight (OC,C); dbias (OC); dout (N,OC); inp and weight as linearForward.
void linearBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                    int N, int C, int OC);

// ---------------------------------------------------------------------------------------------------------
// LayerNorm over the last dimension, eps = 1e-5 (GPT-2's).

// out = (inp - mean) * rstd * weight + bias per row; mean and rstd = 1/sqrt(var + eps) are saved for backward.
// out, inp (N,C); mean, rstd (N); weight, bias (C).
void layernormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                      int N, int C);
// dinp (N,C) +=, dweight (C) +=, dbias (C) +=; dout, inp (N,C); mean, rstd from layernormForward.
void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, const float* mean, const float* rstd, int N, int C);

// ---------------------------------------------------------------------------------------------------------
// Causal multi-head self-attention (no projections: those are linear layers around it).

// qkv (B,T,3C) holds q, k, v side by side per position, heads contiguous inside each: head h of q is
// qkv[b,t, h*hs : (h+1)*hs], of k at offset C, of v at offset 2C, with hs = C / NH (C divisible by NH).
// att (B,NH,T,T) receives the softmax probabilities softmax(q k^T / sqrt(hs)) under the causal mask, with
// exact zeros above the diagonal; attentionBackward needs it. out (B,T,C): heads concatenated.
void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) +=; datt: scratch of T*T floats, overwritten; dout (B,T,C); qkv and att as from
// attentionForward.
void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T,
                       int C, int NH);

// ---------------------------------------------------------------------------------------------------------
// Element-wise layers. n counts elements.

// GELU, tanh approximation (GPT-2's): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out may be inp.
void geluForward(float* out, const float* inp, size_t n);
// dinp += gelu'(inp) * dout; dinp distinct from inp and dout.
void geluBackward(float* dinp, const float* inp, const float* dout, size_t n);

// out = a + b (out may be a or b).
void residualForward(float* out, const float* a, const float* b, size_t n);
// da += dout; db += dout (three distinct buffers).
void residualBackward(float* da, float* db, const float* dout, size_t n);

// ---------------------------------------------------------------------------------------------------------
// Softmax and cross-entropy over the vocabulary, fused.

// probs = softmax(logits) per row, losses[i] = -log probs[i, targets[i]], computed as
// log(sum exp(logits - max)) - (logits[target] - max) so that a probability that underflows still gives a
// finite loss. losses (N); probs, logits (N,V); probs may be the same pointer as logits (softmax in place);
// targets (N) int32 in [0,V).
IdCheck crossEntropyForward(float* losses, float* probs, const float* logits, const int32_t* targets, int N, int V);
// dlogits = (probs - onehot(targets)) * dlossScale: WRITES, not accumulates (the logits feed nothing else).
// dlossScale is d(loss)/d(losses[i]), the same for every row: 1/N for the mean over N positions (divide by the
// number of micro-batches too when accumulating). dlogits (N,V) may be the same pointer as probs.
IdCheck crossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets, float dlossScale, int N,
                             int V);

// ---------------------------------------------------------------------------------------------------------
// Optimizer and gradient clipping.

// One AdamW step on n parameters, with decoupled weight decay (Loshchilov & Hutter):
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr * (mhat / (sqrt(vhat) + eps) + weightDecay * param),  mhat = m / (1 - beta1^t),
//   vhat = v / (1 - beta2^t).
// t is the step number, starting at 1. m and v start at zero and are updated in place. Call it once per
// tensor (or per run of tensors) to give, e.g., biases and layernorm weights weightDecay = 0.
void adamwStep(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
               float eps, float weightDecay, int t);

// sum of grads[i]^2, accumulated in double. Add the results of all tensors (and all ranks) before sqrt.
double globalNormSquared(const float* grads, size_t n);
// x[i] *= s (e.g. s = maxNorm / norm to clip).
void scale(float* x, size_t n, float s);

// ---------------------------------------------------------------------------------------------------------
// Threads: the only threads in this file's math are OpenBLAS's. Ranks that share a host's cores each take a
// share of them (several ranks each running every core's worth of BLAS threads would thrash).

void setBlasThreads(int n);
int blasThreads();

}  // namespace hetcomm::kernels::nn
