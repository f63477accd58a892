#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "link.h"

namespace fathom::bench {
namespace {

Status errno_status(const char* what) {
  return io_error(std::string(what) + ": " + strerror(errno));
}

class TcpLink final : public Link {
 public:
  TcpLink(int fd, size_t max_message)
      : fd_(fd), max_(max_message), buf_(new char[max_message > 0 ? max_message : 1]) {}
  ~TcpLink() override { ::close(fd_); }
  TcpLink(const TcpLink&) = delete;
  TcpLink& operator=(const TcpLink&) = delete;

  Status send(std::string_view msg) override {
    const uint64_t len = msg.size();
    iovec v[2] = {{const_cast<uint64_t*>(&len), sizeof len},
                  {const_cast<char*>(msg.data()), msg.size()}};
    size_t left = sizeof len + msg.size();
    iovec* at = v;
    int count = 2;
    while (left > 0) {
      const ssize_t n = ::writev(fd_, at, count);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_status("tcp send");
      }
      left -= size_t(n);
      size_t done = size_t(n);
      while (count > 0 && done >= at->iov_len) {
        done -= at->iov_len;
        ++at;
        --count;
      }
      if (count > 0) {
        at->iov_base = static_cast<char*>(at->iov_base) + done;
        at->iov_len -= done;
      }
    }
    return Status::ok();
  }
  // The kernel's socket buffer is the pipeline: a blocking send returns once it holds the bytes.
  Status post_send(std::string_view msg) override { return send(msg); }
  Status flush() override { return Status::ok(); }

  Result<std::string_view> recv(bool /*more*/) override {
    uint64_t len = 0;
    FATHOM_RETURN_IF_ERROR(read_full(fd_, &len, sizeof len));
    if (len > max_) return out_of_range("a message of " + std::to_string(len) + " bytes");
    FATHOM_RETURN_IF_ERROR(read_full(fd_, buf_.get(), size_t(len)));
    return std::string_view(buf_.get(), size_t(len));
  }

  std::string describe() const override {
    int snd = 0, rcv = 0;
    socklen_t l = sizeof snd;
    ::getsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &snd, &l);
    l = sizeof rcv;
    ::getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcv, &l);
    return "TCP 127.0.0.1, TCP_NODELAY, blocking writev/read, SO_SNDBUF " + std::to_string(snd) +
           " SO_RCVBUF " + std::to_string(rcv) + " (kernel defaults, autotuned)";
  }

 private:
  const int fd_;
  const size_t max_;
  std::unique_ptr<char[]> buf_;
};

Status set_nodelay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return errno_status("TCP_NODELAY");
  return Status::ok();
}

}  // namespace

Status write_full(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return errno_status("write");
    p += w;
    n -= size_t(w);
  }
  return Status::ok();
}

Status read_full(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return io_error("the peer closed the connection");
    if (r < 0) return errno_status("read");
    p += r;
    n -= size_t(r);
  }
  return Status::ok();
}

Result<std::unique_ptr<Link>> open_tcp_link(Side side, int control_fd, size_t max_message) {
  if (side == Side::kReceiver) {
    const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) return errno_status("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t al = sizeof a;
    if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(ls, 1) != 0 ||
        ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &al) != 0) {
      Status s = errno_status("listen on 127.0.0.1");
      ::close(ls);
      return s;
    }
    const uint16_t port = a.sin_port;
    Status s = write_full(control_fd, &port, sizeof port);
    const int fd = s.is_ok() ? ::accept(ls, nullptr, nullptr) : -1;
    if (s.is_ok() && fd < 0) s = errno_status("accept");
    ::close(ls);
    FATHOM_RETURN_IF_ERROR(s);
    auto link = std::make_unique<TcpLink>(fd, max_message);
    FATHOM_RETURN_IF_ERROR(set_nodelay(fd));
    return std::unique_ptr<Link>(std::move(link));
  }
  uint16_t port = 0;
  FATHOM_RETURN_IF_ERROR(read_full(control_fd, &port, sizeof port));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return errno_status("socket");
  auto link = std::make_unique<TcpLink>(fd, max_message);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = port;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return errno_status("connect to 127.0.0.1");
  FATHOM_RETURN_IF_ERROR(set_nodelay(fd));
  return std::unique_ptr<Link>(std::move(link));
}

}  // namespace fathom::bench
