// Who sent a request when it came through proxies: the peers trusted to say so in
// X-Forwarded-For (fathom serve --forwarded-allow-ips, as uvicorn's flag of that name), and
// the X-Forwarded-For a request carries on when it is sent further (fathom router to its
// replicas, as nginx's $proxy_add_x_forwarded_for). Immutable after parse(); any thread.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom::serve {

class TrustedProxies {
 public:
  // Entries: IPv4 or IPv6 addresses, or "*" (every peer). None: no peer is trusted, and
  // X-Forwarded-For is never read. kInvalidArgument naming a bad entry.
  static Result<TrustedProxies> parse(const std::vector<std::string>& entries);

  bool empty() const { return !any_ && addrs_.empty(); }
  bool trusts(std::string_view address) const;
  // The client's address: `peer`, unless it is trusted and `forwarded_for` (every
  // X-Forwarded-For header's entries, comma-separated, in order) names one; then the
  // right-most entry that is not itself trusted (the one the last trusted proxy saw: entries
  // to its left are the client's own word), or the left-most when all are. An entry that is
  // not an address ends the walk at the entry to its right, or at the peer.
  std::string client_address(std::string_view peer, std::string_view forwarded_for) const;
  // The X-Forwarded-For to send on (a router to its replicas): what this server resolved
  // and nothing a client could have written before it — `peer` alone, or where `peer` is
  // trusted, the entries from client_address()'s one to the right end, then `peer`.
  std::string forward(std::string_view peer, std::string_view forwarded_for) const;

 private:
  // The index in `chain` of the entry client_address() takes (chain.size(): the peer).
  size_t client_index(const std::vector<std::string_view>& chain) const;

  bool any_ = false;
  std::vector<std::array<unsigned char, 16>> addrs_;  // IPv4 as IPv4-mapped IPv6
};

// Every X-Forwarded-For header of a request, joined with ", " in order.
std::string forwarded_for_of(const std::vector<std::pair<std::string, std::string>>& headers);

}  // namespace fathom::serve
