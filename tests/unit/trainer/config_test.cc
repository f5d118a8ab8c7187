// config_test: loading, validation messages, JSON round trip, parameter counts of the shipped configs.
#include "trainer/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace hetcomm::trainer {
namespace {

using nlohmann::json;

std::string sourceDir() { return HETCOMM_SOURCE_DIR; }

// The error's full message, or "" when `r` holds a value (so EXPECT_THAT-free substring checks read well).
template <class R>
std::string messageOf(const R& r) {
  return r.has_value() ? std::string() : r.error().message();
}

TEST(Config, DefaultsAreValid) {
  TrainConfig c;
  EXPECT_TRUE(validate(c).has_value()) << messageOf(validate(c));
  EXPECT_EQ(gradAccumSteps(c, 1), 2);
  EXPECT_EQ(gradAccumSteps(c, 2), 1);
}

TEST(Config, ParameterCountOfGpt2Small) {
  // GPT-2 small (124M) as a check of the formula: 124,439,808 with its 50257-token vocabulary, 1024 positions.
  ModelConfig gpt2{.nLayer = 12, .nHead = 12, .dModel = 768, .seqLen = 1024, .vocabSize = 50257};
  EXPECT_EQ(parameterCount(gpt2), 124439808);
}

TEST(Config, ShippedConfigsLoad) {
  Result<TrainConfig> tiny = loadConfig(sourceDir() + "/configs/gpt-tiny.json");
  ASSERT_TRUE(tiny.has_value()) << messageOf(tiny);
  EXPECT_EQ(tiny->model, (ModelConfig{.nLayer = 4, .nHead = 4, .dModel = 128, .seqLen = 128, .vocabSize = 256}));
  EXPECT_EQ(tiny->microBatch, 8);
  EXPECT_EQ(tiny->globalBatch, 16);
  // 256*128 + 128*128 + 4*(12*128^2 + 13*128) + 2*128: about a million (0.84M).
  EXPECT_EQ(parameterCount(tiny->model), 842496);

  Result<TrainConfig> bench = loadConfig(sourceDir() + "/configs/gpt-bench.json");
  ASSERT_TRUE(bench.has_value()) << messageOf(bench);
  EXPECT_EQ(bench->model, (ModelConfig{.nLayer = 4, .nHead = 4, .dModel = 256, .seqLen = 256, .vocabSize = 256}));
  EXPECT_EQ(bench->microBatch, 8);
  EXPECT_EQ(parameterCount(bench->model), 3290624);
}

TEST(Config, JsonRoundTrip) {
  TrainConfig c;
  c.model.nLayer = 6;
  c.lr = 3e-4;
  c.minLr = 1.234567890123e-5;
  c.seed = 0xfedcba9876543210ull;  // above INT64_MAX: must survive as unsigned
  c.dataFiles = {"a.txt", "b.txt"};
  c.checkpointDir = "/tmp/ckpt";
  c.checkpointEvery = 50;
  Result<TrainConfig> back = configFromJson(toJson(c));
  ASSERT_TRUE(back.has_value()) << messageOf(back);
  EXPECT_EQ(*back, c);
  // And through text, as a checkpoint's metadata carries it.
  Result<TrainConfig> viaText = parseConfig(toJson(c).dump());
  ASSERT_TRUE(viaText.has_value()) << messageOf(viaText);
  EXPECT_EQ(*viaText, c);
}

TEST(Config, MissingKeysKeepDefaults) {
  Result<TrainConfig> c = parseConfig(R"({"steps": 5, "warmup_steps": 1, "model": {"n_layer": 2}})");
  ASSERT_TRUE(c.has_value()) << messageOf(c);
  EXPECT_EQ(c->steps, 5);
  EXPECT_EQ(c->model.nLayer, 2);
  EXPECT_EQ(c->model.dModel, ModelConfig{}.dModel);
  EXPECT_EQ(c->lr, TrainConfig{}.lr);
}

TEST(Config, UnknownKeysAreNamed) {
  Result<TrainConfig> top = parseConfig(R"({"learning_rate": 0.1})", "config x.json");
  ASSERT_FALSE(top.has_value());
  EXPECT_EQ(top.error().field, "key 'learning_rate'");
  EXPECT_NE(top.error().message().find("config x.json: key 'learning_rate': unknown key"), std::string::npos)
      << top.error().message();
  EXPECT_NE(top.error().message().find("micro_batch"), std::string::npos);  // lists the known keys

  Result<TrainConfig> nested = parseConfig(R"({"model": {"n_layers": 4}})");
  ASSERT_FALSE(nested.has_value());
  EXPECT_EQ(nested.error().field, "key 'model.n_layers'");
}

TEST(Config, TypesAreChecked) {
  struct Case {
    const char* json;
    const char* field;
    const char* says;
  } cases[] = {
      {R"({"micro_batch": 8.5})", "key 'micro_batch'", "must be an integer"},
      {R"({"micro_batch": "8"})", "key 'micro_batch'", "must be an integer, got string"},
      {R"({"lr": "fast"})", "key 'lr'", "must be a number"},
      {R"({"seed": -1})", "key 'seed'", "non-negative"},
      {R"({"model": {"n_head": 4294967296}})", "key 'model.n_head'", "does not fit"},
      {R"({"steps": 18446744073709551615})", "key 'steps'", "too large"},
      {R"({"model": 3})", "key 'model'", "must be an object"},
      {R"({"data_files": ["a", 1]})", "key 'data_files'", "element 1 must be a string"},
      {R"({"checkpoint_dir": false})", "key 'checkpoint_dir'", "must be a string"},
  };
  for (const Case& c : cases) {
    Result<TrainConfig> r = parseConfig(c.json);
    ASSERT_FALSE(r.has_value()) << c.json;
    EXPECT_EQ(r.error().field, c.field) << c.json;
    EXPECT_NE(r.error().detail.find(c.says), std::string::npos) << c.json << " -> " << r.error().message();
  }
}

TEST(Config, RangesAreChecked) {
  struct Case {
    const char* json;
    const char* field;
    const char* says;
  } cases[] = {
      {R"({"model": {"n_layer": 0}})", "key 'model.n_layer'", "must be positive, got 0"},
      {R"({"model": {"d_model": 130, "n_head": 4}})", "key 'model.d_model'",
       "d_model 130 is not a multiple of n_head 4"},
      {R"({"model": {"vocab_size": 100}})", "key 'model.vocab_size'", "at least 256"},
      {R"({"micro_batch": 3, "global_batch": 16})", "key 'global_batch'",
       "global_batch 16 is not a multiple of micro_batch 3 x data-parallel size 1 = 3"},
      {R"({"lr": 0})", "key 'lr'", "must be positive"},
      {R"({"lr": 1e-3, "min_lr": 2e-3})", "key 'min_lr'", "absolute"},
      {R"({"steps": 10, "warmup_steps": 11})", "key 'warmup_steps'", "[0, steps = 10]"},
      {R"({"beta2": 1.0})", "key 'beta2'", "[0,1)"},
      {R"({"eps": 0})", "key 'eps'", "must be positive"},
      {R"({"grad_clip": -1})", "key 'grad_clip'", ">= 0"},
      {R"({"val_fraction": 1})", "key 'val_fraction'", "(0,1)"},
      {R"({"log_every": 0})", "key 'log_every'", "must be positive"},
      {R"({"eval_batches": 0})", "key 'eval_batches'", "must be positive"},
  };
  for (const Case& c : cases) {
    Result<TrainConfig> r = parseConfig(c.json);
    ASSERT_FALSE(r.has_value()) << c.json;
    EXPECT_EQ(r.error().field, c.field) << c.json << " -> " << r.error().message();
    EXPECT_NE(r.error().detail.find(c.says), std::string::npos) << c.json << " -> " << r.error().message();
  }
}

TEST(Config, DataParallelSizeMustDivideTheBatch) {
  TrainConfig c;  // micro 8, global 16
  EXPECT_TRUE(validate(c, 2).has_value());
  Result<void> r = validate(c, 4);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "key 'global_batch'");
  EXPECT_NE(r.error().detail.find("global_batch 16 is not a multiple of micro_batch 8 x data-parallel size 4 = 32"),
            std::string::npos)
      << r.error().message();
  EXPECT_FALSE(validate(c, 0).has_value());
}

