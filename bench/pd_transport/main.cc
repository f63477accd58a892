// fathom_pd_transport_bench: the P/D KV push's bytes over plain TCP and over UCX, side by side
// (issue #15). Two processes on this machine — P (the sender, the parent) and D (the receiver,
// a fork) — move a seeded push of S stream bytes (real KV objects framed by kv::encode_push),
// cut into chunks of C bytes by kv::encode_chunks, and D checks every chunk, frame and object
// with kv::PushAssembler, answers as the protocol says (push_roles.h), and compares what
// arrived with the objects sent. The transports are measured interleaved (tcp, ucx-tcp,
// ucx-shm, tcp, ...) in every cell of payload x chunk x protocol. Prints the transports' setup
// (UCX's own description of the lanes it chose) and a table; exits 0 when every push passed,
// 3 when D rejected one (a checksum, framing or content failure; --corrupt provokes one),
// 2 on bad arguments, 1 when a transport failed.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "link.h"
#include "push_roles.h"
#include "seeded_push.h"

namespace fathom::bench {
namespace {

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitRejected = 3;

struct Options {
  std::vector<std::string> transports = {"tcp", "ucx-tcp", "ucx-shm", "ucx-tcp-poll",
                                         "ucx-shm-poll"};
  std::vector<uint64_t> payloads = {3091036, 18000000, 67108864};
  std::vector<uint64_t> chunks = {262144, 8388608};
  std::vector<PushMode> modes = {PushMode::kAck, PushMode::kPipelined};
  int repeats = 10, warmup = 1;
  uint64_t block_bytes = 197276, window_bytes = 131472, seed = 1;
  std::string shm_tls = "sm";
  bool corrupt = false;
  int timeout_s = 1800;
};

const char* const kUsage =
    "usage: fathom_pd_transport_bench [options]\n"
    "  --transports LIST     of tcp, ucx-tcp, ucx-shm, ucx-tcp-poll, ucx-shm-poll (default all,\n"
    "                        measured interleaved); ucx-*: sleeping on the worker's event fd\n"
    "                        between progress calls, ucx-*-poll: busy polling\n"
    "  --payload-bytes LIST  push stream bytes (default 3091036,18000000,67108864)\n"
    "  --chunk-bytes LIST    chunk payload bytes (default 262144,8388608)\n"
    "  --modes LIST          of ack, pipelined (default both)\n"
    "  --repeats N           timed pushes per transport and cell (default 10)\n"
    "  --warmup N            untimed pushes first (default 1)\n"
    "  --block-bytes B       block object bytes (default 197276, the demo model's)\n"
    "  --window-bytes W      least window object bytes (default 131472); it takes the rest\n"
    "  --seed N              the payload's seed (default 1)\n"
    "  --ucx-shm-tls TLS     UCX_TLS for ucx-shm (default sm)\n"
    "  --corrupt             flip one payload byte of the middle chunk of every push: D must\n"
    "                        reject every one (exit 3; 1 when one was accepted)\n"
    "  --timeout-s N         abort after N seconds (default 1800)\n";

bool parse_u64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t c = s.find(',', at);
    out.emplace_back(s.substr(at, c == std::string_view::npos ? s.npos : c - at));
    if (c == std::string_view::npos) return out;
    at = c + 1;
  }
}

