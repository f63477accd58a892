// `fathom render`: one golden-style case on stdin, the prompt string on stdout.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/py_json.h"
#include "prompt/reference.h"

namespace fathom::cli {
namespace {

struct RenderArgs {
  std::string format = "v41";
  std::string mode = "reference";
};

int run_render(const RenderArgs& a) {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto c = pyjson::parse(input);
  if (!c.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", c.status().to_string().c_str());
    return 2;
  }
  if (a.mode != "reference") {
    std::fprintf(stderr, "fathom: --mode %s is not implemented yet (only reference)\n",
                 a.mode.c_str());
    return 2;
  }
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
};

int run_parse(const ParseArgs& a) {
  if (a.mode != "reference" || !a.tokenizer.empty()) {
    std::fprintf(stderr, "fathom: only `parse --mode reference` is implemented so far\n");
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
  p->add_option("--tokenizer", pargs->tokenizer,
                "tokenizer.json (protocol mode; not implemented yet)");
  p->callback([pargs, run] { *run = [pargs] { return run_parse(*pargs); }; });
}

}  // namespace fathom::cli
