#include "push_roles.h"

#include <time.h>

#include <chrono>
#include <cstring>

namespace fathom::bench {
namespace {

double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

std::string answer(uint32_t fault, uint32_t chunk) {
  std::string a(8, '\0');
  std::memcpy(a.data(), &fault, 4);
  std::memcpy(a.data() + 4, &chunk, 4);
  return a;
}

Status read_answer(Link& link, SendOutcome* out) {
  FATHOM_ASSIGN_OR_RETURN(std::string_view a, link.recv(false));
  if (a.size() != 8) return io_error("an answer of " + std::to_string(a.size()) + " bytes");
  std::memcpy(&out->fault, a.data(), 4);
  std::memcpy(&out->fault_chunk, a.data() + 4, 4);
  return Status::ok();
}

}  // namespace

const char* push_mode_name(PushMode m) { return m == PushMode::kAck ? "ack" : "pipelined"; }

Result<SendOutcome> send_push(Link& link, const std::vector<std::string>& chunks, PushMode mode) {
  SendOutcome out;
  const double cpu0 = cpu_now();
  const auto t0 = std::chrono::steady_clock::now();
  if (mode == PushMode::kAck) {
    for (const std::string& c : chunks) {
      FATHOM_RETURN_IF_ERROR(link.send(c));
      FATHOM_RETURN_IF_ERROR(read_answer(link, &out));
      if (out.fault != 0) break;
    }
  } else {
    for (const std::string& c : chunks) FATHOM_RETURN_IF_ERROR(link.post_send(c));
    FATHOM_RETURN_IF_ERROR(link.flush());
    FATHOM_RETURN_IF_ERROR(read_answer(link, &out));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.cpu_seconds = cpu_now() - cpu0;
  return out;
}

Result<ReceiveOutcome> receive_push(Link& link, const SeededPush& want, uint32_t chunk_count,
                                    PushMode mode) {
  ReceiveOutcome out;
  const double cpu0 = cpu_now();
  kv::PushAssembler assembler(want.expect);
  Status failed = Status::ok();
  uint32_t failed_chunk = 0;
  for (uint32_t i = 0; i < chunk_count; ++i) {
    FATHOM_ASSIGN_OR_RETURN(std::string_view chunk, link.recv(i + 1 < chunk_count));
    if (!failed.is_ok()) continue;  // pipelined: drain what P already sent
    kv::PushFailure why;
    Result<bool> r = assembler.add_chunk(chunk, &why);
    if (!r.is_ok()) {
      failed = r.status();
      failed_chunk = i;
      out.fault =
          uint32_t(why.fault == kv::PushFault::kNone ? kv::PushFault::kChunkBadHeader : why.fault);
    } else if (*r != (i + 1 == chunk_count)) {
      failed = corrupt("the push ended at chunk " + std::to_string(i) + " of " +
                       std::to_string(chunk_count));
      failed_chunk = i;
      out.fault = uint32_t(kv::PushFault::kChunkCountMismatch);
    }
    if (mode == PushMode::kAck) {
      FATHOM_RETURN_IF_ERROR(link.send(answer(out.fault, i)));
      if (!failed.is_ok()) break;
    }
  }
  if (mode == PushMode::kPipelined)
    FATHOM_RETURN_IF_ERROR(
        link.send(answer(out.fault, failed.is_ok() ? chunk_count - 1 : failed_chunk)));
  out.cpu_seconds = cpu_now() - cpu0;
  if (!failed.is_ok()) {
    out.verdict = failed;
    return out;
  }
  // Outside the timed span (P's clock stopped at the answer): what arrived is what was sent.
  out.verdict = compare_push(assembler.take(), want);
  return out;
}

}  // namespace fathom::bench
