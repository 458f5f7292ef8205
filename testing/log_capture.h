#ifndef GDT_TESTING_LOG_CAPTURE_H_
#define GDT_TESTING_LOG_CAPTURE_H_

// The log lines a test's code writes through spdlog's default logger.

#include <memory>
#include <sstream>
#include <string>

#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace gdt::test {

// Makes a capturing logger spdlog's default while it lives, and puts the
// previous one back after.
class LogCapture {
 public:
  LogCapture()
      : previous_(spdlog::default_logger()),
        capture_(std::make_shared<spdlog::logger>(
            "capture",
            std::make_shared<spdlog::sinks::ostream_sink_mt>(text_))) {
    spdlog::set_default_logger(capture_);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // What was logged so far.
  std::string text() {
    capture_->flush();
    return text_.str();
  }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::logger> capture_;
};

}  // namespace gdt::test

#endif  // GDT_TESTING_LOG_CAPTURE_H_
