#include "serve/forwarded_for.h"

#include <arpa/inet.h>

#include <strings.h>
#include <algorithm>
#include <cstring>
#include <optional>
#include <span>

namespace fathom::serve {
namespace {

using Address = std::array<unsigned char, 16>;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// An IPv4 or IPv6 literal (IPv4 as IPv4-mapped IPv6); nothing for anything else.
std::optional<Address> parse_address(std::string_view s) {
  if (s.empty() || s.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buf[INET6_ADDRSTRLEN];
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  Address a{};
  if (::inet_pton(AF_INET6, buf, a.data()) == 1) return a;
  unsigned char v4[4];
  if (::inet_pton(AF_INET, buf, v4) != 1) return std::nullopt;
  a[10] = a[11] = 0xFF;
  std::memcpy(a.data() + 12, v4, 4);
  return a;
}

// The comma-separated entries of an X-Forwarded-For value, trimmed, empty ones dropped.
std::vector<std::string_view> entries_of(std::string_view v) {
  std::vector<std::string_view> out;
  while (!v.empty()) {
    const size_t comma = v.find(',');
    const std::string_view e = trim(v.substr(0, comma));
    if (!e.empty()) out.push_back(e);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

// The entries that are addresses, then `peer` (when it is one), the last kMaxEntries of
// them joined with ", " (what forward() sends on). forward() passes addresses only (a chain
// is cut at the first entry that is not one); they are checked again here, as nothing else
// may reach the header.
std::string address_chain(std::span<const std::string_view> entries, std::string_view peer) {
  constexpr size_t kMaxEntries = 16;
  std::vector<std::string_view> kept;
  for (std::string_view e : entries)
    if (parse_address(e)) kept.push_back(e);
  if (parse_address(peer)) kept.push_back(peer);
  const size_t first = kept.size() > kMaxEntries ? kept.size() - kMaxEntries : 0;
  std::string out;
  for (size_t i = first; i < kept.size(); ++i) {
    if (!out.empty()) out += ", ";
    out += kept[i];
  }
  return out;
}

}  // namespace

Result<TrustedProxies> TrustedProxies::parse(const std::vector<std::string>& entries) {
  TrustedProxies t;
  for (const std::string& raw : entries)
    for (std::string_view e : entries_of(raw)) {
      if (e == "*") {
        t.any_ = true;
        continue;
      }
      auto a = parse_address(e);
      if (!a)
        return invalid_argument("'" + std::string(e) + "' is not an IPv4 or IPv6 address (or '*')");
      t.addrs_.push_back(*a);
    }
  return t;
}

bool TrustedProxies::trusts(std::string_view address) const {
  if (any_) return true;
  auto a = parse_address(address);
  return a && std::find(addrs_.begin(), addrs_.end(), *a) != addrs_.end();
}

// The index in `chain` of the entry client_address() takes (chain.size() for the peer).
size_t TrustedProxies::client_index(const std::vector<std::string_view>& chain) const {
  size_t client = chain.size();
  for (size_t i = chain.size(); i-- > 0;) {
    if (!parse_address(chain[i])) break;
    client = i;
    if (!trusts(chain[i])) break;
  }
  return client;
}

std::string TrustedProxies::client_address(std::string_view peer,
                                           std::string_view forwarded_for) const {
  if (empty() || !trusts(peer)) return std::string(peer);
  const std::vector<std::string_view> chain = entries_of(forwarded_for);
  const size_t i = client_index(chain);
  return std::string(i < chain.size() ? chain[i] : peer);
}

std::string TrustedProxies::forward(std::string_view peer, std::string_view forwarded_for) const {
  if (empty() || !trusts(peer)) return address_chain({}, peer);
  const std::vector<std::string_view> chain = entries_of(forwarded_for);
  return address_chain(std::span(chain).subspan(client_index(chain)), peer);
}

std::string forwarded_for_of(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out;
  for (const auto& [name, value] : headers)
    if (::strcasecmp(name.c_str(), "x-forwarded-for") == 0) {
      if (!out.empty()) out += ", ";
      out += value;
    }
  return out;
}

}  // namespace fathom::serve
