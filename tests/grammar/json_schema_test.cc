// JSON Schema compiler specifics beyond the test suite: errors name the keyword they cannot
// enforce, integer ranges, whitespace policies, key exclusion for additional properties,
// choice grammars, and the compiled-grammar cache (including sharing across threads).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "grammar/compile_queue.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/test_helpers.h"

namespace fathom::grammar {
namespace {

using test::accepts;

std::shared_ptr<const CompiledGrammar> compile_schema(const char* s, JsonSchemaOptions o = {}) {
  auto g = json_schema_grammar(std::string_view(s), o);
  EXPECT_TRUE(g.is_ok()) << s << ": " << g.status().to_string();
  if (!g.is_ok()) return nullptr;
  return test::compile_or_die(g.value(), test::byte_tokens());
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"not", R"({"not": {"type": "string"}})"},
      {"patternProperties", R"({"type": "object", "patternProperties": {"^a": {}}})"},
      {"multipleOf", R"({"type": "integer", "multipleOf": 3})"},
      {"uniqueItems", R"({"type": "array", "uniqueItems": true})"},
      {"if", R"({"if": {"type": "string"}, "then": {"minLength": 2}})"},
      {"minProperties", R"({"type": "object", "minProperties": 2})"},
      {"contains", R"({"type": "array", "contains": {"type": "integer"}})"},
      {"minimum", R"({"type": "number", "minimum": 0.5})"},
      {"exclusiveMaximum", R"({"exclusiveMaximum": 2.5})"},
      {"oneOf", R"({"oneOf": [{"type": "integer"}, {"minimum": 2}]})"},
      {"format 'ipv6'", R"({"type": "string", "format": "ipv6"})"},
  };
  for (const auto& [kw, s] : cases) {
    auto g = json_schema_grammar(std::string_view(s));
    ASSERT_FALSE(g.is_ok()) << s;
    EXPECT_EQ(g.status().code(), StatusCode::kUnsupported) << g.status().to_string();
    EXPECT_NE(g.status().message().find(kw), std::string::npos) << g.status().message();
  }
  auto bad = json_schema_grammar(std::string_view(R"({"type": 5})"));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(json_schema_grammar(std::string_view("{not json")).is_ok());
  auto remote = json_schema_grammar(std::string_view(R"({"$ref": "http://x/y.json"})"));
  ASSERT_FALSE(remote.is_ok());
  EXPECT_EQ(remote.status().code(), StatusCode::kUnsupported);
}

TEST(JsonSchema, IntegerRanges) {
  struct Range {
    const char* schema;
    int64_t lo, hi;
  };
  for (const Range& r : std::vector<Range>{
           {R"({"type":"integer","minimum":-17,"maximum":243})", -17, 243},
           {R"({"type":"integer","exclusiveMinimum":9,"exclusiveMaximum":1001})", 10, 1000},
           {R"({"type":"integer","minimum":-250,"maximum":-3})", -250, -3},
           {R"({"type":"integer","minimum":1.5,"maximum":99.9})", 2, 99},
       }) {
    auto g = compile_schema(r.schema);
    ASSERT_TRUE(g);
    for (int64_t v = -1100; v <= 1100; ++v) {
      EXPECT_EQ(accepts(*g, std::to_string(v)), v >= r.lo && v <= r.hi) << r.schema << " " << v;
    }
    EXPECT_FALSE(accepts(*g, "007"));
    EXPECT_FALSE(accepts(*g, "-0"));
  }
  auto open = compile_schema(R"({"type":"integer","minimum":95})");
  ASSERT_TRUE(open);
  EXPECT_TRUE(accepts(*open, "95"));
  EXPECT_TRUE(accepts(*open, "1000000000000000000000"));
  EXPECT_FALSE(accepts(*open, "94"));
  EXPECT_FALSE(accepts(*open, "-100"));
}

TEST(JsonSchema, NumberRanges) {
  auto g = compile_schema(R"({"type":"number","minimum":-3,"exclusiveMaximum":10})");
  ASSERT_TRUE(g);
  for (const char* ok : {"-3", "-3.0", "-2.999", "-0.5", "0", "0.25", "9.99", "9", "5.000"}) {
    EXPECT_TRUE(accepts(*g, ok)) << ok;
  }
  for (const char* bad : {"-3.01", "-4", "10", "10.0", "11", "1e2", "-0", "01.5"}) {
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  }
  auto pos = compile_schema(R"({"type":"number","exclusiveMinimum":0})");
  ASSERT_TRUE(pos);
  EXPECT_TRUE(accepts(*pos, "0.001"));
  EXPECT_TRUE(accepts(*pos, "123456.5"));
  EXPECT_FALSE(accepts(*pos, "0"));
  EXPECT_FALSE(accepts(*pos, "0.000"));
  EXPECT_FALSE(accepts(*pos, "-1"));
}

// Pydantic-style schemas: $defs, allOf with a lone $ref, anyOf with null, formats.
TEST(JsonSchema, PydanticStyle) {
  auto g = compile_schema(R"({
    "$defs": {
      "Address": {"type": "object", "title": "Address",
                  "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                  "required": ["city", "zip"], "additionalProperties": false}
    },
    "type": "object",
    "properties": {
      "home": {"allOf": [{"$ref": "#/$defs/Address"}], "description": "where"},
      "work": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": null},
      "site": {"type": "string", "format": "uri"},
      "born": {"type": "string", "format": "date"}
    },
    "required": ["home"],
    "additionalProperties": false
  })",
                          {.whitespace = JsonSchemaOptions::Whitespace::kCompact});
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, R"({"home":{"city":"Oslo","zip":"01234"}})"));
  EXPECT_TRUE(accepts(
      *g,
      R"({"home":{"city":"A","zip":"12345"},"work":null,"site":"https://x.org/a?b=c","born":"1999-12-31"})"));
  EXPECT_FALSE(accepts(*g, R"({"home":{"city":"Oslo","zip":"0123"}})"));
  EXPECT_FALSE(accepts(*g, R"({"home":{"city":"A","zip":"12345"},"site":"no scheme"})"));
  EXPECT_FALSE(accepts(*g, R"({"home":{"city":"A","zip":"12345"},"born":"1999-13-01"})"));
}

// draft 2020-12 tuples (the Debian suite has no 2020-12 folder): prefixItems, items for the
// rest (false: none), minItems/maxItems across both.
TEST(JsonSchema, PrefixItems) {
  JsonSchemaOptions compact{.whitespace = JsonSchemaOptions::Whitespace::kCompact};
  auto closed = compile_schema(
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})",
      compact);
  ASSERT_TRUE(closed);
  EXPECT_TRUE(accepts(*closed, "[]"));
  EXPECT_TRUE(accepts(*closed, "[1]"));
  EXPECT_TRUE(accepts(*closed, R"([1,"a"])"));
  EXPECT_FALSE(accepts(*closed, R"([1,"a",2])"));
  EXPECT_FALSE(accepts(*closed, R"(["a"])"));
  auto rest = compile_schema(
      R"({"type":"array","prefixItems":[{"const":"x"}],"items":{"type":"boolean"},"minItems":2,"maxItems":3})",
      compact);
  ASSERT_TRUE(rest);
  EXPECT_TRUE(accepts(*rest, R"(["x",true])"));
  EXPECT_TRUE(accepts(*rest, R"(["x",true,false])"));
  EXPECT_FALSE(accepts(*rest, R"(["x"])"));
  EXPECT_FALSE(accepts(*rest, R"(["x",true,false,true])"));
  EXPECT_FALSE(accepts(*rest, R"(["x",1])"));
}

