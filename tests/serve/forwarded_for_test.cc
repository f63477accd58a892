// Who a request is from behind proxies: X-Forwarded-For read as uvicorn's
// --forwarded-allow-ips reads it (the right-most entry a trusted proxy did not write; with
// '*', the left-most), and carried on as nginx's $proxy_add_x_forwarded_for writes it.
#include "serve/forwarded_for.h"

#include <gtest/gtest.h>

namespace fathom::serve {
namespace {

TrustedProxies trusted(const std::vector<std::string>& entries) {
  auto t = TrustedProxies::parse(entries);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? *t : TrustedProxies{};
}

TEST(ForwardedFor, ParsesAddressesAndRefusesAnythingElse) {
  EXPECT_TRUE(trusted({}).empty());
  EXPECT_FALSE(trusted({"*"}).empty());
  const TrustedProxies t = trusted({"127.0.0.1, ::1", "10.0.0.9"});
  EXPECT_TRUE(t.trusts("127.0.0.1"));
  EXPECT_TRUE(t.trusts("::ffff:127.0.0.1"));  // the same address, as a dual-stack socket gives it
  EXPECT_TRUE(t.trusts("::1"));
  EXPECT_TRUE(t.trusts("10.0.0.9"));
  EXPECT_FALSE(t.trusts("10.0.0.1"));
  EXPECT_FALSE(t.trusts(""));
  for (const char* bad : {"10.0.0", "localhost", "10.0.0.0/8", "1.2.3.4:80", "::1%lo"}) {
    auto r = TrustedProxies::parse({bad});
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

// Who a request is from (client_address), and what a router sends on for it (forward): only
// what it resolved, nothing a client wrote before the entry its trusted proxies vouch for (a
// replica trusting '*' takes the left-most entry).
TEST(ForwardedFor, OnlyATrustedPeerNamesTheClient) {
  const std::vector<std::string> none, proxies = {"127.0.0.1", "10.0.0.9"}, any = {"*"};
  struct Case {
    const std::vector<std::string>& trust;
    const char *peer, *header, *client, *sent;
  };
  const Case cases[] = {
      // Nobody trusted: the header is never read.
      {none, "127.0.0.1", "1.2.3.4", "127.0.0.1", "127.0.0.1"},
      {none, "127.0.0.2", "6.6.6.6", "127.0.0.2", "127.0.0.2"},
      // Not a trusted peer.
      {proxies, "127.0.0.2", "1.2.3.4", "127.0.0.2", "127.0.0.2"},
      {proxies, "127.0.0.2", "6.6.6.6", "127.0.0.2", "127.0.0.2"},
      {proxies, "127.0.0.1", "", "127.0.0.1", "127.0.0.1"},
      {proxies, "127.0.0.1", "1.2.3.4", "1.2.3.4", "1.2.3.4, 127.0.0.1"},
      {proxies, "::ffff:127.0.0.1", " 1.2.3.4 ", "1.2.3.4", "1.2.3.4, ::ffff:127.0.0.1"},
      // Entries left of the one the trusted proxy wrote are the client's own word.
      {proxies, "127.0.0.1", "6.6.6.6, 1.2.3.4", "1.2.3.4", "1.2.3.4, 127.0.0.1"},
      // A chain of trusted proxies is walked through.
      {proxies, "127.0.0.1", "6.6.6.6, 1.2.3.4, 10.0.0.9", "1.2.3.4",
       "1.2.3.4, 10.0.0.9, 127.0.0.1"},
      {proxies, "127.0.0.1", "2001:db8::7, 10.0.0.9", "2001:db8::7",
       "2001:db8::7, 10.0.0.9, 127.0.0.1"},
      // Every entry trusted: the left-most.
      {proxies, "127.0.0.1", "10.0.0.9, 127.0.0.1", "10.0.0.9", "10.0.0.9, 127.0.0.1, 127.0.0.1"},
      // Not an address: the walk stops at the entry to its right, or the peer.
      {proxies, "127.0.0.1", "garbage, 1.2.3.4", "1.2.3.4", "1.2.3.4, 127.0.0.1"},
      {proxies, "127.0.0.1", "1.2.3.4, garbage", "127.0.0.1", "127.0.0.1"},
      {proxies, "127.0.0.1", "1.2.3.4, unknown, 10.0.0.9", "10.0.0.9", "10.0.0.9, 127.0.0.1"},
      // '*' trusts every peer and every entry: the left-most.
      {any, "192.0.2.1", "1.2.3.4, 5.6.7.8", "1.2.3.4", "1.2.3.4, 5.6.7.8, 192.0.2.1"},
  };
  for (const Case& c : cases) {
    const TrustedProxies t = trusted(c.trust);
    EXPECT_EQ(t.client_address(c.peer, c.header), c.client) << c.peer << " / " << c.header;
    EXPECT_EQ(t.forward(c.peer, c.header), c.sent) << c.peer << " / " << c.header;
  }
}

// Trusting every peer, forward() sends on the whole chain from the left-most address after
// anything that is not one.
TEST(ForwardedFor, TheChainSentOnHoldsOnlyAddresses) {
  const TrustedProxies all = trusted({"*"});
  EXPECT_EQ(all.forward("127.0.0.2", ""), "127.0.0.2");
  EXPECT_EQ(all.forward("::1", "1.2.3.4"), "1.2.3.4, ::1");
  EXPECT_EQ(all.forward("127.0.0.1", "1.2.3.4, evil\r\nX-Injected: 1, ,5.6.7.8"),
            "5.6.7.8, 127.0.0.1");
  EXPECT_EQ(all.forward("", ""), "");
  std::string many;
  for (int i = 0; i < 40; ++i) many += "10.0.0." + std::to_string(i) + ",";
  const std::string chain = all.forward("127.0.0.1", many);
  EXPECT_EQ(chain.rfind("10.0.0.25, ", 0), 0u) << chain;  // the last 16 entries
  EXPECT_EQ(chain.substr(chain.size() - 11), ", 127.0.0.1");
}

TEST(ForwardedFor, EveryHeaderIsRead) {
  EXPECT_EQ(
      forwarded_for_of(
          {{"X-Forwarded-For", "1.2.3.4"}, {"Host", "x"}, {"x-forwarded-for", "5.6.7.8, 9.9.9.9"}}),
      "1.2.3.4, 5.6.7.8, 9.9.9.9");
  EXPECT_EQ(forwarded_for_of({{"Host", "x"}}), "");
}

}  // namespace
}  // namespace fathom::serve
