#include "api/models.h"

#include "api/errors.h"
#include "core/json_write.h"

namespace fathom::api {

std::vector<ServedModel> served_models_with_deepseek_aliases(std::string name,
                                                             bool default_thinking) {
  std::vector<ServedModel> out;
  out.push_back({std::move(name), default_thinking});
  for (ServedModel alias : {ServedModel{"deepseek-chat", false}, {"deepseek-reasoner", true}}) {
    if (out[0].name != alias.name) out.push_back(std::move(alias));
  }
  return out;
}

Result<const ServedModel*> resolve_model(const std::vector<ServedModel>& models,
                                         std::string_view requested) {
  if (models.empty()) return internal_error("no model is served");
  if (requested.empty()) return &models.front();
  for (const ServedModel& m : models)
    if (m.name == requested) return &m;
  return model_not_found(requested);
}

std::string model_json(const ServedModel& model, int64_t created, int64_t max_model_len,
                       std::string_view owned_by) {
  std::string out = "{\"id\":";
  json::append_string(out, model.name);
  out += ",\"object\":\"model\",\"created\":" + std::to_string(created) + ",\"owned_by\":";
  json::append_string(out, owned_by);
  out += ",\"root\":";
  json::append_string(out, model.name);
  if (max_model_len > 0) out += ",\"max_model_len\":" + std::to_string(max_model_len);
  out += "}";
  return out;
}

std::string models_list_json(const std::vector<ServedModel>& models, int64_t created,
                             int64_t max_model_len, std::string_view owned_by) {
  std::string out = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < models.size(); ++i) {
    if (i) out += ",";
    out += model_json(models[i], created, max_model_len, owned_by);
  }
  out += "]}";
  return out;
}

}  // namespace fathom::api
