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
//
// A Shard is the part of the model one rank of a hybrid run holds: the blocks of its pipeline stage (the
// embedding with the first stage, the final LayerNorm and LM head with the last), each cut Megatron style for
// its tensor-parallel rank: wte by vocabulary rows, qkv and fc by output rows (heads, MLP columns), the two
// projections by input columns; LayerNorms, wpe and the projections' biases whole on every TP rank. With more
// than one stage the last stage keeps its own copy of (its rows of) wte for the tied head, as Megatron does;
// the trainer sums the two copies' gradients. Every tensor records where it lies in the full model, so a full
// buffer (initialisation, checkpoints) and a shard convert both ways.
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
  int group = 0;       // 0 embeddings, 1 + layer, nLayer + 1 final LayerNorm
  bool decay = false;  // AdamW weight decay: matrices yes, biases and norms no
  enum class Init { kNormal, kResidualProj, kZero, kOne } init = Init::kNormal;
  // Where it lies in the full model's tensor `fullName`: all of it, some of its rows (runs of rows, in order),
  // or the columns [cols.first, cols.second) of every row.
  std::string fullName;
  enum class Cut { kWhole, kRows, kCols } cut = Cut::kWhole;
  std::vector<std::pair<int64_t, int64_t>> rows;  // kRows: [begin, end) row runs of the full tensor
  std::pair<int64_t, int64_t> cols{0, 0};         // kCols
  // Counted in the global gradient norm by this rank: false for a tensor some other rank holds too with the
  // same gradient (TP-replicated ones on tp ranks > 0; the head's copy of wte).
  bool inNorm = true;
};

// The part of the model one rank holds (see the file comment). The default is the whole model.
struct Shard {
  int firstLayer = 0;  // blocks [firstLayer, firstLayer + layers)
  int layers = -1;     // -1: every block
  bool embedding = true, head = true;
  int tp = 1, tpRank = 0;
  bool tiedCopy() const { return head && !embedding; }  // the head's own copy of wte (pipeline of >= 2 stages)
};

struct Bucket {
  size_t offset = 0;                  // floats, into the flat buffer
  size_t length = 0;                  // floats, a multiple of the layout's align (padding included)
  int firstGroup = 0, lastGroup = 0;  // inclusive; the backward pass completes lastGroup first
};

class ParamLayout {
 public:
  // bucketBytes: buckets hold at least this much (the last one may hold less); align: see the file comment.
  ParamLayout(const ModelConfig& model, size_t bucketBytes, int align);
  // The shard's tensors only, under their full names ("h.3.attn.qkv.weight"; the head's wte copy is
  // "lm_head.weight", in the final LayerNorm's group). Groups keep the full model's numbering; a group the
  // shard lacks has no tensors and no bucket. Requires the shard to fit the model (validatePlan checks that).
  ParamLayout(const ModelConfig& model, const Shard& shard, size_t bucketBytes, int align);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // Buckets in the order their gradients complete (the final LayerNorm's first).
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t totalFloats() const { return total_; }      // with padding
  size_t parameterCount() const { return params_; }  // without
  int groups() const { return groups_; }
  const ParamTensor& find(const std::string& name) const;  // throws std::out_of_range for an unknown name
  // The bucket that holds group g (-1 for a group of the full model this shard lacks).
  int bucketOfGroup(int g) const { return bucketOfGroup_[g]; }
  bool hasGroup(int g) const { return g >= 0 && g < groups_ && bucketOfGroup_[g] >= 0; }
  const Shard& shard() const { return shard_; }

 private:
  std::vector<ParamTensor> tensors_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucketOfGroup_;
  size_t total_ = 0, params_ = 0;
  int groups_ = 0;
  Shard shard_;
};

// Copies this shard's part of a full-model buffer (full: the whole model's layout) into shard (zero padding).
void sliceFromFull(const ParamLayout& full, const float* fullBuf, const ParamLayout& shard, float* shardBuf);
// Adds the shard's tensors into their places in a full-model buffer (skipping tensors with inNorm false, so
// that summing every rank's contribution over one replica counts each parameter once).
void addToFull(const ParamLayout& shard, const float* shardBuf, const ParamLayout& full, float* fullBuf);

// Names of one block's tensors, in layout order (the model reads them by index).
enum BlockTensor : int {
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kAttnProjW,
  kAttnProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kFcProjW,
  kFcProjB,
  kBlockTensors
};

}  // namespace hetcomm::trainer