TEST(JsonSchema, WhitespacePolicies) {
  const char* s =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"],"additionalProperties":false})";
  auto compact = compile_schema(s, {.whitespace = JsonSchemaOptions::Whitespace::kCompact});
  auto bounded = compile_schema(s, {.max_whitespace = 8});
  ASSERT_TRUE(compact && bounded);
  EXPECT_TRUE(accepts(*compact, R"({"a":[1,2]})"));
  EXPECT_FALSE(accepts(*compact, R"({"a": [1, 2]})"));
  EXPECT_TRUE(accepts(*bounded, R"({"a": [1, 2]})"));
  EXPECT_TRUE(accepts(*bounded, "{\n  \"a\": [\n    1,\n    2\n  ]\n}"));
  EXPECT_TRUE(accepts(*bounded, "{\"a\":        []}"));
  EXPECT_FALSE(accepts(*bounded, "{\"a\":         []}"));  // 9 spaces
  EXPECT_FALSE(accepts(*bounded, R"({"a" : []})"));        // no space before ':'
  EXPECT_FALSE(accepts(*bounded, R"( {"a": []})"));        // nor before the value
}

TEST(JsonSchema, AdditionalPropertiesExcludeDeclaredNames) {
  auto g = compile_schema(
      R"({"type":"object","properties":{"id":{"type":"integer"},"idx":{"type":"string"}},"additionalProperties":{"type":"boolean"}})",
      {.whitespace = JsonSchemaOptions::Whitespace::kCompact});
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, R"({"id":1,"idx":"a","other":true})"));
  EXPECT_TRUE(accepts(*g, R"({"i":true,"idxx":false,"":true})"));
  EXPECT_FALSE(accepts(*g, R"({"id":1,"id":true})"));  // a declared name again
  EXPECT_FALSE(accepts(*g, R"({"idx":"a","id":1})"));  // declared members in order
  EXPECT_FALSE(accepts(*g, R"({"x":true,"id":1})"));   // extras after declared ones
  EXPECT_FALSE(accepts(*g, R"({"other":1})"));
}

