// `fathom render`: one golden-style case on stdin, the prompt string on stdout.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "api/anthropic_messages.h"
#include "api/chat_completions.h"
#include "api/errors.h"
#include "api/openai_responses.h"
#include "cli/commands.h"
#include "core/json_write.h"
#include "core/py_json.h"
#include "prompt/encoder.h"
#include "prompt/output_parser.h"
#include "prompt/reference.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

struct RenderArgs {
  std::string format = "v41";
  std::string mode = "reference";
};

// API mode: the case's conversation rendered the way deepseek-recipe renders a request.
int run_render_api(const RenderArgs& a, const pyjson::Value& c) {
  api::ConversationRequest req;
  const pyjson::Value* m = c.find("messages");
  if (m == nullptr || !m->is_array()) {
    std::fprintf(stderr, "fathom: \"messages\" must be a list\n");
    return 2;
  }
  req.messages = *m;
  const pyjson::Value* mode = c.find("thinking_mode");
  req.thinking = mode != nullptr && mode->is_string() && mode->text == "thinking";
  if (const pyjson::Value* e = c.find("reasoning_effort"); e != nullptr && !e->is_null()) {
    int64_t b = 0;
    if (e->int_fits_int64(&b)) {
      req.budget = b;
    } else if (e->is_string() && (e->text == "low" || e->text == "minimal")) {
      req.effort = api::Effort::kLow;
    } else if (e->is_string() && (e->text == "high" || e->text == "medium")) {
      req.effort = api::Effort::kHigh;
    } else if (e->is_string() && e->text == "xhigh") {
      req.effort = api::Effort::kXhigh;
    } else if (e->is_string() && e->text == "max") {
      req.effort = api::Effort::kMax;
    } else {
      std::fprintf(stderr, "fathom: invalid reasoning_effort\n");
      return 2;
    }
  }
  auto p =
      api::render_api(req, a.format == "v41" ? api::PromptFormat::kV41 : api::PromptFormat::kV4);
  if (!p.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", p.status().to_string().c_str());
    return 2;
  }
  std::string s = p->to_string();
  std::fwrite(s.data(), 1, s.size(), stdout);
  return 0;
}

int run_render(const RenderArgs& a) {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto c = pyjson::parse(input);
  if (!c.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", c.status().to_string().c_str());
    return 2;
  }
  if (a.mode == "api") return run_render_api(a, *c);
  auto req = prompt::ReferenceRequest::from_case(*c);
  if (!req.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", req.status().to_string().c_str());
    return 2;
  }
  auto out =
      a.format == "v41" ? prompt::render_v41_reference(*req) : prompt::render_v4_reference(*req);
  if (!out.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", out.status().to_string().c_str());
    return 2;
  }
  std::string s = out->prompt.to_string();
  std::fwrite(s.data(), 1, s.size(), stdout);
  return 0;
}

struct ParseArgs {
  std::string format = "v41";
  std::string mode = "reference";
  std::string tokenizer;
  std::string protocol = "chat";
  bool stream = false;
};

struct EncodeArgs {
  std::string tokenizer;
  std::string format = "v41";
  std::string protocol = "chat";
};

