// `fathom bench grammar`: compiles one grammar (JSON Schema, regex or GBNF) for a tokenizer's
// vocabulary and times token masks along a valid output tokenized as the model would emit it
// (--output, or else a text generated from the grammar by a seeded walk). Prints one JSON line:
// token_table_ms (the vocabulary's preparation), compile_ms, precompute_ms (all state masks, only
// with --precompute), mask_us_median and mask_us_p99 with the mask cache warm (a second matcher
// over the same compiled grammar), mask_us_median_cold (first matcher, masks computed on first
// use), tokens, and the states whose masks were computed with the memory they take. --ids-out
// writes the token ids the masks were timed along (a JSON array), so another engine can be timed
// along the same ones; --counts-out how many tokens each of those masks allows (a JSON array).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "grammar/token_table.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {

namespace {

struct BenchGrammarArgs {
  std::string tokenizer, schema, regex, gbnf, output, ids_out, counts_out,
      eos = "<｜end▁of▁sentence｜>";
  size_t vocab_size = 129280;
  bool precompute = false;
  int compact = 0;
  uint32_t seed = 1;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

// A text the grammar accepts, from a seeded walk that prefers structural tokens.
std::string generate(std::shared_ptr<const grammar::CompiledGrammar> g, uint32_t seed) {
  grammar::GrammarMatcher m(g);
  const grammar::TokenTable& t = g->tokens();
  std::vector<uint32_t> mask(t.mask_words());
  std::mt19937 rng(seed);
  std::string text;
  for (int step = 0; step < 400; ++step) {
    m.fill_next_token_bitmask(mask.data());
    std::vector<int32_t> allowed, structural;
    bool can_end = false;
    for (size_t id = 0; id < t.vocab_size(); ++id) {
      if (!(mask[id / 32] >> (id % 32) & 1)) continue;
      std::string_view b = t.bytes(int32_t(id));
      if (b.empty()) {
        can_end = true;
        continue;
      }
      allowed.push_back(int32_t(id));
      if (b.find_first_of("\"{}[],:") != std::string_view::npos) structural.push_back(int32_t(id));
    }
    if (can_end && (allowed.empty() || step > 40 || rng() % 4 == 0)) break;
    if (allowed.empty()) break;
    const auto& pool = (!structural.empty() && rng() % 3 != 0) ? structural : allowed;
    int32_t id = pool[rng() % pool.size()];
    if (!m.accept_token(id)) break;
    text += t.bytes(id);
  }
  return text;
}

int run_bench_grammar(const BenchGrammarArgs& a) {
  auto tok = Tokenizer::load_file(a.tokenizer);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", tok.status().to_string().c_str());
    return 2;
  }
  std::vector<int32_t> stops;
  if (int32_t eos = (*tok)->id_of(a.eos); eos >= 0) stops.push_back(eos);
  const auto t_table = std::chrono::steady_clock::now();
  auto table =
      grammar::TokenTable::create(**tok, std::max(a.vocab_size, (*tok)->vocab_size()), stops);
  if (!table.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", table.status().to_string().c_str());
    return 2;
  }
  const double token_table_ms = ms_since(t_table);
  grammar::GrammarSpec spec;
  std::string kind;
  if (!a.schema.empty()) {
    spec.kind = grammar::GrammarSpec::Kind::kJsonSchema;
    kind = "json_schema";
    if (!read_file(a.schema, spec.text)) {
      std::fprintf(stderr, "fathom: cannot read '%s'\n", a.schema.c_str());
      return 2;
    }
    if (a.compact) spec.json.whitespace = grammar::JsonSchemaOptions::Whitespace::kCompact;
  } else if (!a.gbnf.empty()) {
    spec.kind = grammar::GrammarSpec::Kind::kGbnf;
    kind = "gbnf";
    if (!read_file(a.gbnf, spec.text)) {
      std::fprintf(stderr, "fathom: cannot read '%s'\n", a.gbnf.c_str());
      return 2;
    }
  } else {
    spec.kind = grammar::GrammarSpec::Kind::kRegex;
    kind = "regex";
    spec.text = a.regex;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto g = grammar::build_grammar(spec);
  if (!g.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", g.status().to_string().c_str());
    return 2;
  }
  auto cg = grammar::CompiledGrammar::compile(g.value(), table.value());
  if (!cg.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", cg.status().to_string().c_str());
    return 2;
  }
  const double compile_ms = ms_since(t0);
  double precompute_ms = 0;
  if (a.precompute) {
    auto t1 = std::chrono::steady_clock::now();
    cg.value()->precompute();
    precompute_ms = ms_since(t1);
  }
  std::string output = a.output;
  if (!output.empty()) {
    if (!read_file(a.output, output)) {
      std::fprintf(stderr, "fathom: cannot read '%s'\n", a.output.c_str());
      return 2;
    }
  } else {
    // Generate with a separate compiled grammar so the timed one starts cold.
    auto gen = grammar::CompiledGrammar::compile(g.value(), table.value());
    output = generate(gen.value(), a.seed);
  }
  auto ids = (*tok)->encode_plain(output);
  if (!ids.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", ids.status().to_string().c_str());
    return 2;
  }
  if (!a.ids_out.empty()) {
    std::ofstream out(a.ids_out, std::ios::binary);
    out << '[';
    for (size_t i = 0; i < ids.value().size(); ++i) out << (i ? "," : "") << ids.value()[i];
    out << "]\n";
    if (!out) {
      std::fprintf(stderr, "fathom: cannot write '%s'\n", a.ids_out.c_str());
      return 2;
    }
  }
  std::vector<uint32_t> mask(table.value()->mask_words());
  std::vector<int> counts;
  auto run = [&](std::vector<double>& us) -> bool {
    grammar::GrammarMatcher m(cg.value());
    counts.clear();
    for (int32_t id : ids.value()) {
      auto a0 = std::chrono::steady_clock::now();
      m.fill_next_token_bitmask(mask.data());
      us.push_back(ms_since(a0) * 1000);
      if (!a.counts_out.empty()) {
        int c = 0;
        for (uint32_t w : mask) c += std::popcount(w);
        counts.push_back(c);
      }
      if (!m.accept_token(id)) return false;
    }
    return true;
  };
  std::vector<double> cold, warm;
  if (!run(cold) || !run(warm)) {
    std::fprintf(stderr, "fathom: the output is not accepted by the grammar\n");
    return 2;
  }
  if (!a.counts_out.empty()) {
    std::ofstream out(a.counts_out, std::ios::binary);
    out << '[';
    for (size_t i = 0; i < counts.size(); ++i) out << (i ? "," : "") << counts[i];
    out << "]\n";
  }
  std::sort(cold.begin(), cold.end());
  std::sort(warm.begin(), warm.end());
  auto pct = [](const std::vector<double>& v, double p) {
    return v.empty() ? 0.0 : v[std::min(v.size() - 1, size_t(double(v.size()) * p))];
  };
  std::printf(
      "{\"kind\":\"%s\",\"vocab_size\":%zu,\"token_table_ms\":%.1f,\"states\":%zu,"
      "\"compile_ms\":%.3f,"
      "\"precompute_ms\":%.3f,\"tokens\":%zu,\"mask_us_median\":%.2f,\"mask_us_p99\":%.2f,"
      "\"mask_us_median_cold\":%.2f,\"mask_us_p99_cold\":%.2f,\"cached_states\":%zu,"
      "\"cached_mask_bytes\":%zu}\n",
      kind.c_str(), table.value()->vocab_size(), token_table_ms, cg.value()->pda().states.size(),
      compile_ms, precompute_ms, ids.value().size(), pct(warm, 0.5), pct(warm, 0.99),
      pct(cold, 0.5), pct(cold, 0.99), cg.value()->cached_states(), cg.value()->cached_bytes());
  return 0;
}

}  // namespace

void add_grammar_bench_command(CLI::App& app, Runner* run) {
  CLI::App* bench = app.get_subcommand("bench");
  auto args = std::make_shared<BenchGrammarArgs>();
  auto* c = bench->add_subcommand("grammar", "Compile a grammar and time its token masks");
  c->add_option("--tokenizer", args->tokenizer, "tokenizer.json")->required();
  auto* s = c->add_option("--schema", args->schema, "JSON Schema file");
  auto* r = c->add_option("--regex", args->regex, "regular expression");
  auto* g = c->add_option("--gbnf", args->gbnf, "GBNF grammar file");
  s->excludes(r)->excludes(g);
  r->excludes(g);
  c->add_option("--output", args->output,
                "a valid output to time masks along (default: generated)");
  c->add_option("--ids-out", args->ids_out, "write the token ids masks are timed along (JSON)");
  c->add_option("--counts-out", args->counts_out,
                "write how many tokens each timed mask allows (JSON)");
  c->add_option("--vocab-size", args->vocab_size, "logits row size (default 129280)");
  c->add_option("--eos", args->eos, "stop token spelling");
  c->add_option("--seed", args->seed, "seed of the generated output");
  c->add_flag("--precompute", args->precompute, "compute every state's mask after compiling");
  c->add_flag("--compact", args->compact, "JSON Schema: no whitespace");
  c->callback([run, args, s, r, g]() {
    *run = [args, s, r, g]() {
      if (s->count() + r->count() + g->count() != 1) {
        std::fprintf(stderr, "fathom: give one of --schema, --regex, --gbnf\n");
        return 2;
      }
      return run_bench_grammar(*args);
    };
  });
}

}  // namespace fathom::cli