TEST(JsonSchema, StringsAreCanonical) {
  auto g = compile_schema(R"({"type":"string","maxLength":3})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, R"("a\"\\")"));
  EXPECT_TRUE(accepts(*g, R"("\u0001é\n")"));
  EXPECT_FALSE(accepts(*g, R"("abcd")"));
  EXPECT_FALSE(accepts(*g, R"("\/")"));      // not canonical
  EXPECT_FALSE(accepts(*g, R"("\u00e9")"));  // not canonical: raw UTF-8
  auto p = compile_schema(R"({"type":"string","pattern":"^[0-9]{3}-x$"})");
  ASSERT_TRUE(p);
  EXPECT_TRUE(accepts(*p, R"("123-x")"));
  EXPECT_FALSE(accepts(*p, R"("123-xy")"));
  auto search = compile_schema(R"({"type":"string","pattern":"a+b"})");
  ASSERT_TRUE(search);
  EXPECT_TRUE(accepts(*search, R"("xxaab\"")"));
  EXPECT_FALSE(accepts(*search, R"("ba")"));
}

TEST(Choice, ExactlyOneOfTheStrings) {
  auto g = choice_grammar({"yes", "no", "maybe not"});
  ASSERT_TRUE(g.is_ok());
  auto cg = test::compile_or_die(g.value(), test::byte_tokens());
  EXPECT_TRUE(accepts(*cg, "yes"));
  EXPECT_TRUE(accepts(*cg, "maybe not"));
  EXPECT_FALSE(accepts(*cg, "maybe"));
  EXPECT_FALSE(accepts(*cg, "yesno"));
  EXPECT_FALSE(choice_grammar({}).is_ok());
}

TEST(GrammarCache, LruByCanonicalText) {
  GrammarCache cache(test::byte_tokens(), 2);
  GrammarSpec a{.kind = GrammarSpec::Kind::kJsonSchema, .text = R"({"type":"integer"})"};
  GrammarSpec a2{.kind = GrammarSpec::Kind::kJsonSchema,
                 .text = R"({ "type" : "integer", "title": "same grammar" })"};
  GrammarSpec b{.kind = GrammarSpec::Kind::kRegex, .text = "[ab]+"};
  GrammarSpec c{.kind = GrammarSpec::Kind::kChoice, .choices = {"x", "y"}};
  auto ga = cache.get(a);
  ASSERT_TRUE(ga.is_ok());
  auto ga2 = cache.get(a2);
  ASSERT_TRUE(ga2.is_ok());
  EXPECT_EQ(ga.value().get(), ga2.value().get());
  EXPECT_EQ(cache.hits(), 1u);
  ASSERT_TRUE(cache.get(b).is_ok());
  ASSERT_TRUE(cache.get(c).is_ok());  // evicts a
  EXPECT_EQ(cache.size(), 2u);
  auto again = cache.get(a);
  ASSERT_TRUE(again.is_ok());
  EXPECT_NE(again.value().get(), ga.value().get());
  GrammarSpec bad{.kind = GrammarSpec::Kind::kRegex, .text = "(?=x)"};
  EXPECT_EQ(cache.get(bad).status().code(), StatusCode::kUnsupported);
}

// A compile whose CancelToken is raised (its client left) stops with kCancelled and caches
// nothing: raised before it starts, or from another thread while the subset construction of
// a regex that would otherwise run for seconds (until its "too large" error) is under way.
// The same spec compiles later for a caller that stays, and a cached grammar needs no work.
TEST(GrammarCache, CancelledCompilesStopAndAreNotCached) {
  GrammarCache cache(test::byte_tokens(), 8);
  GrammarSpec small{.kind = GrammarSpec::Kind::kRegex, .text = "[ab]+"};
  CancelToken raised;
  raised.cancel();
  EXPECT_EQ(cache.get(small, &raised).status().code(), StatusCode::kCancelled);
  EXPECT_EQ(cache.cancelled(), 1u);
  EXPECT_EQ(cache.size(), 0u);
  auto absent = cache.find(small);  // find never compiles
  ASSERT_TRUE(absent.is_ok());
  EXPECT_EQ(absent.value(), nullptr);
  ASSERT_TRUE(cache.get(small).is_ok());
  EXPECT_TRUE(cache.get(small, &raised).is_ok());  // a hit: nothing to give up
  auto found = cache.find(small);
  ASSERT_TRUE(found.is_ok());
  EXPECT_NE(found.value(), nullptr);
  EXPECT_EQ(cache.hits(), 2u);
  GrammarSpec malformed{.kind = GrammarSpec::Kind::kRegex, .text = "(ab"};
  EXPECT_FALSE(cache.find(malformed).is_ok());

  GrammarSpec huge{.kind = GrammarSpec::Kind::kRegex, .text = "((a{1,100}){1,100}){1,100}"};
  CancelToken later;
  std::thread raiser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    later.cancel();
  });
  auto r = cache.get(huge, &later);
  raiser.join();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().to_string();
  EXPECT_EQ(cache.cancelled(), 2u);
  EXPECT_EQ(cache.size(), 1u);
}

