// data.cc: tokenizer, corpus, deterministic sample order. The order and sharding rules are in data.h.
#include "trainer/data.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <system_error>

namespace hetcomm::trainer {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a fixed, well-mixed function of a 64-bit value. It turns
// (seed, epoch, split) into the generator's seed so that nearby seeds and epochs give unrelated orders.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, bound), bound >= 1, by rejection: the draws below `threshold` = 2^64 mod bound are discarded,
// which leaves a range whose size is a multiple of bound, so `x % bound` has no modulo bias. Fully specified,
// unlike std::uniform_int_distribution.
uint64_t uniformBelow(std::mt19937_64& gen, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // (2^64 - bound) mod bound == 2^64 mod bound
  for (;;) {
    const uint64_t x = gen();
    if (x >= threshold) return x % bound;
  }
}

// "0.1", not std::to_string's "0.100000".
std::string shortNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

Result<std::string> readFile(const std::string& path) {
  const std::string source = "corpus file " + path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Error{.source = source, .detail = "is a directory"};
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{.source = source, .detail = "cannot open: " + std::string(std::strerror(errno))};
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Error{.source = source, .detail = "read failed: " + std::string(std::strerror(errno))};
  if (text.empty()) return Error{.source = source, .detail = "is empty"};
  return text;
}

}  // namespace

std::vector<Token> encode(std::string_view text) {
  std::vector<Token> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string decode(std::span<const Token> tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (Token t : tokens) {
    if (t >= 0 && t < kByteVocabSize)
      text.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    else
      text += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
  }
  return text;
}

double unigramEntropyNats(std::span<const Token> tokens) {
  if (tokens.empty()) return 0.0;
  std::array<uint64_t, kByteVocabSize> bytes{};
  std::map<Token, uint64_t> others;  // tokens outside the byte range: rare, so a map is fine
  for (Token t : tokens) {
    if (t >= 0 && t < kByteVocabSize)
      ++bytes[t];
    else
      ++others[t];
  }
  const double n = double(tokens.size());
  double h = 0.0;
  auto add = [&](uint64_t count) {
    if (count == 0) return;
    const double p = double(count) / n;
    h -= p * std::log(p);
  };
  for (uint64_t c : bytes) add(c);
  for (const auto& [t, c] : others) add(c);
  return h;
}

double unigramEntropyBits(std::span<const Token> tokens) { return unigramEntropyNats(tokens) / std::log(2.0); }

Result<std::vector<std::string>> defaultCorpusFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string hint =
      "install fortunes: scripts/setup.sh (or apt-get install fortunes), or list data_files "
      "in the config";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Error{.source = "default corpus " + dir, .detail = "no such directory: " + hint};
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    // symlink_status: the .u8 entries are symlinks to the plain files and would count every text twice.
    const fs::file_status st = it->symlink_status(ec);
    if (ec || !fs::is_regular_file(st)) continue;
    const std::string ext = it->path().extension().string();
    if (ext == ".dat" || ext == ".u8") continue;
    files.push_back(it->path().string());
  }
  if (ec) return Error{.source = "default corpus " + dir, .detail = "cannot list: " + ec.message()};
  if (files.empty()) return Error{.source = "default corpus " + dir, .detail = "holds no text files: " + hint};
  std::sort(files.begin(), files.end());  // directory order is arbitrary; the corpus must not be
  return files;
}

const char* splitName(Split split) { return split == Split::kTrain ? "train" : "validation"; }

Result<Dataset> Dataset::fromFiles(const std::vector<std::string>& files, double valFraction, int seqLen) {
  if (files.empty()) return Error{.source = "corpus", .detail = "no files given"};
  std::vector<Token> all;
  for (size_t i = 0; i < files.size(); ++i) {
    Result<std::string> text = readFile(files[i]);
    if (!text) return text.error();
    if (i > 0) all.push_back('\n');
    std::vector<Token> t = encode(*text);
    all.insert(all.end(), t.begin(), t.end());
  }
  const std::string source = "corpus (" + std::to_string(files.size()) + (files.size() == 1 ? " file)" : " files)");
  return build(std::move(all), valFraction, seqLen, source, files);
}

Result<Dataset> Dataset::fromText(std::string_view text, double valFraction, int seqLen, const std::string& source) {
  return build(encode(text), valFraction, seqLen, source, {});
}

Result<Dataset> Dataset::build(std::vector<Token> all, double valFraction, int seqLen, const std::string& source,
                               std::vector<std::string> files) {
  if (seqLen <= 0) return Error{.source = source, .detail = "seq_len must be positive, got " + std::to_string(seqLen)};
  if (!(valFraction > 0 && valFraction < 1))
    return Error{.source = source, .detail = "val_fraction must be in (0,1), got " + shortNumber(valFraction)};
  const size_t n = all.size();
  const size_t valCount = static_cast<size_t>(double(n) * valFraction);  // floor; IEEE, so the same everywhere
  const size_t trainCount = n - valCount;
  const size_t need = size_t(seqLen) + 1;
  if (trainCount < need || valCount < need) {
    return Error{.source = source,
                 .detail = std::to_string(n) + " tokens split by val_fraction " + shortNumber(valFraction) + " into " +
                           std::to_string(trainCount) + " train and " + std::to_string(valCount) +
                           " validation tokens; each split needs at least seq_len+1 = " + std::to_string(need)};
  }
  Dataset d;
  d.val_.assign(all.begin() + std::ptrdiff_t(trainCount), all.end());
  all.resize(trainCount);
  d.train_ = std::move(all);
  d.seqLen_ = seqLen;
  d.files_ = std::move(files);
  return d;
}

