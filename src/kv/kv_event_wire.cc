#include "kv/kv_event_wire.h"

#include "core/py_json.h"

namespace fathom::kv {

namespace {

using pyjson::Value;

void append_hex(std::string& out, uint64_t h) {
  static const char* digits = "0123456789abcdef";
  char buf[16];
  for (int i = 15; i >= 0; --i, h >>= 4) buf[i] = digits[h & 15];
  out.append(buf, 16);
}

void append_quoted_hex(std::string& out, uint64_t h) {
  out += '"';
  append_hex(out, h);
  out += '"';
}

Result<uint64_t> hex_field(const Value& v, std::string_view what) {
  if (!v.is_string()) return invalid_argument(std::string(what) + " must be a hex string");
  auto h = parse_block_hash_hex(v.text);
  if (!h.is_ok()) return invalid_argument(std::string(what) + ": " + h.status().message());
  return *h;
}

Result<uint64_t> id_field(const Value& obj, std::string_view name) {
  const Value* v = obj.find(name);
  int64_t x = 0;
  if (v == nullptr || !v->int_fits_int64(&x) || x < 0)
    return invalid_argument("'" + std::string(name) + "' must be a non-negative integer");
  return uint64_t(x);
}

}  // namespace

std::string block_hash_hex(uint64_t h) {
  std::string s;
  append_hex(s, h);
  return s;
}

Result<uint64_t> parse_block_hash_hex(std::string_view s) {
  if (s.size() != 16) return invalid_argument("a block hash is 16 hex digits");
  uint64_t h = 0;
  for (char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return invalid_argument("a block hash is 16 hex digits");
    h = h << 4 | uint64_t(d);
  }
  return h;
}

void append_kv_event_line(std::string& out, const KvEvent& e) {
  out += "{\"event_id\":";
  out += std::to_string(e.id);
  if (e.kind == KvEventKind::kStored) {
    out += ",\"type\":\"stored\",\"parent_block_hash\":";
    if (e.parent == 0)
      out += "null";
    else
      append_quoted_hex(out, e.parent);
  } else {
    out += ",\"type\":\"removed\"";
  }
  out += ",\"block_hashes\":[";
  for (size_t i = 0; i < e.hashes.size(); ++i) {
    if (i > 0) out += ',';
    append_quoted_hex(out, e.hashes[i]);
  }
  out += "]}\n";
}

void append_kv_resync_line(std::string& out, uint64_t instance, uint64_t last_id) {
  out += "{\"type\":\"resync\",\"instance\":";
  append_quoted_hex(out, instance);
  out += ",\"last_event_id\":" + std::to_string(last_id) + "}\n";
}

std::string kv_snapshot_json(const KvSnapshot& s) {
  std::string out = "{\"instance\":";
  append_quoted_hex(out, s.instance);
  out += ",\"last_event_id\":" + std::to_string(s.last_id) + ",\"blocks\":[";
  out.reserve(out.size() + s.blocks.size() * 40 + 4);
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    if (i > 0) out += ',';
    out += '[';
    append_quoted_hex(out, s.blocks[i].first);
    out += ',';
    if (s.blocks[i].second == 0)
      out += "null";
    else
      append_quoted_hex(out, s.blocks[i].second);
    out += ']';
  }
  out += "]}";
  return out;
}

Result<KvFeedLine> parse_kv_feed_line(std::string_view line) {
  KvFeedLine out;
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return out;  // heartbeat
  pyjson::ParseOptions po;
  po.allow_nan = false;
  po.max_depth = 4;
  auto v = pyjson::parse(line, po);
  if (!v.is_ok()) return invalid_argument("kv event: " + v.status().message());
  if (!v->is_object()) return invalid_argument("kv event: not an object");
  const Value* type = v->find("type");
  if (type == nullptr || !type->is_string()) return invalid_argument("kv event: 'type' missing");
  if (type->text == "resync" || type->text == "start") {
    out.kind = type->text == "start" ? KvFeedLine::Kind::kStart : KvFeedLine::Kind::kResync;
    const Value* inst = v->find("instance");
    if (inst == nullptr) return invalid_argument("kv " + type->text + ": 'instance' missing");
    FATHOM_ASSIGN_OR_RETURN(out.instance, hex_field(*inst, "'instance'"));
    FATHOM_ASSIGN_OR_RETURN(out.last_id, id_field(*v, "last_event_id"));
    return out;
  }
  out.kind = KvFeedLine::Kind::kEvent;
  if (type->text == "stored")
    out.event.kind = KvEventKind::kStored;
  else if (type->text == "removed")
    out.event.kind = KvEventKind::kRemoved;
  else
    return invalid_argument("kv event: unknown type '" + type->text + "'");
  FATHOM_ASSIGN_OR_RETURN(out.event.id, id_field(*v, "event_id"));
  if (out.event.id == 0) return invalid_argument("kv event: 'event_id' starts at 1");
  if (out.event.kind == KvEventKind::kStored) {
    const Value* p = v->find("parent_block_hash");
    if (p == nullptr) return invalid_argument("kv event: 'parent_block_hash' missing");
    if (!p->is_null()) {
      FATHOM_ASSIGN_OR_RETURN(out.event.parent, hex_field(*p, "'parent_block_hash'"));
    }
  }
  const Value* hs = v->find("block_hashes");
  if (hs == nullptr || !hs->is_array() || hs->items.empty())
    return invalid_argument("kv event: 'block_hashes' must be a non-empty list");
  out.event.hashes.reserve(hs->items.size());
  for (const Value& h : hs->items) {
    FATHOM_ASSIGN_OR_RETURN(uint64_t x, hex_field(h, "'block_hashes'"));
    out.event.hashes.push_back(x);
  }
  return out;
}

Result<KvSnapshot> parse_kv_snapshot(std::string_view body) {
  pyjson::ParseOptions po;
  po.allow_nan = false;
  po.max_depth = 4;
  auto v = pyjson::parse(body, po);
  if (!v.is_ok()) return invalid_argument("kv snapshot: " + v.status().message());
  if (!v->is_object()) return invalid_argument("kv snapshot: not an object");
  KvSnapshot s;
  const Value* inst = v->find("instance");
  if (inst == nullptr) return invalid_argument("kv snapshot: 'instance' missing");
  FATHOM_ASSIGN_OR_RETURN(s.instance, hex_field(*inst, "'instance'"));
  FATHOM_ASSIGN_OR_RETURN(s.last_id, id_field(*v, "last_event_id"));
  const Value* bs = v->find("blocks");
  if (bs == nullptr || !bs->is_array())
    return invalid_argument("kv snapshot: 'blocks' must be a list");
  s.blocks.reserve(bs->items.size());
  for (const Value& b : bs->items) {
    if (!b.is_array() || b.items.size() != 2)
      return invalid_argument("kv snapshot: each block is [hash, parent]");
    FATHOM_ASSIGN_OR_RETURN(uint64_t h, hex_field(b.items[0], "a block's hash"));
    uint64_t p = 0;
    if (!b.items[1].is_null()) {
      FATHOM_ASSIGN_OR_RETURN(p, hex_field(b.items[1], "a block's parent"));
    }
    s.blocks.emplace_back(h, p);
  }
  return s;
}

}  // namespace fathom::kv