// A grammar too large to compile is remembered: asking again (get or find) gives the same
// error without another compile, which took seconds of a compile thread each time.
TEST(GrammarCache, RemembersGrammarsTooLargeToCompile) {
  CompileOptions small;
  small.limits.max_subset_states = 2'000'000;
  GrammarCache cache(test::byte_tokens(), 8, small);
  GrammarSpec huge{.kind = GrammarSpec::Kind::kRegex, .text = "((a{1,100}){1,100}){1,100}"};
  auto first = cache.get(huge);
  ASSERT_FALSE(first.is_ok());
  EXPECT_EQ(first.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(cache.misses(), 1u);
  auto again = cache.get(huge);
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().message(), first.status().message());
  auto found = cache.find(huge);
  ASSERT_FALSE(found.is_ok());
  EXPECT_EQ(found.status().message(), first.status().message());
  EXPECT_EQ(cache.misses(), 1u);  // no second compile
  EXPECT_EQ(cache.size(), 0u);
}

// The order in which a queue answers jobs, a letter each.
struct AnswerOrder {
  std::mutex mu;
  std::condition_variable cv;
  std::string order;  // guarded by mu (read once the queue is gone)
  CompileQueue::Done done(char job) {
    return [this, job](Result<std::shared_ptr<const CompiledGrammar>>) {
      std::lock_guard<std::mutex> lock(mu);
      order += job;
      cv.notify_all();
    };
  }
  void wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return order.size() == n; });
  }
};

std::shared_ptr<const PreparedGrammar> prepared_regex(const char* regex) {
  auto g = prepare_grammar(GrammarSpec{.kind = GrammarSpec::Kind::kRegex, .text = regex});
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return std::move(*g);
}