std::span<const Token> Dataset::tokens(Split split) const { return split == Split::kTrain ? train_ : val_; }

int64_t Dataset::windowCount(Split split) const { return (int64_t(tokens(split).size()) - 1) / seqLen_; }

DataLoader::DataLoader(const Dataset& dataset, Split split, uint64_t seed, bool shuffle)
    : dataset_(&dataset), split_(split), seed_(seed), shuffle_(shuffle), windows_(dataset.windowCount(split)) {}

void DataLoader::ensureOrder() {
  if (orderValid_ && orderEpoch_ == position_.epoch) return;
  order_.resize(size_t(windows_));
  for (int64_t i = 0; i < windows_; ++i) order_[size_t(i)] = i;
  if (shuffle_) {
    // Fisher-Yates from the back: position i swaps with a uniform j in [0, i].
    std::mt19937_64 gen(splitmix64(seed_ ^ splitmix64(2 * position_.epoch + (split_ == Split::kVal ? 1 : 0))));
    for (int64_t i = windows_ - 1; i > 0; --i) {
      const uint64_t j = uniformBelow(gen, uint64_t(i) + 1);
      std::swap(order_[size_t(i)], order_[size_t(j)]);
    }
  }
  orderEpoch_ = position_.epoch;
  orderValid_ = true;
}

std::vector<int64_t> DataLoader::nextSamples(int64_t count) {
  std::vector<int64_t> samples;
  if (count <= 0) return samples;
  samples.reserve(size_t(count));
  while (int64_t(samples.size()) < count) {
    ensureOrder();
    samples.push_back(order_[size_t(position_.cursor)]);
    // Keep cursor < windows: the position saved after the last sample of an epoch is the next epoch's start.
    if (++position_.cursor == uint64_t(windows_)) {
      position_.cursor = 0;
      ++position_.epoch;
    }
  }
  return samples;
}

Result<Batch> DataLoader::makeBatch(std::span<const int64_t> samples) const {
  const int T = dataset_->seqLen();
  const std::span<const Token> tokens = dataset_->tokens(split_);
  Batch b;
  b.batchSize = int(samples.size());
  b.seqLen = T;
  b.inputs.resize(samples.size() * size_t(T));
  b.targets.resize(samples.size() * size_t(T));
  for (size_t i = 0; i < samples.size(); ++i) {
    const int64_t w = samples[i];
    if (w < 0 || w >= windows_) {
      return Error{.source = std::string(splitName(split_)) + " data",
                   .detail = "sample " + std::to_string(i) + " is window " + std::to_string(w) + ", outside the " +
                             std::to_string(windows_) + " windows of the split"};
    }
    const Token* window = tokens.data() + size_t(w) * size_t(T);  // window + T is in bounds: w < (n-1)/T
    std::copy(window, window + T, b.inputs.begin() + std::ptrdiff_t(i * size_t(T)));
    std::copy(window + 1, window + T + 1, b.targets.begin() + std::ptrdiff_t(i * size_t(T)));
  }
  return b;
}

Result<void> DataLoader::seek(DataPosition position) {
  if (position.cursor >= uint64_t(windows_)) {
    return Error{.source = std::string(splitName(split_)) + " data",
                 .detail = "position cursor " + std::to_string(position.cursor) + " is not below the " +
                           std::to_string(windows_) + " samples of an epoch (saved with another corpus or seq_len?)"};
  }
  position_ = position;
  return {};
}

Result<SampleSlice> microBatchSlice(int64_t globalBatch, int dpRank, int dpSize, int microBatch, int microIndex) {
  auto bad = [](std::string detail) { return Error{.source = "batch slicing", .detail = std::move(detail)}; };
  if (globalBatch <= 0 || dpSize <= 0 || microBatch <= 0) {
    return bad("global_batch " + std::to_string(globalBatch) + ", data-parallel size " + std::to_string(dpSize) +
               " and micro_batch " + std::to_string(microBatch) + " must all be positive");
  }
  const int64_t perRound = int64_t(microBatch) * dpSize;
  if (globalBatch % perRound != 0) {
    return bad("global_batch " + std::to_string(globalBatch) + " is not a multiple of micro_batch " +
               std::to_string(microBatch) + " x data-parallel size " + std::to_string(dpSize) + " = " +
               std::to_string(perRound));
  }
  const int64_t accum = globalBatch / perRound;
  if (dpRank < 0 || dpRank >= dpSize)
    return bad("data-parallel rank " + std::to_string(dpRank) + " is outside [0, " + std::to_string(dpSize) + ")");
  if (microIndex < 0 || microIndex >= accum)
    return bad("micro-batch " + std::to_string(microIndex) + " is outside [0, " + std::to_string(accum) + ")");
  const int64_t share = globalBatch / dpSize;
  return SampleSlice{.begin = dpRank * share + int64_t(microIndex) * microBatch, .count = microBatch};
}

}  // namespace hetcomm::trainer
