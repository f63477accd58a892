// The HTTP calls of the P/D hand-off (decode-first push; the replica side is
// serve/pd_routes.h): the router reserves a room on the decode replica (D) for a request's
// prompt, asks the prefill replica (P) to prefill the prompt and push its KV blocks into that
// room, then sends the request itself to D with the room's id (header kKvRoomHeader). P's push
// to D is one POST per chunk of kv/pd_wire.h frames. Each call is one exchange on one
// connection, every wait bounded: the router's two are coroutines (on the awaiting
// coroutine's executor, async_http_client.h), P's push is blocking (on a server worker).
// Free functions: any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "router/async_http_client.h"
#include "router/http_client.h"

namespace fathom::router {

// The header naming the room of a request whose prompt blocks were pushed to D.
inline constexpr std::string_view kKvRoomHeader = "X-Fathom-KV-Room";
// The error `code` D answers (503) when a transfer failed and it runs --kv-load-failure fail.
inline constexpr std::string_view kKvTransferFailedCode = "kv_transfer_failed";

struct PdCallOptions {
  std::string auth_header;  // e.g. "Authorization: Bearer K\r\n" (or empty)
  int connect_timeout_ms = 2000;
  int timeout_ms = 60000;  // the whole answer
};

// What D expects, or why it refused (kIoError: unreachable; kResourceExhausted: it has no room
// now, a 503 — too many rooms, or no KV pages for prompt + max_tokens: D holds them from the
// reservation on; kInternal: any other answer). max_tokens < 1: not stated (D assumes 256).
struct PdReservation {
  int64_t expect_blocks = 0;  // the prompt blocks D may resume from
};
AsyncHttpExchange::Awaitable<Result<PdReservation>> pd_reserve(
    const Endpoint& d, std::string_view room, std::span<const int32_t> prompt,
    std::string_view cache_salt, const PdCallOptions& o, int64_t max_tokens = 0,
    AsyncHttpExchange::Stop stop = {});

// What P did: it prefilled the prompt and D accepted `blocks` blocks (and one window side
// object) of `bytes` bytes in all, in `push_seconds`.
struct PdPrefillResult {
  int64_t blocks = 0, bytes = 0, cached_tokens = 0;
  double prefill_seconds = 0, push_seconds = 0;
};
// kIoError when P cannot be reached or breaks off (P failed); kInternal with P's message when
// P answered with an error (its prefill failed, D refused the push, P could not reach D).
// `stop` (the request's client left) ends the wait with kIoError("stopped").
AsyncHttpExchange::Awaitable<Result<PdPrefillResult>> pd_prefill(
    const Endpoint& p, std::string_view room, std::span<const int32_t> prompt,
    std::string_view cache_salt, std::string_view retention, std::string_view push_to,
    const PdCallOptions& o, AsyncHttpExchange::Stop stop = {});

// One chunk of P's push (kv/pd_wire.h) into D's room: D's JSON answer, or an error with
// D's message (kCorrupt when D rejected the objects, kIoError when it could not be reached).
Result<std::string> pd_push(const Endpoint& d, std::string_view room, std::string_view body,
                            const PdCallOptions& o);

}  // namespace fathom::router