// The compile queue runs jobs in order on its own thread and answers each once: a job whose
// token is raised while it runs stops (kCancelled), one raised before its turn is answered
// kCancelled without compiling, and the rest compile into the cache.
TEST(CompileQueue, AnswersInOrderAndSkipsCancelledJobs) {
  GrammarCache cache(test::byte_tokens(), 8);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<char, StatusCode>> answers;
  auto done = [&](char job) {
    return [&, job](Result<std::shared_ptr<const CompiledGrammar>> r) {
      std::lock_guard<std::mutex> lock(mu);
      answers.emplace_back(job, r.is_ok() ? StatusCode::kOk : r.status().code());
      cv.notify_all();
    };
  };
  auto spec = [](const char* regex) { return prepared_regex(regex); };
  auto huge = std::make_shared<CancelToken>(), skipped = std::make_shared<CancelToken>();
  {
    CompileQueue queue(cache, 1);
    queue.submit(spec("((a{1,100}){1,100}){1,100}"), huge, done('a'));
    queue.submit(spec("[ab]+"), skipped, done('b'));
    queue.submit(spec("[cd]+"), nullptr, done('c'));
    while (queue.waiting() > 2) std::this_thread::yield();  // 'a' is compiling
    skipped->cancel();
    EXPECT_EQ(queue.waiting(), 1u);  // a job whose client left is not waiting any more
    huge->cancel();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return answers.size() == 3; });
    EXPECT_EQ(queue.skipped(), 1u);
  }
  const std::vector<std::pair<char, StatusCode>> want = {
      {'a', StatusCode::kCancelled}, {'b', StatusCode::kCancelled}, {'c', StatusCode::kOk}};
  EXPECT_EQ(answers, want);
  EXPECT_EQ(cache.misses(), 2u);  // 'b' never compiled
  EXPECT_EQ(cache.size(), 1u);
}

// Clients share the compile threads: a client's jobs wait behind a job another client
// submitted later when that client has had fewer compiles started (here none), so one
// client's many grammars do not hold up another's new one.
TEST(CompileQueue, ClientsTakeTurns) {
  GrammarCache cache(test::byte_tokens(), 8);
  AnswerOrder answers;
  auto done = [&](char job) { return answers.done(job); };
  auto spec = [](const char* regex) { return prepared_regex(regex); };
  auto huge = std::make_shared<CancelToken>();
  {
    CompileQueue queue(cache, 1);
    queue.submit(spec("((a{1,100}){1,100}){1,100}"), huge, done('1'), "a");
    queue.submit(spec("[ab]+"), nullptr, done('2'), "a");
    queue.submit(spec("[cd]+"), nullptr, done('3'), "a");
    while (queue.waiting() > 2) std::this_thread::yield();  // '1' is compiling
    queue.submit(spec("[ef]+"), nullptr, done('b'), "b");
    queue.submit(spec("[gh]+"), nullptr, done('c'), "b");
    huge->cancel();
    answers.wait_for(5);
  }
  // First in, first out would give "123bc".
  EXPECT_EQ(answers.order, "1b2c3");
}

// Jobs of one grammar share one compile: three clients asking for the same grammar while it
// waits get the one result, from one compile; a job joining a compile under way gets its
// result too, and the first job's client leaving does not stop (or restart) the compile the
// second still waits for: it stops only when every job's token is raised.
TEST(CompileQueue, JobsOfOneGrammarShareItsCompile) {
  GrammarCache cache(test::byte_tokens(), 8);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Result<std::shared_ptr<const CompiledGrammar>>> answers;
  auto done = [&](Result<std::shared_ptr<const CompiledGrammar>> r) {
    std::lock_guard<std::mutex> lock(mu);
    answers.push_back(std::move(r));
    cv.notify_all();
  };
  auto wait_for = [&](size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return answers.size() == n; });
  };
  const char* huge = "((a{1,100}){1,100}){1,100}";
  {
    CompileQueue queue(cache, 1);
    auto first = std::make_shared<CancelToken>(), second = std::make_shared<CancelToken>();
    queue.submit(prepared_regex(huge), first, done, "a");
    while (queue.waiting() > 0) std::this_thread::yield();  // compiling
    queue.submit(prepared_regex(huge), second, done, "b");  // joins the compile under way
    queue.submit(prepared_regex("[ab]+"), nullptr, done, "a");
    queue.submit(prepared_regex("[ab]+"), nullptr, done, "b");
    queue.submit(prepared_regex("[ab]+"), nullptr, done, "c");
    EXPECT_EQ(queue.shared(), 3u);
    EXPECT_EQ(queue.waiting(), 1u);
    // The first job's client leaves: the compile goes on for the second (the watcher looks
    // every 100 ms), and stops once that one leaves too.
    first->cancel();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(cache.cancelled(), 0u);
    EXPECT_EQ(cache.misses(), 1u);
    second->cancel();
    wait_for(5);
  }
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_FALSE(answers[i].is_ok());
    EXPECT_EQ(answers[i].status().code(), StatusCode::kCancelled);
  }
  for (size_t i = 2; i < 5; ++i) {
    ASSERT_TRUE(answers[i].is_ok()) << answers[i].status().to_string();
    EXPECT_EQ(answers[i].value(), answers[2].value());
  }
  EXPECT_EQ(cache.misses(), 2u);  // the huge regex once, "[ab]+" once
  EXPECT_EQ(cache.cancelled(), 1u);
  EXPECT_EQ(cache.size(), 1u);
}

