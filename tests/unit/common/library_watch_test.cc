// LibraryWatch: a library's presence from the dynamic linker's list, seen again once the list grows.
#include "common/library_watch.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

namespace hetcomm {
namespace {

TEST(LibraryWatch, FindsLoadedLibrariesByFileNamePrefix) {
  EXPECT_TRUE(LibraryWatch("libc.so").loaded());
  EXPECT_TRUE(LibraryWatch("libstdc++.so").loaded());
  LibraryWatch none("libhetcomm-no-such-library.so");
  EXPECT_FALSE(none.loaded());
  EXPECT_FALSE(none.loaded());  // the second look reads only the load count
  // A prefix is matched on the file name, not the path, and must match from its start.
  EXPECT_FALSE(LibraryWatch("ibc.so").loaded());
  EXPECT_FALSE(LibraryWatch("x86_64-linux-gnu").loaded());
}

// The watch says no, a library is loaded, and the next question sees it (the load count moved).
TEST(LibraryWatch, SeesALibraryLoadedAfterItFirstSaidNo) {
  LibraryWatch bz2("libbz2.so");
  if (bz2.loaded()) GTEST_SKIP() << "libbz2 is loaded already";
  void* h = dlopen("libbz2.so.1.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) GTEST_SKIP() << "no libbz2.so.1.0 here: " << dlerror();
  EXPECT_TRUE(bz2.loaded());
  dlclose(h);
  EXPECT_TRUE(bz2.loaded());  // once found, stays found
}

}  // namespace
}  // namespace hetcomm
