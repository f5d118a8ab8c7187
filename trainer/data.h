// data.h: the training data: a byte-level tokenizer, a corpus of text files split into train and validation,
// and a loader that hands out fixed-length samples in a deterministic shuffled order that data-parallel ranks
// can share out exactly.
//
// Samples. A split of n tokens holds (n-1) / seqLen windows; window k is tokens [k*seqLen, k*seqLen + seqLen + 1):
// the input is its first seqLen tokens, the target the same shifted by one. Windows start seqLen apart, so
// every token of a split except the last few is predicted exactly once per epoch, and the +1 token is shared
// with the next window's first input (as llm.c's loader does).
//
// Order. Each epoch visits every window once, in the order of a Fisher-Yates permutation drawn from
// std::mt19937_64 (whose output the standard fixes exactly) seeded with
//   splitmix64(seed ^ splitmix64(2*epoch + (split == kVal)))
// and bounded draws by rejection (see data.cc). std::shuffle and std::uniform_int_distribution are not used:
// their output differs between standard libraries, and a resumed or re-run job must see the same samples.
//
// Sharding contract. A step consumes globalBatch samples: every rank draws the same list with nextSamples()
// (all ranks construct their loader with the same seed and advance it identically). Data-parallel rank r of D
// takes the contiguous share [r*G/D, (r+1)*G/D) of it, and its micro-batch m is the m-th run of microBatch
// samples of that share (microBatchSlice()). Over all ranks and micro-batches a step therefore sees exactly the
// samples a 1-rank run with the same globalBatch sees; if the loss of a step is the mean over its globalBatch
// samples, a D-rank run reproduces the 1-rank run's losses up to floating-point summation order.
//
// Not here: the model, where batches go on the device, any tokenizer but bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/error.h"

namespace hetcomm::trainer {

using Token = int32_t;  // int32 as embedding lookups want; byte tokens are 0..255
inline constexpr int kByteVocabSize = 256;
inline constexpr char kFortunesDir[] = "/usr/share/games/fortunes";

// Token = byte value (unsigned char), one per byte: encode never fails and decode(encode(s)) == s.
std::vector<Token> encode(std::string_view text);
// A token outside 0..255 (a model with vocabSize > 256 may sample one) becomes U+FFFD, never a crash.
std::string decode(std::span<const Token> tokens);

// Entropy of the token frequency distribution of `tokens` (0 when empty): the loss of a model that predicts
// every token from its overall frequency alone. A trained model's validation loss should be well below it.
double unigramEntropyBits(std::span<const Token> tokens);
double unigramEntropyNats(std::span<const Token> tokens);

// The default corpus: the plain text files of Debian's fortunes packages in `dir`, sorted by name (not the
// .dat indexes, nor the .u8 symlinks to the same texts). Error when there are none: "install fortunes: ...".
Result<std::vector<std::string>> defaultCorpusFiles(const std::string& dir = kFortunesDir);

enum class Split : uint8_t { kTrain, kVal };
const char* splitName(Split split);  // "train", "validation"

// A tokenized corpus split into train (head) and validation (tail). Immutable once built.
class Dataset {
 public:
  // Reads `files` in order and joins them with one '\n' between files. Errors name an unreadable or empty
  // file; and when either split would hold fewer than seqLen+1 tokens (one sample), the token counts.
  // valFraction in (0,1): validation is the last floor(n * valFraction) tokens.
  static Result<Dataset> fromFiles(const std::vector<std::string>& files, double valFraction, int seqLen);
  // The same from text in memory (tests); `source` names it in errors.
  static Result<Dataset> fromText(std::string_view text, double valFraction, int seqLen,
                                  const std::string& source = "text");

  std::span<const Token> tokens(Split split) const;
  int seqLen() const { return seqLen_; }
  int64_t windowCount(Split split) const;  // samples per epoch: (tokens - 1) / seqLen, >= 1
  int64_t totalTokens() const { return int64_t(train_.size() + val_.size()); }
  const std::vector<std::string>& files() const { return files_; }  // empty for fromText

 private:
  Dataset() = default;
  static Result<Dataset> build(std::vector<Token> all, double valFraction, int seqLen, const std::string& source,
                               std::vector<std::string> files);

  std::vector<Token> train_, val_;
  int seqLen_ = 0;
  std::vector<std::string> files_;
};

// Where a loader is: the epoch and the index of the next sample in that epoch's order (cursor < windows per
// epoch). Saved in checkpoints; seek() to it resumes exactly.
struct DataPosition {
  uint64_t epoch = 0;
  uint64_t cursor = 0;
  bool operator==(const DataPosition&) const = default;
};

// Samples materialised as row-major (batchSize, seqLen) token arrays.
struct Batch {
  int batchSize = 0;
  int seqLen = 0;
  std::vector<Token> inputs;   // (B,T)
  std::vector<Token> targets;  // (B,T): inputs shifted by one token
};

// Which window indices come next, for one split. Holds a pointer to the Dataset, which must
// outlive it. Not thread-safe (one per rank, like everything in the trainer).
class DataLoader {
 public:
  // shuffle = false visits windows in corpus order every epoch (a fixed validation set).
  DataLoader(const Dataset& dataset, Split split, uint64_t seed, bool shuffle = true);

  // The next `count` samples (window indices) in order, crossing into the next epoch (and its new order) as
  // needed; advances the position by `count`. count <= 0 gives an empty list.
  std::vector<int64_t> nextSamples(int64_t count);
  // Tokens of the given windows: row i of the batch is window samples[i]. Error on an index outside
  // [0, windowsPerEpoch()).
  Result<Batch> makeBatch(std::span<const int64_t> samples) const;

  DataPosition position() const { return position_; }
  // Error when the cursor is not below windowsPerEpoch() (a checkpoint from another corpus or seq_len).
  Result<void> seek(DataPosition position);
  int64_t windowsPerEpoch() const { return windows_; }
  Split split() const { return split_; }

 private:
  void ensureOrder();  // makes order_ the permutation of position_.epoch

  const Dataset* dataset_;
  Split split_;
  uint64_t seed_;
  bool shuffle_;
  int64_t windows_;
  DataPosition position_;
  std::vector<int64_t> order_;  // window visit order of epoch orderEpoch_
  uint64_t orderEpoch_ = 0;
  bool orderValid_ = false;
};

// The samples [begin, begin+count) of a step's globalBatch-long list that data-parallel rank dpRank of dpSize
// runs as its micro-batch microIndex (see the sharding contract above). Error unless
// globalBatch % (microBatch * dpSize) == 0, 0 <= dpRank < dpSize and 0 <= microIndex < globalBatch/(microBatch*dpSize).
struct SampleSlice {
  int64_t begin = 0;
  int64_t count = 0;
  bool operator==(const SampleSlice&) const = default;
};
Result<SampleSlice> microBatchSlice(int64_t globalBatch, int dpRank, int dpSize, int microBatch, int microIndex);

}  // namespace hetcomm::trainer
