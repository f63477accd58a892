// Shared helpers for the tokenizer tests: the DeepSeek tokenizer (fetched by
// scripts/setup.sh), the golden files under tests/data, and small tokenizer.json builders.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fathom::test {

// Path of DeepSeek-V3's tokenizer.json: $FATHOM_TOKENIZER_JSON, else the setup cache.
std::string deepseek_tokenizer_path();
// Loaded once per process; fails the test (fatal) if the file is missing.
const Tokenizer& deepseek(bool fast_pre_tokenizer = true);
std::string deepseek_json();

std::string data_path(const std::string& rel);
std::vector<nlohmann::json> read_jsonl(const std::string& path);
nlohmann::json read_json(const std::string& path);

// A minimal byte-level BPE tokenizer.json (256 byte tokens, the given merges) with the
// given fields overridden.
nlohmann::json minimal_tokenizer_json(
    const std::vector<std::pair<std::string, std::string>>& merges = {});

}  // namespace fathom::test
