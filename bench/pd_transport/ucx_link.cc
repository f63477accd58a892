// UCX UCP tag API: one context (its own UCX_TLS), one worker and one endpoint per process.
// Chunks travel with tag kChunkTag P -> D, acknowledgements with kAckTag D -> P; UCX picks
// eager or rendezvous (zero-copy where the transport has it) by message size. Progress is
// driven by the calling thread: busy polling (UCX's default, what NIXL and MPI do), or with
// UcxLinkOptions::wait, sleeping on the worker's event fd between progress calls.
#include <poll.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <vector>

#include "link.h"

namespace fathom::bench {
namespace {

constexpr ucp_tag_t kChunkTag = 1, kAckTag = 2, kFullMask = ~ucp_tag_t(0);

Status ucx_status(const char* what, ucs_status_t s) {
  return io_error(std::string(what) + ": " + ucs_status_string(s));
}

class UcxLink final : public Link {
 public:
  UcxLink(Side side, const UcxLinkOptions& o)
      : side_(side),
        o_(o),
        buf_{std::make_unique<char[]>(cap()), std::make_unique<char[]>(cap())} {}
  UcxLink(const UcxLink&) = delete;
  UcxLink& operator=(const UcxLink&) = delete;

  ~UcxLink() override {
    if (pending_recv_ != nullptr) {
      ucp_request_cancel(worker_, pending_recv_);
      (void)wait(pending_recv_);
      ucp_request_free(pending_recv_);
    }
    for (void* r : posted_) {
      ucp_request_cancel(worker_, r);
      (void)wait(r);
      ucp_request_free(r);
    }
    if (ep_ != nullptr) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
      if (UCS_PTR_IS_PTR(r)) {
        (void)wait(r);
        ucp_request_free(r);
      }
    }
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
  }

  Status open(int control_fd) {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return ucx_status("ucp_config_read", s);
    s = ucp_config_modify(config, "TLS", o_.tls.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return ucx_status(("UCX_TLS=" + o_.tls).c_str(), s);
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | (o_.wait ? UCP_FEATURE_WAKEUP : 0);
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return ucx_status("ucp_init", s);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    s = ucp_worker_create(context_, &wp, &worker_);
    if (s != UCS_OK) return ucx_status("ucp_worker_create", s);
    if (o_.wait) {
      s = ucp_worker_get_efd(worker_, &efd_);
      if (s != UCS_OK) return ucx_status("ucp_worker_get_efd", s);
    }
    // Worker addresses over the control descriptor: the receiver's first, then the sender's.
    ucp_address_t* mine = nullptr;
    size_t mine_len = 0;
    s = ucp_worker_get_address(worker_, &mine, &mine_len);
    if (s != UCS_OK) return ucx_status("ucp_worker_get_address", s);
    std::vector<char> peer;
    Status st = Status::ok();
    const auto send_mine = [&] {
      const uint64_t n = mine_len;
      st = write_full(control_fd, &n, sizeof n);
      if (st.is_ok()) st = write_full(control_fd, mine, mine_len);
    };
    const auto read_peer = [&] {
      uint64_t n = 0;
      st = read_full(control_fd, &n, sizeof n);
      if (st.is_ok() && n > (uint64_t(1) << 20)) st = io_error("a UCX worker address too long");
      if (st.is_ok()) peer.resize(size_t(n));
      if (st.is_ok()) st = read_full(control_fd, peer.data(), peer.size());
    };
    if (side_ == Side::kReceiver) {
      send_mine();
      if (st.is_ok()) read_peer();
    } else {
      read_peer();
      if (st.is_ok()) send_mine();
    }
    ucp_worker_release_address(worker_, mine);
    FATHOM_RETURN_IF_ERROR(st);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    s = ucp_ep_create(worker_, &ep, &ep_);
    if (s != UCS_OK) return ucx_status("ucp_ep_create", s);
    // One exchange each way so that both endpoints are wired up before anything is timed.
    if (side_ == Side::kSender) {
      FATHOM_RETURN_IF_ERROR(send("hello"));
      FATHOM_ASSIGN_OR_RETURN(std::string_view a, recv_tag(kAckTag, 0));
      if (a != "hello") return io_error("UCX wire-up: an unexpected answer");
    } else {
      FATHOM_ASSIGN_OR_RETURN(std::string_view a, recv_tag(kChunkTag, 0));
      if (a != "hello") return io_error("UCX wire-up: an unexpected greeting");
      FATHOM_RETURN_IF_ERROR(send("hello"));
    }
    return Status::ok();
  }

  Status send(std::string_view msg) override {
    FATHOM_RETURN_IF_ERROR(post_send(msg));
    return flush();
  }

  Status post_send(std::string_view msg) override {
    ucp_request_param_t p{};
    const ucp_tag_t tag = side_ == Side::kSender ? kChunkTag : kAckTag;
    ucs_status_ptr_t r = ucp_tag_send_nbx(ep_, msg.data(), msg.size(), tag, &p);
    if (UCS_PTR_IS_ERR(r)) return ucx_status("ucp_tag_send_nbx", UCS_PTR_STATUS(r));
    if (r != nullptr) posted_.push_back(r);
    return Status::ok();
  }

  Status flush() override {
    Status st = Status::ok();
    for (void* r : posted_) {
      const ucs_status_t s = wait(r);
      if (s != UCS_OK && st.is_ok()) st = ucx_status("send", s);
      ucp_request_free(r);
    }
    posted_.clear();
    return st;
  }

  Result<std::string_view> recv(bool more) override {
    return recv_tag(side_ == Side::kReceiver ? kChunkTag : kAckTag, more);
  }

  std::string describe() const override {
    std::string out = "UCP tag API, UCX_TLS=" + o_.tls + ", progress " +
                      (o_.wait ? "event fd (ucp_worker_arm + poll)" : "busy polling") + "\n";
    char* text = nullptr;
    size_t len = 0;
    if (FILE* f = open_memstream(&text, &len)) {
      ucp_ep_print_info(ep_, f);
      std::fclose(f);
      out.append(text, len);
      std::free(text);
    }
    return out;
  }

 private:
  size_t cap() const { return o_.max_message > 0 ? o_.max_message : 1; }

  // Progresses the worker until `r` completes; its status.
  ucs_status_t wait(void* r) {
    for (;;) {
      const ucs_status_t s = ucp_request_check_status(r);
      if (s != UCS_INPROGRESS) return s;
      if (ucp_worker_progress(worker_) != 0 || !o_.wait) continue;
      const ucs_status_t a = ucp_worker_arm(worker_);
      if (a == UCS_ERR_BUSY) continue;
      if (a != UCS_OK) return a;
      pollfd p{efd_, POLLIN, 0};
      ::poll(&p, 1, 1000);
    }
  }

  // What a receive's completion callback leaves: its status and the message's length.
  struct RecvSlot {
    ucs_status_t status = UCS_INPROGRESS;
    size_t length = 0;
  };
  static void on_recv(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
                      void* user_data) {
    auto* slot = static_cast<RecvSlot*>(user_data);
    slot->status = status;
    slot->length = status == UCS_OK && info != nullptr ? info->length : 0;
  }

  // Posts a receive into buffer `which`; always a request (no immediate completion), whose
  // callback fills slot_[which].
  Result<void*> post_recv(ucp_tag_t tag, int which) {
    slot_[which] = RecvSlot{};
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &UcxLink::on_recv;
    p.user_data = &slot_[which];
    ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, buf_[which].get(), cap(), tag, kFullMask, &p);
    if (UCS_PTR_IS_ERR(r)) return ucx_status("ucp_tag_recv_nbx", UCS_PTR_STATUS(r));
    if (r == nullptr) return internal_error("ucp_tag_recv_nbx completed at once");
    return static_cast<void*>(r);
  }