std::string read_stdin() {
  return std::string((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
}

// Parses (per protocol), renders and encodes a request body.
struct Encoded {
  api::ConversationRequest request;
  prompt::Prompt prompt;
  std::vector<int32_t> ids;
};
Result<Encoded> encode_request(const Tokenizer& tok, const std::string& body,
                               const std::string& protocol, api::PromptFormat format) {
  Encoded e;
  if (protocol == "chat") {
    api::ChatOptions opt;
    opt.format = format;
    FATHOM_ASSIGN_OR_RETURN(e.request, api::parse_chat_request(body, opt));
  } else if (protocol == "messages") {
    api::MessagesOptions opt;
    opt.format = format;
    FATHOM_ASSIGN_OR_RETURN(e.request, api::parse_messages_request(body, opt));
  } else {
    api::ResponsesOptions opt;
    opt.format = format;
    FATHOM_ASSIGN_OR_RETURN(e.request, api::parse_responses_request(body, opt));
  }
  FATHOM_ASSIGN_OR_RETURN(e.prompt, api::render_api(e.request, format));
  FATHOM_ASSIGN_OR_RETURN(auto enc, prompt::PromptEncoder::create(tok));
  FATHOM_ASSIGN_OR_RETURN(e.ids, enc.encode(e.prompt));
  return e;
}

std::string error_json(const std::string& protocol, const Status& s) {
  return protocol == "messages" ? api::anthropic_error_json(s) : api::openai_error_json(s);
}

int run_encode(const EncodeArgs& a) {
  auto tok = Tokenizer::load_file(a.tokenizer);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", tok.status().to_string().c_str());
    return 2;
  }
  auto e = encode_request(**tok, read_stdin(), a.protocol,
                          a.format == "v41" ? api::PromptFormat::kV41 : api::PromptFormat::kV4);
  if (!e.is_ok()) {
    std::printf("%s\n", error_json(a.protocol, e.status()).c_str());
    return 2;
  }
  std::string out = "{\"token_ids\":";
  json::append_int_array(out, e->ids);
  out += ",\"prompt\":";
  json::append_string(out, e->prompt.to_string());
  out += "}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_parse_protocol(const ParseArgs& a) {
  auto tok = Tokenizer::load_file(a.tokenizer);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", tok.status().to_string().c_str());
    return 2;
  }
  auto in = pyjson::parse(read_stdin());
  const pyjson::Value* req = in.is_ok() ? in->find("request") : nullptr;
  const pyjson::Value* ids = in.is_ok() ? in->find("output_ids") : nullptr;
  const pyjson::Value* fin = in.is_ok() ? in->find("finish") : nullptr;
  if (req == nullptr || ids == nullptr || !ids->is_array()) {
    std::fprintf(stderr,
                 "fathom: stdin needs {\"request\": {...}, \"output_ids\": [...], \"finish\": "
                 "\"stop\"|\"length\"}\n");
    return 2;
  }
  auto e = encode_request(**tok, pyjson::dumps(*req, false), a.protocol,
                          a.format == "v41" ? api::PromptFormat::kV41 : api::PromptFormat::kV4);
  if (!e.is_ok()) {
    std::printf("%s\n", error_json(a.protocol, e.status()).c_str());
    return 2;
  }
  auto parser = prompt::OutputParser::create(**tok, e->request.parsing_options());
  if (!parser.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", parser.status().to_string().c_str());
    return 2;
  }
  std::vector<prompt::ParserEvent> events;
  for (const pyjson::Value& v : ids->items) {
    int64_t id = 0;
    if (!v.int_fits_int64(&id) || !parser->push(int32_t(id), events).is_ok()) {
      std::fprintf(stderr, "fathom: bad output id\n");
      return 2;
    }
  }
  bool length = fin != nullptr && fin->is_string() && fin->text == "length";
  parser->finish(length ? prompt::FinishReason::kLength : prompt::FinishReason::kStop, events);
  api::Usage usage{int64_t(e->ids.size()), int64_t(ids->items.size()), 0};
  std::string id =
      "fathom-" + std::to_string(e->ids.size()) + "-" + std::to_string(ids->items.size());
  std::string model = e->request.model.empty() ? "deepseek-v4.1" : e->request.model;
  std::string out;
  if (a.protocol == "messages") {
    api::MessagesResponder responder(id, model, e->request.thinking);
    if (a.stream) {
      out = responder.stream(events, usage);
    } else {
      responder.add(events);
      out = responder.complete(usage) + "\n";
    }
  } else if (a.protocol == "responses") {
    api::ResponsesResponder responder(id, model, 0);
    if (a.stream) {
      out = responder.stream(events, usage);
    } else {
      responder.add(events);
      out = responder.complete(usage) + "\n";
    }
  } else {
    api::ChatResponder responder(id, model, 0, e->request.thinking, e->request.include_usage);
    if (a.stream) {
      out = responder.stream(events, usage);
    } else {
      responder.add(events);
      out = responder.complete(usage) + "\n";
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_parse(const ParseArgs& a) {
  if (!a.tokenizer.empty()) return run_parse_protocol(a);
  if (a.mode != "reference") {
    std::fprintf(stderr, "fathom: parse without --tokenizer needs --mode reference\n");
    return 2;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto c = pyjson::parse(input);
  if (!c.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", c.status().to_string().c_str());
    return 2;
  }
  const pyjson::Value* completion = c->find("completion");
  const pyjson::Value* mode = c->find("thinking_mode");
  if (completion == nullptr || !completion->is_string()) {
    std::fprintf(stderr, "fathom: the input needs a string \"completion\"\n");
    return 2;
  }
  bool thinking = mode != nullptr && mode->is_string() && mode->text == "thinking";
  auto msg = prompt::parse_completion_reference(completion->text, thinking, a.format == "v41");
  if (!msg.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", msg.status().to_string().c_str());
    return 2;
  }
  std::string out = pyjson::dumps(*msg, false);
  out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

void add_prompt_commands(CLI::App& app, Runner* run) {
  auto args = std::make_shared<RenderArgs>();
  auto* r = app.add_subcommand("render",
                               "Render one conversation case (stdin JSON) to the prompt string");
  r->add_option("--format", args->format, "Prompt format")->check(CLI::IsMember({"v4", "v41"}));
  r->add_option("--mode", args->mode, "reference (official encoder, byte-exact) or api")
      ->check(CLI::IsMember({"reference", "api"}));
  r->callback([args, run] { *run = [args] { return run_render(*args); }; });

  auto pargs = std::make_shared<ParseArgs>();
  auto* p = app.add_subcommand(
      "parse", "Parse a completion (stdin {\"completion\", \"thinking_mode\"}) into a message");
  p->add_option("--format", pargs->format, "Prompt format")->check(CLI::IsMember({"v4", "v41"}));
  p->add_option("--mode", pargs->mode, "reference (official parser, quirks included)")
      ->check(CLI::IsMember({"reference", "api"}));
  p->add_option(
      "--tokenizer", pargs->tokenizer,
      "tokenizer.json: parse output ids for a protocol (stdin {request, output_ids, finish})");
  p->add_option("--protocol", pargs->protocol, "chat, responses or messages")
      ->check(CLI::IsMember({"chat", "responses", "messages"}));
  p->add_flag("--stream", pargs->stream, "Print the SSE lines a client would receive");
  p->callback([pargs, run] { *run = [pargs] { return run_parse(*pargs); }; });

  auto eargs = std::make_shared<EncodeArgs>();
  auto* e = app.add_subcommand("encode", "Encode a protocol request body (stdin) to token ids");
  e->add_option("--tokenizer", eargs->tokenizer, "tokenizer.json")->required();
  e->add_option("--format", eargs->format, "Prompt format")->check(CLI::IsMember({"v4", "v41"}));
  e->add_option("--protocol", eargs->protocol, "chat, responses or messages")
      ->check(CLI::IsMember({"chat", "responses", "messages"}));
  e->callback([eargs, run] { *run = [eargs] { return run_encode(*eargs); }; });
}

}  // namespace fathom::cli
