// Port of the official V4/V4.1 completion parser (the same code in both encoders, with the
// dialect's DSML tag names). Works on UTF-8 bytes: every stop string is literal, so byte
// offsets find what the Python code's character offsets find.
#include "core/utf8.h"
#include "prompt/reference.h"
#include "tokenizer/unicode_props.h"

namespace fathom::prompt {
namespace {

using pyjson::Value;

Status reject(std::string m) { return invalid_argument(std::move(m)); }

struct Stop {
  size_t next = 0;  // index after the stop (or text end)
  std::string_view content;
  int which = -1;  // index into stops, or -1
};

// _read_until_stop: the earliest stop (the first listed on a tie).
Stop read_until_stop(std::string_view text, size_t index,
                     std::initializer_list<std::string_view> stops) {
  size_t best = text.size();
  int which = -1, k = 0;
  std::string_view matched;
  for (std::string_view s : stops) {
    size_t pos = text.find(s, index);
    if (pos != std::string_view::npos && pos < best) {
      best = pos;
      which = k;
      matched = s;
    }
    ++k;
  }
  if (which >= 0) return {best + matched.size(), text.substr(index, best - index), which};
  return {text.size(), text.substr(index), -1};
}

// Python's \s on str: Unicode whitespace (str.isspace), which also has U+001C..U+001F.
bool py_space(uint32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || (tok::char_flags(cp) & tok::kSpace);
}

// re.findall(r'^\s*name="(.*?)">\n$', s, DOTALL) with exactly one match.
bool match_invoke_name(std::string_view s, std::string* name) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    uint32_t cp = utf8::decode_at(s, i, &len);
    if (!py_space(cp)) break;
    i += len;
  }
  // \s* is greedy but may give back characters; `name="` starts with 'n', never a space,
  // so the only possible split is after all leading whitespace.
  constexpr std::string_view kOpen = "name=\"";
  if (s.compare(i, kOpen.size(), kOpen) != 0) return false;
  size_t start = i + kOpen.size();
  // `">\n` then end, or `">\n` then a final "\n" ($ before a trailing newline).
  for (size_t tail : {size_t(3), size_t(4)}) {
    if (s.size() < start + tail) continue;
    std::string_view suffix = s.substr(s.size() - tail);
    if (suffix == (tail == 3 ? std::string_view("\">\n") : std::string_view("\">\n\n"))) {
      *name = std::string(s.substr(start, s.size() - tail - start));
      return true;
    }
  }
  return false;
}

// re.findall(r'^ name="(.*?)" string="(true|false)">(.*?)<$', s, DOTALL), one match.
bool match_parameter(std::string_view s, std::string* name, bool* is_string, std::string* value) {
  constexpr std::string_view kOpen = " name=\"";
  if (s.substr(0, kOpen.size()) != kOpen) return false;
  // The value ends at a final '<' (or '<' + final "\n").
  size_t value_end;
  if (!s.empty() && s.back() == '<') {
    value_end = s.size() - 1;
  } else if (s.size() >= 2 && s.substr(s.size() - 2) == "<\n") {
    value_end = s.size() - 2;
  } else {
    return false;
  }
  // The name is lazy: the first `" string="true">` / `" string="false">` after it.
  size_t best = std::string_view::npos;
  bool best_true = false;
  for (bool t : {true, false}) {
    std::string_view marker = t ? "\" string=\"true\">" : "\" string=\"false\">";
    size_t p = s.find(marker, kOpen.size());
    while (p != std::string_view::npos && p + marker.size() > value_end) p = std::string_view::npos;
    if (p != std::string_view::npos && p < best) {
      best = p;
      best_true = t;
    }
  }
  if (best == std::string_view::npos) return false;
  size_t vstart = best + (best_true ? 16 : 17);
  *name = std::string(s.substr(kOpen.size(), best - kOpen.size()));
  *is_string = best_true;
  *value = std::string(s.substr(vstart, value_end - vstart));
  return true;
}

}  // namespace

