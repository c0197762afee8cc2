// Errors: kiln reports bad input by throwing kiln::Error with a message that names the file,
// key, tensor or step and says what to do. The CLI catches it, prints it and exits non-zero.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error that ends the command with a particular exit code (core/exit_codes.h), for the
// failures a launcher must tell apart (e.g. a diverged run is not retried).
class ExitCodeError : public Error {
 public:
  ExitCodeError(int code, const std::string& what) : Error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// KILN_CHECK guards invariants of kiln's own code (not user input): it reports file:line.
#define KILN_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond))                                                                            \
      ::kiln::fail("internal error at {}:{}: check failed: {}", __FILE__, __LINE__, #cond); \
  } while (0)

}  // namespace kiln
