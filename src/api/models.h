// The model names a server answers to. One set of weights may be served under several names
// that differ only in their default thinking mode, as DeepSeek's own API does: `deepseek-chat`
// (thinking off) and `deepseek-reasoner` (thinking on). A request's `model` picks one; the
// protocol parsers take the list (ChatOptions::models and the like), resolve the name and
// apply its default before reading the request's own thinking fields.
//
// Plain data and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom::api {

struct ServedModel {
  std::string name;
  bool default_thinking = true;
};

// `name` (with default_thinking), then deepseek-chat (off) and deepseek-reasoner (on), without
// repeating a name already in the list.
std::vector<ServedModel> served_models_with_deepseek_aliases(std::string name,
                                                             bool default_thinking = true);

// The model a request names: empty (or a missing `model`) is the first; an unknown name is
// model_not_found(requested) (HTTP 404, OpenAI code "model_not_found", Anthropic
// not_found_error). REQUIRES: `models` is not empty.
Result<const ServedModel*> resolve_model(const std::vector<ServedModel>& models,
                                         std::string_view requested);

// One served model as OpenAI's model object, {"id", "object": "model", "created",
// "owned_by"}, with vLLM's and SGLang's "root" (the name) and, when positive,
// "max_model_len" (the context length) (GET /v1/models/{model}).
std::string model_json(const ServedModel& model, int64_t created, int64_t max_model_len = 0,
                       std::string_view owned_by = "fathom");

// GET /v1/models: {"object": "list", "data": [model_json of each]}.
std::string models_list_json(const std::vector<ServedModel>& models, int64_t created,
                             int64_t max_model_len = 0, std::string_view owned_by = "fathom");

}  // namespace fathom::api