// Parses argv into *o; an error message, or empty.
std::string parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--corrupt") {
      o->corrupt = true;
      continue;
    }
    if (a == "-h" || a == "--help") return "help";
    if (i + 1 >= argc) return a + " needs a value (or is not an option)";
    const std::string v = argv[++i];
    uint64_t n = 0;
    const auto number = [&](uint64_t lo, uint64_t hi, uint64_t* out) -> std::string {
      if (!parse_u64(v, &n) || n < lo || n > hi)
        return a + " " + v + ": not a whole number in [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]";
      *out = n;
      return "";
    };
    const auto numbers = [&](uint64_t lo, uint64_t hi, std::vector<uint64_t>* out) {
      out->clear();
      for (const std::string& x : split(v)) {
        if (!parse_u64(x, &n) || n < lo || n > hi)
          return a + " " + x + ": not a whole number in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]";
        out->push_back(n);
      }
      return std::string();
    };
    std::string err;
    uint64_t tmp = 0;
    if (a == "--transports") {
      o->transports = split(v);
      for (const std::string& t : o->transports)
        if (t != "tcp" && t != "ucx-tcp" && t != "ucx-shm" && t != "ucx-tcp-poll" &&
            t != "ucx-shm-poll")
          return "--transports: unknown transport '" + t +
                 "' (tcp, ucx-tcp, ucx-shm, ucx-tcp-poll, ucx-shm-poll)";
      std::vector<std::string> seen = o->transports;
      std::sort(seen.begin(), seen.end());
      if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
        return "--transports: a transport named twice";
    } else if (a == "--payload-bytes") {
      err = numbers(1, uint64_t(1) << 32, &o->payloads);
    } else if (a == "--chunk-bytes") {
      err = numbers(1, uint64_t(1) << 30, &o->chunks);
    } else if (a == "--modes") {
      o->modes.clear();
      for (const std::string& m : split(v)) {
        if (m == "ack") {
          o->modes.push_back(PushMode::kAck);
        } else if (m == "pipelined") {
          o->modes.push_back(PushMode::kPipelined);
        } else {
          return "--modes: unknown mode '" + m + "' (ack, pipelined)";
        }
      }
    } else if (a == "--repeats") {
      err = number(1, 100000, &tmp);
      o->repeats = int(tmp);
    } else if (a == "--warmup") {
      err = number(0, 1000, &tmp);
      o->warmup = int(tmp);
    } else if (a == "--block-bytes") {
      err = number(kMinObjectBytes, kv::kMaxFramePayload, &o->block_bytes);
    } else if (a == "--window-bytes") {
      err = number(kMinObjectBytes, kv::kMaxFramePayload, &o->window_bytes);
    } else if (a == "--seed") {
      err = number(0, UINT64_MAX, &o->seed);
    } else if (a == "--ucx-shm-tls") {
      if (v.empty() || v.find_first_of(" \t\n") != std::string::npos)
        return "--ucx-shm-tls: a UCX_TLS value such as sm or posix,cma";
      o->shm_tls = v;
    } else if (a == "--timeout-s") {
      err = number(1, 86400, &tmp);
      o->timeout_s = int(tmp);
    } else {
      return "unknown option " + a;
    }
    if (!err.empty()) return err;
  }
  for (uint64_t p : o->payloads) {
    auto push = make_seeded_push(p, o->block_bytes, o->window_bytes, o->seed);
    if (!push.is_ok())
      return "--payload-bytes " + std::to_string(p) + ": " + push.status().message();
    for (uint64_t c : o->chunks)
      if ((p + c - 1) / c >= (uint64_t(1) << 32))
        return "--chunk-bytes " + std::to_string(c) + ": too many chunks";
  }
  return "";
}

struct Verdict {
  uint32_t ok = 0, fault = 0;
  double cpu_seconds = 0;
  char message[256] = {};
};

Result<std::unique_ptr<Link>> open_link(const std::string& t, Side side, int ctl, const Options& o,
                                        size_t max_message) {
  if (t == "tcp") return open_tcp_link(side, ctl, max_message);
  UcxLinkOptions u;
  u.tls = t.starts_with("ucx-tcp") ? "tcp" : o.shm_tls;
  u.wait = !t.ends_with("-poll");
  u.max_message = max_message;
  return open_ucx_link(side, ctl, u);
}

size_t max_chunk_message(const Options& o) {
  uint64_t m = 0;
  for (uint64_t p : o.payloads)
    for (uint64_t c : o.chunks) m = std::max(m, std::min(p, c) + kv::kChunkHeaderBytes);
  return size_t(m);
}

uint32_t chunk_count(uint64_t payload, uint64_t chunk) {
  return uint32_t((payload + chunk - 1) / chunk);
}

