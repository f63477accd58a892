// The wire format of the KV event feed (`fathom serve`'s GET /v1/kv_events and
// GET /v1/kv_snapshot, read by `fathom router`): one definition for the writer and the reader.
// Block hashes are 16 lowercase hex digits (64-bit values do not survive JSON numbers in
// JavaScript). Pure functions; thread-safe.
//
// An event line (newline-delimited JSON, one object a line; Dynamo's shape):
//   {"event_id":N,"type":"stored","parent_block_hash":"HEX"|null,"block_hashes":["HEX",...]}
//   {"event_id":N,"type":"removed","block_hashes":["HEX",...]}
// The start line (a stream's first when it can continue from the id asked):
//   {"type":"start","instance":"HEX","last_event_id":N}
// The resync line (the feed can not continue from the id asked; the stream ends after it):
//   {"type":"resync","instance":"HEX","last_event_id":N}
// Empty lines are heartbeats. The snapshot (one JSON object):
//   {"instance":"HEX","last_event_id":N,"blocks":[["HASH","PARENT"|null],...]}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kv/kv_event_log.h"

namespace fathom::kv {

std::string block_hash_hex(uint64_t h);
// Exactly 16 hex digits (either case); kInvalidArgument otherwise.
Result<uint64_t> parse_block_hash_hex(std::string_view s);

// Appends the event's line, newline included.
void append_kv_event_line(std::string& out, const KvEvent& e);
void append_kv_resync_line(std::string& out, uint64_t instance, uint64_t last_id);
std::string kv_snapshot_json(const KvSnapshot& s);

// One line of the feed read back: an event, the start, a resync, or (an empty line) a heartbeat.
struct KvFeedLine {
  enum class Kind { kEvent, kStart, kResync, kHeartbeat } kind = Kind::kHeartbeat;
  KvEvent event;          // kEvent
  uint64_t instance = 0;  // kStart, kResync
  uint64_t last_id = 0;   // kStart, kResync
};
// kInvalidArgument naming what is wrong (bad JSON, a missing or mistyped field, an empty hash
// list, an unknown type).
Result<KvFeedLine> parse_kv_feed_line(std::string_view line);
Result<KvSnapshot> parse_kv_snapshot(std::string_view body);

}  // namespace fathom::kv
