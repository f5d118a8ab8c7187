// param_layout.h: where every parameter of the GPT lives in one flat float buffer (llm.c's habit: what a bucketed
// allreduce wants), and how that buffer is cut into communication buckets.
//
// Tensors are laid out group by group in the order the forward pass uses them: group 0 is the embeddings (wte,
// wpe), groups 1..L the transformer blocks, group L+1 the final LayerNorm. The backward pass finishes groups in
// the opposite order (the final LayerNorm first; wte last, since the tied LM head and the encoder both write
// it), so buckets are runs of consecutive groups taken from the end, and a bucket's gradients are complete as
// soon as the backward pass has passed its first group.
//
// Each bucket's length is padded to a multiple of `align` (the data-parallel size), so it splits evenly into
// one shard per rank for ZeRO-1's reduce-scatter and allgather. Padding floats are zero and belong to no tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/config.h"

namespace hetcomm::trainer {

struct ParamTensor {
  std::string name;            // "h.0.attn.qkv.weight": the checkpoint's tensor name
  std::vector<int64_t> shape;  // row-major
  size_t offset = 0;           // in floats, into the flat buffer
  size_t numel = 0;
  int group = 0;               // 0 embeddings, 1 + layer, nLayer + 1 final LayerNorm
  bool decay = false;          // AdamW weight decay: matrices yes, biases and norms no
  enum class Init { kNormal, kResidualProj, kZero, kOne } init = Init::kNormal;
};

struct Bucket {
  size_t offset = 0;  // floats, into the flat buffer
  size_t length = 0;  // floats, a multiple of the layout's align (padding included)
  int firstGroup = 0, lastGroup = 0;  // inclusive; the backward pass completes lastGroup first
};

class ParamLayout {
 public:
  // bucketBytes: buckets hold at least this much (the last one may hold less); align: see the file comment.
  ParamLayout(const ModelConfig& model, size_t bucketBytes, int align);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // Buckets in the order their gradients complete (the final LayerNorm's first).
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t totalFloats() const { return total_; }      // with padding
  size_t parameterCount() const { return params_; }  // without
  int groups() const { return groups_; }
  const ParamTensor& find(const std::string& name) const;  // throws std::out_of_range for an unknown name
  // The bucket that holds group g.
  int bucketOfGroup(int g) const { return bucketOfGroup_[g]; }

 private:
  std::vector<ParamTensor> tensors_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucketOfGroup_;
  size_t total_ = 0, params_ = 0;
  int groups_ = 0;
};

// Names of one block's tensors, in layout order (the model reads them by index).
enum BlockTensor : int {
  kLn1W, kLn1B, kQkvW, kQkvB, kAttnProjW, kAttnProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kBlockTensors
};

}  // namespace hetcomm::trainer
