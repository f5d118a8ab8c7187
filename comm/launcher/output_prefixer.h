// output_prefixer.h: turns the byte stream of one rank's stdout or stderr into whole lines for hetcomm-run's own
// stdout or stderr, each prefixed with "[rank] ", so that two ranks never share a line of the merged output.
//
// It does no I/O: feed() and finish() append the bytes to write to a string, and the launcher's event loop writes
// them. Not thread-safe; one loop owns every prefixer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hetcomm::comm {

class OutputPrefixer {
 public:
  // A line longer than this is cut and emitted in pieces, each a line of its own: a rank printing without newlines
  // (a progress bar redrawn with '\r') must not grow the launcher's memory without bound.
  static constexpr size_t kMaxLineBytes = size_t{1} << 20;

  // prefix "" (--no-prefix) passes the bytes through unchanged, still one whole line at a time.
  explicit OutputPrefixer(std::string prefix) : prefix_(std::move(prefix)) {}

  // Appends every line that data completes, prefixed, to out; keeps the trailing partial line for later.
  void feed(std::string_view data, std::string& out);
  // End of the stream: appends the partial line, if any. With a prefix it gets the newline it lacked (the next
  // prefix must start a line); without one the bytes stay exactly as the rank wrote them.
  void finish(std::string& out);

 private:
  void emitPartial(std::string& out);

  std::string prefix_;
  std::string partial_;  // bytes after the last newline seen so far
};

}  // namespace hetcomm::comm
