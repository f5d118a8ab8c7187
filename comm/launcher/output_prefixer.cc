#include "comm/launcher/output_prefixer.h"

namespace hetcomm::comm {

void OutputPrefixer::feed(std::string_view data, std::string& out) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(data);
      if (partial_.size() >= kMaxLineBytes) emitPartial(out);
      return;
    }
    // The common case, a whole line in one read, goes straight to out without a copy through partial_.
    out += prefix_;
    out += partial_;
    partial_.clear();
    out.append(data.substr(0, nl + 1));
    data.remove_prefix(nl + 1);
  }
}

void OutputPrefixer::finish(std::string& out) {
  if (!partial_.empty()) emitPartial(out);
}

void OutputPrefixer::emitPartial(std::string& out) {
  out += prefix_;
  out += partial_;
  if (!prefix_.empty()) out += '\n';
  partial_.clear();
}

}  // namespace hetcomm::comm
