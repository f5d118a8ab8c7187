// json_input.h: what the trainer's JSON inputs (config, plan) share: reading the file, parsing with the byte
// offset of a syntax error, and the wording of errors about one key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "trainer/error.h"

namespace hetcomm::trainer {

// The whole file; errors name `source` and the system's reason.
Result<std::string> readTextFile(const std::string& path, const std::string& source);
// Parsed JSON, or an error with the offset of the character that broke the parse.
Result<nlohmann::json> parseJsonText(const std::string& text, const std::string& source);
// An error about one key ("key 'model.n_head'").
Error keyError(const std::string& source, const std::string& key, std::string detail);
// A value as errors show it: its type and its text, cut at 40 characters ("string \"eight\"").
std::string describeJson(const nlohmann::json& v);

}  // namespace hetcomm::trainer
