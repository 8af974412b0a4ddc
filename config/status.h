// Status and Result<T>: how every layer reports an error across its boundary.
// Value types; no ownership beyond the message string; safe to pass between threads.
// A message names the thing that was wrong (file, tensor, field, byte offset).
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace vv {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is malformed (bad file, bad field)
  kNotFound,         // a named file, tensor or key is missing
  kOutOfRange,       // a size, offset or limit is exceeded
  kUnsupported,      // well-formed but not handled (dtype, codec, layout)
  kResourceExhausted,
  kCancelled,
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: <message>"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).is_ok()); }  // NOLINT

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace vv

// Propagate a non-ok Status from an expression returning Status.
#define VV_RETURN_IF_ERROR(expr)          \
  do {                                    \
    ::vv::Status vv_status_ = (expr);     \
    if (!vv_status_.is_ok()) return vv_status_; \
  } while (0)

#define VV_CONCAT_INNER(a, b) a##b
#define VV_CONCAT(a, b) VV_CONCAT_INNER(a, b)
// VV_ASSIGN_OR_RETURN(auto x, expr): x = value of a Result, or return its Status.
#define VV_ASSIGN_OR_RETURN(lhs, expr)                          \
  auto VV_CONCAT(vv_result_, __LINE__) = (expr);                \
  if (!VV_CONCAT(vv_result_, __LINE__).is_ok())                 \
    return VV_CONCAT(vv_result_, __LINE__).status();            \
  lhs = std::move(VV_CONCAT(vv_result_, __LINE__)).value()