Result<Value> parse_completion_reference(std::string_view text, bool thinking, bool v41) {
  const std::string dsml = "｜DSML｜";
  const std::string sp = v41 ? " " : "";
  const std::string block = dsml + (v41 ? " calls" : "tool_calls");
  const std::string calls_start = "\n\n<" + block, calls_end = "</" + block + ">";
  const std::string invoke_start = "<" + dsml + sp + "invoke",
                    invoke_end = "</" + dsml + sp + "invoke";
  const std::string param_start = "<" + dsml + sp + "parameter",
                    param_end = "/" + dsml + sp + "parameter";
  constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";

  std::string_view reasoning, content;
  size_t index = 0;
  Value tool_calls = Value::array();
  if (thinking) {
    Stop r = read_until_stop(text, index, {"</think>", calls_start});
    if (r.which != 0) return reject("Invalid thinking format: missing </think>");
    reasoning = r.content;
    index = r.next;
  }
  Stop r = read_until_stop(text, index, {kEos, calls_start});
  content = r.content;
  index = r.next;
  int stop = r.which;  // 0 = EOS, 1 = tool calls, -1 = none
  if (stop == -1) return reject("Invalid format: missing EOS token");
  if (stop == 1) {
    // parse_tool_calls
    bool at_end_token = false;
    int last = -1;
    while (index < text.size()) {
      Stop a = read_until_stop(text, index, {invoke_start, calls_end});
      index = a.next;
      if (a.content != ">\n") return reject("Tool call format error: expected '>\\n'");
      if (a.which == 1) {
        at_end_token = true;
        break;
      }
      if (a.which == -1) return reject("Missing special token in tool calls");
      Stop n = read_until_stop(text, index, {param_start, invoke_end});
      index = n.next;
      std::string name;
      if (!match_invoke_name(n.content, &name)) return reject("Tool name format error");
      std::vector<std::string> keys;
      std::string args = "{";
      int st = n.which;
      while (st == 0) {
        Stop p = read_until_stop(text, index, {param_end});
        index = p.next;
        std::string pname, pvalue;
        bool is_str = false;
        if (!match_parameter(p.content, &pname, &is_str, &pvalue))
          return reject("Parameter format error");
        for (const auto& k : keys)
          if (k == pname) return reject("Duplicate parameter name: '" + pname + "'");
        if (!keys.empty()) args += ", ";
        keys.push_back(pname);
        args += pyjson::dumps(Value::from_string(pname), false) + ": ";
        args += is_str ? pyjson::dumps(Value::from_string(pvalue), false) : pvalue;
        Stop after = read_until_stop(text, index, {param_start, invoke_end});
        index = after.next;
        if (after.content != ">\n") return reject("Parameter format error: expected '>\\n'");
        st = after.which;
      }
      args += "}";
      Value fn = Value::object();
      fn.set("name", Value::from_string(name));
      fn.set("arguments", Value::from_string(args));
      Value call = Value::object();
      call.set("type", Value::from_string("function"));
      call.set("function", std::move(fn));
      tool_calls.items.push_back(std::move(call));
      last = st;
    }
    (void)last;
    (void)at_end_token;
    Stop tail = read_until_stop(text, index, {kEos});
    if (!tail.content.empty()) return reject("Unexpected content after tool calls");
    index = tail.next;
    stop = tail.which == 0 ? 0 : -1;
  }
  if (index != text.size()) return reject("Unexpected content at end");
  for (std::string_view s :
       {std::string_view("<｜begin▁of▁sentence｜>"), kEos, std::string_view("<think>"),
        std::string_view("</think>"), std::string_view(dsml)}) {
    if (content.find(s) != std::string_view::npos || reasoning.find(s) != std::string_view::npos) {
      return reject("Unexpected special token '" + std::string(s) + "' in content");
    }
  }
  Value msg = Value::object();
  msg.set("role", Value::from_string("assistant"));
  msg.set("content", Value::from_string(std::string(content)));
  msg.set("reasoning_content", Value::from_string(std::string(reasoning)));
  msg.set("tool_calls", std::move(tool_calls));
  return msg;
}

}  // namespace fathom::prompt
