// `fathom tokenize` and `fathom detokenize`: JSON lines in, JSON lines out, in order.
// A line that cannot be processed yields {"error": {...}} in its place, and the exit code
// is then 2; later lines are still processed.
#include <simdjson.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/json_write.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  bool plain = false;
  int threads = 1;
  bool skip_special = false;
};

void append_error(std::string& out, std::string_view type, std::string_view message) {
  out += "{\"error\":{\"type\":";
  json::append_string(out, type);
  out += ",\"message\":";
  json::append_string(out, message);
  out += "}}\n";
}

std::unique_ptr<Tokenizer> load_or_report(const std::string& path) {
  auto tok = Tokenizer::load_file(path);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", tok.status().to_string().c_str());
    return nullptr;
  }
  return std::move(tok).value();
}

// Reads all of stdin as lines (without the trailing newline).
std::vector<std::string> read_lines() {
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  return lines;
}

int run_tokenize(const TokenizeArgs& a) {
  auto tok = load_or_report(a.tokenizer);
  if (!tok) return 2;
  std::vector<std::string> lines = read_lines();
  std::vector<std::string> texts(lines.size());
  std::vector<std::string> errors(lines.size());
  simdjson::dom::parser parser;
  for (size_t i = 0; i < lines.size(); ++i) {
    simdjson::dom::element doc;
    std::string_view text;
    if (parser.parse(lines[i]).get(doc) != simdjson::SUCCESS) {
      errors[i] = "line is not valid JSON (or not valid UTF-8)";
    } else if (doc["text"].get(text) != simdjson::SUCCESS) {
      errors[i] = "line has no string field \"text\"";
    } else {
      texts[i] = std::string(text);
    }
  }
  std::vector<std::string_view> views(texts.begin(), texts.end());
  ThreadPool pool(static_cast<size_t>(std::max(1, a.threads)));
  EncodeOptions opts{.match_added_tokens = !a.plain};
  std::vector<std::vector<int32_t>> ids(lines.size());
  std::vector<std::string> encode_errors(lines.size());
  pool.parallel_for(lines.size(), [&](size_t i) {
    if (!errors[i].empty()) return;
    auto r = tok->encode(views[i], opts);
    if (r.is_ok()) {
      ids[i] = std::move(r).value();
    } else {
      encode_errors[i] = r.status().to_string();
    }
  });
  int rc = 0;
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!errors[i].empty()) {
      append_error(out, "invalid_request", errors[i]);
      rc = 2;
    } else if (!encode_errors[i].empty()) {
      append_error(out, "invalid_text", encode_errors[i]);
      rc = 2;
    } else {
      out += "{\"ids\":";
      json::append_int_array(out, ids[i]);
      out += "}\n";
    }
    if (out.size() > (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return rc;
}

int run_detokenize(const TokenizeArgs& a) {
  auto tok = load_or_report(a.tokenizer);
  if (!tok) return 2;
  simdjson::dom::parser parser;
  std::string line, out;
  int rc = 0;
  std::vector<int32_t> ids;
  while (std::getline(std::cin, line)) {
    simdjson::dom::element doc;
    simdjson::dom::array arr;
    ids.clear();
    std::string err;
    if (parser.parse(line).get(doc) != simdjson::SUCCESS) {
      err = "line is not valid JSON (or not valid UTF-8)";
    } else if (doc["ids"].get(arr) != simdjson::SUCCESS) {
      err = "line has no array field \"ids\"";
    } else {
      for (simdjson::dom::element e : arr) {
        int64_t v = 0;
        if (e.get(v) != simdjson::SUCCESS || v < INT32_MIN || v > INT32_MAX) {
          err = "\"ids\" must hold integers";
          break;
        }
        ids.push_back(static_cast<int32_t>(v));
      }
    }
    if (err.empty()) {
      auto text = tok->decode(ids, a.skip_special);
      if (text.is_ok()) {
        out += "{\"text\":";
        json::append_string(out, *text);
        out += "}\n";
      } else {
        append_error(out, "invalid_ids", text.status().to_string());
        rc = 2;
      }
    } else {
      append_error(out, "invalid_request", err);
      rc = 2;
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    out.clear();
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace

void add_tokenizer_commands(CLI::App& app, Runner* run) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* t = app.add_subcommand("tokenize",
                               "Encode JSON lines {\"text\": ...} from stdin to {\"ids\": [...]}");
  t->add_option("--tokenizer", args->tokenizer, "tokenizer.json file")->required();
  t->add_flag("--plain", args->plain, "Do not match added-token spellings (plain BPE)");
  t->add_option("--threads", args->threads, "Encoding threads")->check(CLI::Range(1, 256));
  t->callback([args, run] { *run = [args] { return run_tokenize(*args); }; });

  auto* d = app.add_subcommand("detokenize",
                               "Decode JSON lines {\"ids\": [...]} from stdin to {\"text\": ...}");
  d->add_option("--tokenizer", args->tokenizer, "tokenizer.json file")->required();
  d->add_flag("--skip-special", args->skip_special, "Drop special added tokens");
  d->callback([args, run] { *run = [args] { return run_detokenize(*args); }; });
}

}  // namespace fathom::cli