// A job that joins another client's waiting compile also waits in its own client's turn, and
// whichever turn comes first starts the compile: joining never makes a job wait longer than
// it would have alone.
TEST(CompileQueue, AJobThatJoinsStartsInItsOwnTurn) {
  GrammarCache cache(test::byte_tokens(), 8);
  AnswerOrder answers;
  auto done = [&](char job) { return answers.done(job); };
  auto huge = std::make_shared<CancelToken>();
  {
    CompileQueue queue(cache, 1);
    queue.submit(prepared_regex("((a{1,100}){1,100}){1,100}"), huge, done('h'), "a");
    while (queue.waiting() > 0) std::this_thread::yield();  // 'h' is compiling
    queue.submit(prepared_regex("[ab]+"), nullptr, done('x'), "a");
    queue.submit(prepared_regex("[cd]+"), nullptr, done('y'), "a");
    queue.submit(prepared_regex("[cd]+"), nullptr, done('z'), "b");
    EXPECT_EQ(queue.waiting(), 2u);
    huge->cancel();
    answers.wait_for(4);
  }
  // "[cd]+" starts in b's turn, before a's "[ab]+"; waiting in a's turn alone gives "hxyz".
  EXPECT_EQ(answers.order, "hyzx");
  EXPECT_EQ(cache.misses(), 3u);
}

// Destroying the queue stops the compile under way (raising its token) and answers the jobs
// still waiting kCancelled; nothing is left unanswered.
TEST(CompileQueue, DestructionCancelsRunningAndWaitingJobs) {
  GrammarCache cache(test::byte_tokens(), 8);
  std::atomic<int> cancelled_answers{0};
  auto done = [&](Result<std::shared_ptr<const CompiledGrammar>> r) {
    if (!r.is_ok() && r.status().code() == StatusCode::kCancelled) ++cancelled_answers;
  };
  auto running = std::make_shared<CancelToken>();
  {
    CompileQueue queue(cache, 1);
    queue.submit(prepared_regex("((a{1,100}){1,100}){1,100}"), running, done);
    queue.submit(prepared_regex("[ab]+"), nullptr, done);
    while (queue.waiting() > 1) std::this_thread::yield();
  }
  EXPECT_EQ(cache.cancelled(), 1u);  // the running compile stopped
  EXPECT_EQ(cancelled_answers.load(), 2);
  EXPECT_EQ(cache.size(), 0u);
}

// The cache also holds at most max_bytes of automata: a large grammar pushes the least
// recently used out (one larger than the bound is kept alone).
TEST(GrammarCache, BoundedByBytes) {
  GrammarSpec small{.kind = GrammarSpec::Kind::kRegex, .text = "[ab]+"};
  GrammarSpec other{.kind = GrammarSpec::Kind::kRegex, .text = "[cd]+"};
  std::string members;
  for (int i = 0; i < 60; ++i) members += (i ? ", " : "") + ("\"p" + std::to_string(i) + "\": {}");
  GrammarSpec large{.kind = GrammarSpec::Kind::kJsonSchema,
                    .text = R"({"type": "object", "properties": {)" + members + "}}"};
  GrammarCache probe(test::byte_tokens(), 8);
  ASSERT_TRUE(probe.get(small).is_ok());
  const size_t small_bytes = probe.bytes();
  ASSERT_TRUE(probe.get(large).is_ok());
  const size_t large_bytes = probe.bytes() - small_bytes;
  ASSERT_GT(large_bytes, 10 * small_bytes);
  EXPECT_EQ(probe.size(), 2u);

  GrammarCache cache(test::byte_tokens(), 8, {}, large_bytes + small_bytes / 2);
  ASSERT_TRUE(cache.get(small).is_ok());
  ASSERT_TRUE(cache.get(other).is_ok());
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_TRUE(cache.get(large).is_ok());  // pushes out both small ones
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), large_bytes);
  // Token masks computed after a grammar was cached count too: once the large grammar's masks
  // pass the bound, the next lookup pushes it out.
  GrammarCache masks(test::byte_tokens(), 8, {}, large_bytes + small_bytes + 64);
  auto l = masks.get(large);
  ASSERT_TRUE(l.is_ok());
  ASSERT_TRUE(masks.get(small).is_ok());
  EXPECT_EQ(masks.size(), 2u);
  l.value()->precompute();
  ASSERT_GT(l.value()->cached_bytes(), 64u);
  EXPECT_EQ(masks.bytes(), large_bytes + small_bytes + l.value()->cached_bytes());
  ASSERT_TRUE(masks.find(small).is_ok());
  EXPECT_EQ(masks.size(), 1u);
  EXPECT_EQ(masks.bytes(), small_bytes);
  GrammarCache tiny(test::byte_tokens(), 8, {}, 1);
  ASSERT_TRUE(tiny.get(large).is_ok());
  EXPECT_EQ(tiny.size(), 1u);
  ASSERT_TRUE(tiny.get(small).is_ok());
  EXPECT_EQ(tiny.size(), 1u);
  EXPECT_EQ(tiny.bytes(), small_bytes);
}

