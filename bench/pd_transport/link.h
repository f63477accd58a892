// A message link between the bench's two processes (P, the sender, and D, the receiver): the
// transport under test. Chunks go P -> D, acknowledgements D -> P; each message arrives whole,
// in order, as sent. Implementations: plain TCP on loopback (tcp_link.cc) and UCX UCP's tag API
// over the transports a UCX_TLS value selects (ucx_link.cc). Both ends are set up through a
// control descriptor (a socketpair made before fork) that carries addresses, never data.
// A Link belongs to one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom::bench {

enum class Side { kSender, kReceiver };

class Link {
 public:
  virtual ~Link() = default;

  // Sends one message; returns once `msg` may be reused.
  virtual Status send(std::string_view msg) = 0;
  // Starts sending one message; `msg` must stay valid and unchanged until flush() returns.
  virtual Status post_send(std::string_view msg) = 0;
  // Waits until every posted send has completed.
  virtual Status flush() = 0;
  // The next message, viewing a buffer the link owns, valid until the next recv(). With
  // `more` the caller says another message follows, so the link may start receiving it into
  // a second buffer while the caller checks this one. kOutOfRange for a message longer than
  // the link's max_message.
  virtual Result<std::string_view> recv(bool more) = 0;
  // What the link runs on, one or more lines, for the report.
  virtual std::string describe() const = 0;
};

// One TCP connection on 127.0.0.1 (TCP_NODELAY), blocking calls; every message is preceded by
// its length (u64), as an HTTP body by its Content-Length.
Result<std::unique_ptr<Link>> open_tcp_link(Side side, int control_fd, size_t max_message);

struct UcxLinkOptions {
  std::string tls;         // the UCX_TLS value for this link's context, e.g. "tcp", "sm"
  bool wait = false;       // sleep on the worker's event fd instead of polling
  size_t max_message = 0;  // the largest message the receiver takes
};
// A UCP context, worker and endpoint per process, connected through worker addresses.
Result<std::unique_ptr<Link>> open_ucx_link(Side side, int control_fd, const UcxLinkOptions& o);

// Whole reads and writes on a blocking descriptor (kIoError on failure or end of file).
Status write_full(int fd, const void* data, size_t n);
Status read_full(int fd, void* data, size_t n);

}  // namespace fathom::bench
