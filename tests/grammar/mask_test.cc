// Token masks on the real DeepSeek vocabulary (129,280 ids): along random walks through
// several grammars (flat and recursive JSON schemas, any-JSON, a GBNF grammar, a regex), the
// mask the fast path computes (precomputed per-state sets plus run-time checks of uncertain
// tokens) equals a slow reference mask built by feeding every token's bytes to the matcher
// and rolling back. Also rollback and jump-forward on the same walks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/test_helpers.h"
#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace fathom::grammar {
namespace {

const char* kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "kind": {"enum": ["a", "b", 1, null]},
    "extra": {}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})";

const char* kTreeSchema = R"({
  "$ref": "#/definitions/node",
  "definitions": {
    "node": {
      "type": "object",
      "properties": {
        "value": {"type": "integer"},
        "label": {"type": "string", "pattern": "^[a-z]+$"},
        "children": {"type": "array", "items": {"$ref": "#/definitions/node"}}
      },
      "required": ["value"],
      "additionalProperties": false
    }
  }
})";

const char* kArithmetic = R"G(
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" ws expr ws ")"
ws     ::= [ ]?
)G";

std::vector<uint32_t> reference_mask(GrammarMatcher& m, const TokenTable& t) {
  std::vector<uint32_t> ref(t.mask_words(), 0);
  const bool can_end = m.can_terminate();
  for (size_t id = 0; id < t.vocab_size(); ++id) {
    bool ok = false;
    if (std::find(t.stop_ids().begin(), t.stop_ids().end(), int32_t(id)) != t.stop_ids().end()) {
      ok = can_end;
    } else if (t.usable(int32_t(id))) {
      ok = m.accept_bytes(t.bytes(int32_t(id)));
      if (ok) {
        EXPECT_TRUE(m.rollback(1));
      }
    }
    if (ok) ref[id / 32] |= 1u << (id % 32);
  }
  return ref;
}

int checked_steps_ = 0;

void check_walks(const Grammar& g, int walks, int steps, uint32_t seed,
                 const std::string& guide_text) {
  auto tokens = test::deepseek_tokens();
  std::vector<int32_t> guide = fathom::test::deepseek().encode_plain(guide_text).value();
  auto cg = test::compile_or_die(g, tokens);
  ASSERT_TRUE(cg);
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(tokens->mask_words());
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(cg);
    std::string text;
    bool on_guide = true;
    size_t guide_pos = 0;
    struct Print {
      const std::string& t;
      ~Print() { std::printf("  walk: %s\n", t.substr(0, 160).c_str()); }
    } print{text};
    for (int step = 0; step < steps; ++step) {
      m.fill_next_token_bitmask(mask.data());
      std::vector<uint32_t> ref = reference_mask(m, *tokens);
      if (mask != ref) {
        for (size_t id = 0; id < tokens->vocab_size(); ++id) {
          bool a = mask[id / 32] >> (id % 32) & 1, b = ref[id / 32] >> (id % 32) & 1;
          if (a != b) {
            ADD_FAILURE() << "after '" << text << "': token " << id << " '"
                          << tokens->bytes(int32_t(id)) << "' fast=" << a << " reference=" << b;
            break;
          }
        }
        return;
      }
      std::vector<int32_t> allowed, structural;
      for (size_t id = 0; id < tokens->vocab_size(); ++id) {
        if (mask[id / 32] >> (id % 32) & 1) {
          allowed.push_back(int32_t(id));
          std::string_view b = tokens->bytes(int32_t(id));
          if (b.empty() || b.find_first_of("\"{}[],:()+*-/@.") != std::string_view::npos) {
            structural.push_back(int32_t(id));
          }
        }
      }
      ASSERT_FALSE(allowed.empty()) << "dead end after '" << text << "'";
      const std::vector<int32_t>& pool =
          (!structural.empty() && rng() % 3 != 0) ? structural : allowed;
      int32_t pick = pool[rng() % pool.size()];
      // Follow the guide (a valid output, tokenized as the model would) while on it.
      if (w == 0 && on_guide && guide_pos < guide.size() && rng() % 8 != 0) {
        pick = guide[guide_pos];
      }
      if (w == 0 && on_guide && guide_pos < guide.size() && pick == guide[guide_pos]) {
        ++guide_pos;
      } else {
        on_guide = false;
      }
      // Jump-forward: forced bytes must be what every allowed token starts with.
      std::string forced = m.find_jump_forward_string();
      if (!forced.empty()) {
        for (int32_t id : allowed) {
          std::string_view b = tokens->bytes(id);
          size_t n = std::min(b.size(), forced.size());
          ASSERT_EQ(b.substr(0, n), std::string_view(forced).substr(0, n))
              << "jump-forward '" << forced << "' after '" << text << "'";
        }
      }
      if (tokens->bytes(pick).empty()) {  // the stop token
        EXPECT_TRUE(m.accept_token(pick));
        EXPECT_TRUE(m.is_terminated());
        break;
      }
      ASSERT_TRUE(m.accept_token(pick));
      text += tokens->bytes(pick);
      checked_steps_++;
      // Occasionally roll back two tokens and redo them.
      if (step > 2 && rng() % 5 == 0) {
        std::vector<uint32_t> before(mask.size());
        m.fill_next_token_bitmask(before.data());
        ASSERT_TRUE(m.rollback(1));
        ASSERT_TRUE(m.accept_token(pick));
        std::vector<uint32_t> after(mask.size());
        m.fill_next_token_bitmask(after.data());
        ASSERT_EQ(before, after);
      }
    }
  }
}

