#include "model/draft_vocab.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/py_json.h"
#include "model/config.h"

namespace fathom::model {

Result<std::vector<int32_t>> load_draft_vocabulary(const std::string& model_dir, int64_t n,
                                                   int64_t vocab_size) {
  const std::string path = model_dir + "/" + kDraftVocabFile;
  if (n < 1) return invalid_argument("a draft vocabulary needs at least one token");
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": no draft vocabulary (a JSON list of token ids)");
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = pyjson::parse(text.str());
  if (!parsed.is_ok()) return invalid_argument(path + ": " + parsed.status().message());
  const pyjson::Value& list = *parsed;
  if (!list.is_array()) return invalid_argument(path + ": not a JSON list of token ids");
  if (int64_t(list.items.size()) < n)
    return invalid_argument(path + " lists " + std::to_string(list.items.size()) + " token ids; " +
                            std::to_string(n) + " asked for");
  std::vector<int32_t> ids;
  ids.reserve(size_t(n));
  std::vector<bool> seen(size_t(vocab_size), false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = -1;
    const pyjson::Value& v = list.items[size_t(i)];
    if (v.kind != pyjson::Value::Kind::kInt || !v.int_fits_int64(&id) || id < 0 || id >= vocab_size)
      return invalid_argument(path + ": entry " + std::to_string(i) + " is not a token id in [0, " +
                              std::to_string(vocab_size) + ")");
    if (seen[size_t(id)])
      return invalid_argument(path + ": token id " + std::to_string(id) + " is listed twice");
    seen[size_t(id)] = true;
    ids.push_back(int32_t(id));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

Result<std::vector<int32_t>> load_draft_vocabulary(const std::string& model_dir, int64_t n) {
  FATHOM_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config_dir(model_dir));
  return load_draft_vocabulary(model_dir, n, cfg.vocab_size);
}

}  // namespace fathom::model