// The canonical text (the cache's key) of an object with many optional members grows linearly
// with them (each member's tail, shared by every "first member" alternative, is printed once:
// it was quadratic, 40 s for 1,000 members), and still tells apart objects that differ only
// in their last member.
TEST(GrammarCache, CanonicalTextIsLinearInTheGrammar) {
  auto text = [](int members, const char* last_type) {
    std::string s = R"({"type": "object", "properties": {)";
    for (int i = 0; i < members; ++i)
      s += "\"p" + std::to_string(i) + "\": {\"type\": \"" +
           (i + 1 == members ? last_type : "string") + "\"}" + (i + 1 < members ? ", " : "}}");
    auto g = json_schema_grammar(std::string_view(s));
    EXPECT_TRUE(g.is_ok()) << g.status().to_string();
    return g.is_ok() ? g.value().to_string() : std::string();
  };
  const size_t small = text(50, "string").size(), large = text(400, "string").size();
  EXPECT_LT(large, small * 12) << small << " -> " << large;  // 8x the members
  EXPECT_NE(text(400, "string"), text(400, "integer"));
  EXPECT_EQ(text(400, "integer"), text(400, "integer"));
  // Compiled, the object still takes any subset of its members in order, and nothing else.
  auto cg = compile_schema(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},)"
      R"("c":{"type":"integer"},"d":{"type":"integer"},"e":{"type":"integer"},)"
      R"("f":{"type":"integer"},"g":{"type":"integer"},"h":{"type":"integer"}}})");
  ASSERT_TRUE(cg);
  EXPECT_TRUE(accepts(*cg, R"({"a": 1, "h": 8})"));
  EXPECT_TRUE(accepts(*cg, R"({"c": 3, "d": 4, "g": 7})"));
  EXPECT_TRUE(accepts(*cg, R"({})"));
  EXPECT_FALSE(accepts(*cg, R"({"d": 4, "c": 3})"));
  EXPECT_FALSE(accepts(*cg, R"({"a": 1, "a": 1})"));
}

// One compiled grammar, several matchers on several threads at once (its mask cache fills
// concurrently): every thread sees the same masks.
TEST(CompiledGrammar, SharedAcrossThreads) {
  auto cg = compile_schema(
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{}}}})");
  ASSERT_TRUE(cg);
  const std::string text = R"({"a": "hello", "b": [1, {"c": [true, null]}, "d"]})";
  auto run = [&](std::vector<std::vector<uint32_t>>& out) {
    GrammarMatcher m(cg);
    std::vector<uint32_t> mask(m.mask_words());
    for (char c : text) {
      m.fill_next_token_bitmask(mask.data());
      out.push_back(mask);
      if (!m.accept_token(uint8_t(c))) return;
    }
  };
  std::vector<std::vector<std::vector<uint32_t>>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&run, &r] { run(r); });
  for (auto& t : threads) t.join();
  ASSERT_EQ(results[0].size(), text.size());
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]);
}

}  // namespace
}  // namespace fathom::grammar