TEST(Config, SyntaxErrorsGiveTheByteOffset) {
  Result<TrainConfig> r = parseConfig("{\"steps\": 5,\n \"lr\" 0.1}", "config bad.json");
  ASSERT_FALSE(r.has_value());
  ASSERT_TRUE(r.error().offset.has_value());
  // Where the parser stopped: the last byte of the offending token "0.1" (bytes 19-21), where ':' was expected.
  EXPECT_EQ(*r.error().offset, 21u);
  EXPECT_NE(r.error().message().find("config bad.json: byte 21: not valid JSON"), std::string::npos)
      << r.error().message();

  Result<TrainConfig> notObject = parseConfig("[1,2]");
  ASSERT_FALSE(notObject.has_value());
  EXPECT_NE(notObject.error().detail.find("must be a JSON object"), std::string::npos);
}

TEST(Config, MissingFileIsNamed) {
  Result<TrainConfig> r = loadConfig("/nonexistent/dir/gpt.json");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().source, "config /nonexistent/dir/gpt.json");
  EXPECT_NE(r.error().detail.find("cannot open"), std::string::npos);
}

TEST(Config, ValueThrowsTheErrorForCallersThatWantExceptions) {
  Result<TrainConfig> r = parseConfig(R"({"steps": 0})");
  try {
    (void)r.value();
    FAIL() << "value() of an error must throw";
  } catch (const ErrorException& e) {
    EXPECT_EQ(e.error().field, "key 'steps'");
    EXPECT_EQ(std::string(e.what()), e.error().message());
  }
}

}  // namespace
}  // namespace hetcomm::trainer