Grammar schema(const char* s) {
  auto g = json_schema_grammar(std::string_view(s));
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? std::move(g).value() : Grammar();
}

const char* kPersonOutput =
    R"({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["math", "poetry"], "kind": "a", "extra": {"born": 1815, "notes": [1, 2.5, "x"]}})";
const char* kTreeOutput =
    R"({"value": 1, "label": "root", "children": [{"value": 2, "children": []}, {"value": 3, "label": "leaf", "children": [{"value": 4}]}]})";
const char* kAnyOutput =
    R"({"model": "deepseek", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello, world!"}}], "usage": {"prompt_tokens": 12, "completion_tokens": 5}})";

TEST(MaskReference, PersonSchema) { check_walks(schema(kPersonSchema), 3, 60, 1, kPersonOutput); }
TEST(MaskReference, RecursiveSchema) { check_walks(schema(kTreeSchema), 3, 60, 2, kTreeOutput); }
TEST(MaskReference, AnyJson) { check_walks(schema("{}"), 3, 60, 3, kAnyOutput); }
TEST(MaskReference, Gbnf) {
  auto g = gbnf_grammar(kArithmetic);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  check_walks(g.value(), 3, 30, 4, "(12+3)*4-(5/(6+7))");
}
TEST(MaskReference, Regex) {
  auto g = regex_grammar("[a-z]{2,5}(-[0-9]{1,3})?@example\\.(com|org)");
  ASSERT_TRUE(g.is_ok());
  check_walks(g.value(), 3, 15, 5, "abc-12@example.org");
}

// Mask timing along a valid output tokenized as the model would emit it (printed; the bound
// asserted is loose because test machines are shared).
struct Timing {
  double compile_ms, cold_median_us, median_us, p99_us;
};

Timing time_masks(const Grammar& g, const std::string& output) {
  auto tokens = test::deepseek_tokens();
  const Tokenizer& tok = fathom::test::deepseek();
  auto t0 = std::chrono::steady_clock::now();
  auto cg = test::compile_or_die(g, tokens);
  auto t1 = std::chrono::steady_clock::now();
  auto ids = tok.encode_plain(output);
  EXPECT_TRUE(ids.is_ok());
  std::vector<uint32_t> mask(tokens->mask_words());
  auto run = [&]() {
    std::vector<double> us;
    GrammarMatcher m(cg);
    for (int32_t id : ids.value()) {
      auto a = std::chrono::steady_clock::now();
      m.fill_next_token_bitmask(mask.data());
      auto b = std::chrono::steady_clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
      EXPECT_TRUE(mask[id / 32] >> (id % 32) & 1) << "token " << id << " masked out";
      EXPECT_TRUE(m.accept_token(id));
    }
    EXPECT_TRUE(m.can_terminate());
    std::sort(us.begin(), us.end());
    return us;
  };
  std::vector<double> cold = run();
  std::vector<double> warm = run();
  return Timing{std::chrono::duration<double, std::milli>(t1 - t0).count(), cold[cold.size() / 2],
                warm[warm.size() / 2], warm[std::min(warm.size() - 1, warm.size() * 99 / 100)]};
}

TEST(MaskTiming, TypicalSchemas) {
  struct Case {
    const char* name;
    Grammar g;
    std::string output;
  };
  std::vector<Case> cases;
  cases.push_back({"person", schema(kPersonSchema), kPersonOutput});
  cases.push_back({"tree", schema(kTreeSchema), kTreeOutput});
  cases.push_back({"any-json", schema("{}"), kAnyOutput});
  for (Case& c : cases) {
    Timing t = time_masks(c.g, c.output);
    std::printf(
        "%-9s compile %.2f ms, mask median %.1f us (first pass, lazy cache: %.1f us), "
        "p99 %.1f us\n",
        c.name, t.compile_ms, t.median_us, t.cold_median_us, t.p99_us);
    EXPECT_LT(t.median_us, 500.0) << c.name;
  }
}

}  // namespace
}  // namespace fathom::grammar
