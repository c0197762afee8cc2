// Errors: kiln reports bad input by throwing kiln::Error with a message that names the file,
// key, tensor or step and says what to do. The CLI catches it, prints it and exits non-zero.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "core/exit_codes.h"

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

// A read or write that the system failed (EIO, too many open files, out of memory for a
// mapping), as opposed to input that was refused: trying again may succeed.
class IoError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail_io(fmt::format_string<Args...> f, Args&&... args) {
  throw IoError(fmt::format(f, std::forward<Args>(args)...));
}

// Runs f. An Error it throws (not already carrying an exit code, nor an IoError) becomes an
// ExitCodeError with
// kExitBadInput: for start-up work whose failure means the input is refused (data, checkpoint,
// run directory), which the same command would repeat, so launchers do not retry it.
template <typename F>
void refused_as_bad_input(F&& f) {
  try {
    f();
  } catch (const ExitCodeError&) {
    throw;
  } catch (const IoError&) {
    throw;  // the system's failure, not the input's: a launcher may retry
  } catch (const Error& e) {
    throw ExitCodeError(kExitBadInput, e.what());
  }
}

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
