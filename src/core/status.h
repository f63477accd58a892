// Status and Result<T>: the one error type used at every Fathom library boundary.
//
// A Status is either OK or carries a code and a human-readable message. Result<T> holds a
// value or a non-OK Status. Both are plain values: cheap to move, safe to pass between
// threads, never thrown. The server maps codes to HTTP statuses; the CLI maps them to exit
// codes.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace fathom {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is malformed (bad JSON, invalid UTF-8, bad option)
  kNotFound,         // a named thing (file, token, tensor) does not exist
  kCorrupt,          // a file or buffer is damaged or does not match its format
  kUnsupported,      // valid input that uses a feature Fathom does not implement
  kOutOfRange,       // an index or size outside the allowed range
  kResourceExhausted,
  kIoError,
  kInternal,
  kCancelled,  // the work was given up: its client left, or the server is shutting down
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: message"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status corrupt(std::string m) { return Status(StatusCode::kCorrupt, std::move(m)); }
inline Status unsupported(std::string m) { return Status(StatusCode::kUnsupported, std::move(m)); }
inline Status out_of_range(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
inline Status io_error(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
inline Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }

// A value of type T or an error Status. REQUIRES: a Result built from a Status is not OK.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(implicit)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(implicit)
    assert(!status_.is_ok());
  }

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace fathom

// Propagates a non-OK Status from an expression returning Status.
#define FATHOM_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::fathom::Status fathom_status_ = (expr);           \
    if (!fathom_status_.is_ok()) return fathom_status_; \
  } while (0)

#define FATHOM_CONCAT_INNER(a, b) a##b
#define FATHOM_CONCAT(a, b) FATHOM_CONCAT_INNER(a, b)
// Declares `lhs` from a Result-returning expression, or returns its Status.
#define FATHOM_ASSIGN_OR_RETURN(lhs, expr)                   \
  auto FATHOM_CONCAT(fathom_result_, __LINE__) = (expr);     \
  if (!FATHOM_CONCAT(fathom_result_, __LINE__).is_ok())      \
    return FATHOM_CONCAT(fathom_result_, __LINE__).status(); \
  lhs = std::move(FATHOM_CONCAT(fathom_result_, __LINE__)).value()