// D: follows the same schedule as P.
int run_receiver(const Options& o, int ctl) {
  std::vector<std::unique_ptr<Link>> links;
  for (const std::string& t : o.transports) {
    auto l = open_link(t, Side::kReceiver, ctl, o, max_chunk_message(o));
    if (!l.is_ok()) {
      std::fprintf(stderr, "receiver: %s: %s\n", t.c_str(), l.status().message().c_str());
      return kExitFailed;
    }
    links.push_back(std::move(*l));
  }
  for (uint64_t p : o.payloads) {
    auto want = make_seeded_push(p, o.block_bytes, o.window_bytes, o.seed);
    if (!want.is_ok()) return kExitFailed;
    for (uint64_t c : o.chunks)
      for (PushMode m : o.modes)
        for (int rep = 0; rep < o.warmup + o.repeats; ++rep)
          for (size_t t = 0; t < links.size(); ++t) {
            auto r = receive_push(*links[t], *want, chunk_count(p, c), m);
            if (!r.is_ok()) {
              std::fprintf(stderr, "receiver: %s: %s\n", o.transports[t].c_str(),
                           r.status().message().c_str());
              return kExitFailed;
            }
            Verdict v;
            v.ok = r->verdict.is_ok();
            v.fault = r->fault;
            v.cpu_seconds = r->cpu_seconds;
            std::snprintf(v.message, sizeof v.message, "%s", r->verdict.message().c_str());
            if (!write_full(ctl, &v, sizeof v).is_ok()) return kExitFailed;
            if (!v.ok && !o.corrupt) return kExitRejected;
          }
  }
  return kExitOk;
}

