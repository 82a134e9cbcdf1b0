// Status: the result of every can_implement() and run(). No exceptions, no allocation: the message
// lives in a fixed buffer, so a Status can be returned from code built with -fno-exceptions and
// from inside kernels.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>

namespace gated_attention {

enum class StatusCode : std::uint8_t {
  ok = 0,
  invalid_argument,     // a shape, stride, pointer or option the op can never accept
  not_supported,        // valid input this build or this CPU cannot run
  workspace_too_small,  // the caller's workspace is smaller than workspace_size()
};

inline const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::ok:
      return "ok";
    case StatusCode::invalid_argument:
      return "invalid argument";
    case StatusCode::not_supported:
      return "not supported";
    case StatusCode::workspace_too_small:
      return "workspace too small";
  }
  return "unknown";
}

class [[nodiscard]] Status {
 public:
  static constexpr std::size_t kMaxMessage = 160;

  Status() = default;  // ok

  static Status ok() { return Status(); }

  // printf-style message; truncated to kMaxMessage - 1 characters.
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 2, 3)))
#endif
  static Status
  error(StatusCode code, const char* format, ...) {
    Status s;
    s.code_ = code;
    std::va_list list;
    va_start(list, format);
    std::vsnprintf(s.message_, kMaxMessage, format, list);
    va_end(list);
    return s;
  }

  // "<tensor>: dim <dim> (<dim_name>): expected <expected>, got <got>"
  static Status shape_mismatch(const char* tensor, int dim, const char* dim_name,
                               std::int64_t expected, std::int64_t got) {
    return error(StatusCode::invalid_argument, "%s: dim %d (%s): expected %lld, got %lld", tensor,
                 dim, dim_name, static_cast<long long>(expected), static_cast<long long>(got));
  }

  bool is_ok() const {
    return code_ == StatusCode::ok;
  }
  explicit operator bool() const {
    return is_ok();
  }
  StatusCode code() const {
    return code_;
  }
  const char* message() const {
    return is_ok() ? "ok" : message_;
  }

 private:
  StatusCode code_ = StatusCode::ok;
  char message_[kMaxMessage] = {};
};

}  // namespace gated_attention

// Returns the Status of `expr` from the enclosing function if it is not ok.
#define GATED_ATTENTION_RETURN_IF_ERROR(expr)               \
  do {                                                      \
    ::gated_attention::Status status_returned_ = (expr);    \
    if (!status_returned_.is_ok()) return status_returned_; \
  } while (0)
