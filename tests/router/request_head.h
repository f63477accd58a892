// Test helper for the router's scripted loopback replicas: reads one request's head (through
// the blank line after its headers, or until the peer stops sending). Any thread.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <string>

namespace fathom::router::loopback {

inline std::string read_request_head(int fd) {
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    req.append(buf, size_t(n));
  }
  return req;
}

}  // namespace fathom::router::loopback