  // Waits for the receive into buffer `which`; the message's length.
  Result<size_t> complete_recv(void* r, int which) {
    const ucs_status_t s = wait(r);
    ucp_request_free(r);
    if (s == UCS_ERR_MESSAGE_TRUNCATED) return out_of_range("a message longer than the buffer");
    if (s != UCS_OK) return ucx_status("receive", s);
    if (slot_[which].status != UCS_OK) return ucx_status("receive", slot_[which].status);
    return slot_[which].length;
  }

  // The next message of `tag`. A receive posted ahead (pending_recv_) is the next one; with
  // `more` one more is posted into the other buffer before this one is handed out.
  Result<std::string_view> recv_tag(ucp_tag_t tag, bool more) {
    int which = next_which_;
    void* r = pending_recv_;
    pending_recv_ = nullptr;
    if (r == nullptr) {
      FATHOM_ASSIGN_OR_RETURN(r, post_recv(tag, which));
    }
    FATHOM_ASSIGN_OR_RETURN(size_t len, complete_recv(r, which));
    next_which_ = 1 - which;
    if (more) {
      FATHOM_ASSIGN_OR_RETURN(pending_recv_, post_recv(tag, next_which_));
    }
    return std::string_view(buf_[which].get(), len);
  }

  const Side side_;
  const UcxLinkOptions o_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  int efd_ = -1;
  std::unique_ptr<char[]> buf_[2];
  RecvSlot slot_[2];
  int next_which_ = 0;            // the buffer the next message goes to
  void* pending_recv_ = nullptr;  // a receive posted ahead into buf_[next_which_]
  std::vector<void*> posted_;     // sends in flight
};

}  // namespace

Result<std::unique_ptr<Link>> open_ucx_link(Side side, int control_fd, const UcxLinkOptions& o) {
  auto link = std::make_unique<UcxLink>(side, o);
  FATHOM_RETURN_IF_ERROR(link->open(control_fd));
  return std::unique_ptr<Link>(std::move(link));
}

}  // namespace fathom::bench
