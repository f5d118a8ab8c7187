// library_watch.h: whether a shared library is mapped into this process, cheaply enough to ask on every call.
//
// The CUDA paths ask "is libcuda loaded?" for every buffer of every call: a process that never touched CUDA cannot
// hold a device pointer. dlopen(name, RTLD_NOLOAD) answers that, but for a library that is not loaded it searches
// the library path first (about 50 failed opens and a map of the stub: 0.3-0.6 ms a call on the development VM,
// which made every small call cost that much). Here the dynamic linker's count of objects loaded so far
// (dl_iterate_phdr's dlpi_adds, the same on every entry) is read from the first entry, and the list is scanned
// again only when the count has moved. A library found stays found (hetcomm never unloads CUDA).
//
// Header-only so that libnccl.so.2, which links only libhetcomm's public API, uses the same code.
#pragma once

#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstring>

namespace hetcomm {

class LibraryWatch {
 public:
  // prefix: the start of the library's file name, e.g. "libcuda.so" (matches libcuda.so.1 and the stub
  // libcuda.so, not libcudart.so).
  explicit LibraryWatch(const char* prefix) : prefix_(prefix), prefixLen_(std::strlen(prefix)) {}

  bool loaded() {
    if (seen_.load(std::memory_order_relaxed)) return true;
    Scan s{this, scannedAt_.load(std::memory_order_relaxed)};
    dl_iterate_phdr(&LibraryWatch::visit, &s);
    if (s.found)
      seen_.store(true, std::memory_order_relaxed);
    else if (s.counted)
      scannedAt_.store(s.adds, std::memory_order_relaxed);
    return s.found;
  }

 private:
  struct Scan {
    const LibraryWatch* watch;
    unsigned long long last;  // the count at the last full scan (~0: none yet)
    unsigned long long adds = 0;
    bool first = true, counted = false, found = false;
  };

  static int visit(dl_phdr_info* info, size_t size, void* arg) {
    auto* s = static_cast<Scan*>(arg);
    if (s->first) {
      s->first = false;
      // Old dynamic linkers pass a shorter struct without the counters: then every call scans.
      if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds)) {
        s->adds = info->dlpi_adds;
        s->counted = true;
        if (s->adds == s->last) return 1;  // nothing loaded since the last scan found nothing
      }
    }
    const char* name = info->dlpi_name ? info->dlpi_name : "";
    const char* slash = std::strrchr(name, '/');
    const char* base = slash ? slash + 1 : name;
    if (std::strncmp(base, s->watch->prefix_, s->watch->prefixLen_) == 0) {
      s->found = true;
      return 1;
    }
    return 0;
  }

  const char* prefix_;
  size_t prefixLen_;
  std::atomic<bool> seen_{false};
  std::atomic<unsigned long long> scannedAt_{~0ull};
};

}  // namespace hetcomm