struct Samples {
  std::vector<double> seconds, cpu;
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = size_t(std::ceil(q * double(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

// P: sets the links up, runs the schedule, prints the table.
int run_sender(const Options& o, int ctl) {
  std::vector<std::unique_ptr<Link>> links;
  std::printf("== transports (P's side; UCX %s) ==\n", ucp_get_version_string());
  for (const std::string& t : o.transports) {
    auto l = open_link(t, Side::kSender, ctl, o, 64);
    if (!l.is_ok()) {
      std::fprintf(stderr, "%s: %s\n", t.c_str(), l.status().message().c_str());
      return kExitFailed;
    }
    std::printf("-- %s: %s\n", t.c_str(), (*l)->describe().c_str());
    links.push_back(std::move(*l));
  }
  std::fflush(stdout);
  // (payload, chunk, mode, transport) -> samples
  std::map<std::tuple<uint64_t, uint64_t, int, size_t>, Samples> samples;
  int rejected = 0;
  for (uint64_t p : o.payloads) {
    auto push = make_seeded_push(p, o.block_bytes, o.window_bytes, o.seed);
    if (!push.is_ok()) return kExitFailed;
    for (uint64_t c : o.chunks) {
      std::vector<std::string> chunks = kv::encode_chunks(push->stream, size_t(c));
      if (o.corrupt) {
        std::string& victim = chunks[chunks.size() / 2];
        victim[kv::kChunkHeaderBytes + (victim.size() - kv::kChunkHeaderBytes) / 2] ^= 0x10;
      }
      for (PushMode m : o.modes)
        for (int rep = 0; rep < o.warmup + o.repeats; ++rep)
          for (size_t t = 0; t < links.size(); ++t) {
            auto s = send_push(*links[t], chunks, m);
            Verdict v;
            Status got = s.is_ok() ? read_full(ctl, &v, sizeof v) : s.status();
            if (!got.is_ok()) {
              std::fprintf(stderr, "%s: %s\n", o.transports[t].c_str(), got.message().c_str());
              return kExitFailed;
            }
            if (!v.ok) {
              std::printf(
                  "REJECTED: D refused the push (%s, payload %llu, chunk %llu, %s, push %d): "
                  "%s; D answered fault %u (%s) at chunk %u\n",
                  o.transports[t].c_str(), (unsigned long long)p, (unsigned long long)c,
                  push_mode_name(m), rep, v.message, s->fault,
                  kv::push_fault_name(kv::PushFault(s->fault)), s->fault_chunk);
              if (!o.corrupt) return kExitRejected;
              ++rejected;
              continue;
            }
            if (o.corrupt) {
              std::printf("NOT REJECTED: D accepted a corrupted push (%s, %s)\n",
                          o.transports[t].c_str(), push_mode_name(m));
              return kExitFailed;
            }
            if (rep < o.warmup) continue;
            Samples& x = samples[{p, c, int(m), t}];
            x.seconds.push_back(s->seconds);
            x.cpu.push_back(s->cpu_seconds + v.cpu_seconds);
          }
    }
  }
  if (o.corrupt) {
    std::printf("--corrupt: D rejected all %d corrupted pushes\n", rejected);
    return kExitRejected;
  }
  std::printf(
      "\n== results: %d timed pushes per row (after %d warm-up), transports interleaved ==\n"
      "payload: push stream bytes (KV objects in kv/pd_wire.h frames); chunks: their count, "
      "each with its 40-byte header\n"
      "median/p90: ms from P's first byte to D's last answer (D checks every chunk, frame and "
      "object);\nGB/s: payload / median; vs_tcp: tcp's median / this median (>1 = faster than "
      "tcp); us/chunk: median / chunks;\ncpu_ms: median CPU of P and D together over the push "
      "(busy polling counts)\n",
      o.repeats, o.warmup);
  std::printf("%10s %9s %6s %-9s %-12s %9s %9s %7s %7s %9s %8s\n", "payload", "chunk", "chunks",
              "protocol", "transport", "median_ms", "p90_ms", "GB/s", "vs_tcp", "us/chunk",
              "cpu_ms");
  for (uint64_t p : o.payloads)
    for (uint64_t c : o.chunks)
      for (PushMode m : o.modes) {
        double tcp_median = 0;
        for (size_t t = 0; t < links.size(); ++t)
          if (o.transports[t] == "tcp")
            tcp_median = quantile(samples[{p, c, int(m), t}].seconds, 0.5);
        for (size_t t = 0; t < links.size(); ++t) {
          const Samples& x = samples[{p, c, int(m), t}];
          const double med = quantile(x.seconds, 0.5), p90 = quantile(x.seconds, 0.9);
          char vs[16] = "-";
          if (tcp_median > 0) std::snprintf(vs, sizeof vs, "%.2f", tcp_median / med);
          const uint32_t n = chunk_count(p, c);
          std::printf("%10llu %9llu %6u %-9s %-12s %9.2f %9.2f %7.2f %7s %9.1f %8.2f\n",
                      (unsigned long long)p, (unsigned long long)c, n, push_mode_name(m),
                      o.transports[t].c_str(), med * 1e3, p90 * 1e3, double(p) / med / 1e9, vs,
                      med * 1e6 / n, quantile(x.cpu, 0.5) * 1e3);
        }
      }
  std::printf(
      "all pushes verified: every chunk's checksum, every object, and the objects equal "
      "to those sent\n");
  return kExitOk;
}

int run(int argc, char** argv) {
  Options o;
  const std::string err = parse_args(argc, argv, &o);
  if (err == "help") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (!err.empty()) {
    std::fprintf(stderr, "fathom_pd_transport_bench: %s\n%s", err.c_str(), kUsage);
    return kExitUsage;
  }
  int ctl[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, ctl) != 0) {
    std::perror("socketpair");
    return kExitFailed;
  }
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) {
    std::perror("fork");
    return kExitFailed;
  }
  if (child == 0) {
    ::close(ctl[0]);
    ::alarm(unsigned(o.timeout_s));
    const int rc = run_receiver(o, ctl[1]);
    std::fflush(nullptr);
    ::_exit(rc);
  }
  ::close(ctl[1]);
  ::alarm(unsigned(o.timeout_s));
  int rc = run_sender(o, ctl[0]);
  ::close(ctl[0]);
  if (rc != kExitOk) ::kill(child, SIGTERM);  // it may wait on a link P has left
  int status = 0;
  ::waitpid(child, &status, 0);
  const int child_rc = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailed;
  if (rc == kExitOk && child_rc != kExitOk) {
    std::fprintf(stderr, "the receiver exited with %d\n", child_rc);
    rc = child_rc == kExitRejected ? kExitRejected : kExitFailed;
  }
  return rc;
}

}  // namespace
}  // namespace fathom::bench

int main(int argc, char** argv) { return fathom::bench::run(argc, argv); }
