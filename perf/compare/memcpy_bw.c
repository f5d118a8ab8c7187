/* Single-thread memcpy bandwidth: the reference for hetcomm's shm point-to-point comparison (see run-shm.sh).
 *
 * Two page-aligned buffers of --bytes (default 64 MiB) are allocated and touched (memset) first, one untimed
 * memcpy warms them up, then --passes timed memcpy calls (glibc's memcpy, one thread, CLOCK_MONOTONIC) follow.
 * GB/s = bytes / 1e9 / seconds of one pass (bytes copied, not bytes read + written). One header line and one row:
 *     # memcpy_bw: ...
 *     bytes  passes  best(GB/s)  median(GB/s)  worst(GB/s)
 * The 3rd field (best pass) is the figure run-shm.sh compares against.
 *
 * Build: cc -O2 memcpy_bw.c -o memcpy_bw
 * Run:   ./memcpy_bw [--bytes 64M] [--passes 10]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int parse_bytes(const char* s, size_t* out) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return -1;
  switch (*end) {
    case 'K': case 'k': v <<= 10; ++end; break;
    case 'M': case 'm': v <<= 20; ++end; break;
    case 'G': case 'g': v <<= 30; ++end; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return -1;
  *out = (size_t)v;
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void usage(const char* prog, const char* why) {
  fprintf(stderr, "%s: %s\nusage: %s [--bytes 64M] [--passes 10]\n", prog, why, prog);
  exit(2);
}

int main(int argc, char** argv) {
  size_t bytes = (size_t)64 << 20;
  int passes = 10;
  for (int i = 1; i < argc; ++i) {
    const char* k = argv[i];
    if (i + 1 >= argc) usage(argv[0], "missing value");
    const char* v = argv[++i];
    if (!strcmp(k, "--bytes")) {
      if (parse_bytes(v, &bytes) != 0 || bytes == 0) usage(argv[0], "bad --bytes");
    } else if (!strcmp(k, "--passes")) {
      passes = atoi(v);
    } else {
      usage(argv[0], "unknown argument");
    }
  }
  if (passes < 1 || passes > 100000) usage(argv[0], "bad --passes");

  size_t alloc = (bytes + 4095) & ~(size_t)4095;
  unsigned char* src = aligned_alloc(4096, alloc);
  unsigned char* dst = aligned_alloc(4096, alloc);
  double* gbs = malloc(sizeof(double) * (size_t)passes);
  if (!src || !dst || !gbs) {
    fprintf(stderr, "memcpy_bw: out of memory\n");
    return 1;
  }
  memset(src, 0x5a, alloc); /* touch every page of both buffers before timing */
  memset(dst, 0xa5, alloc);
  memcpy(dst, src, bytes);  /* untimed warm-up pass */

  unsigned long sink = 0;
  for (int p = 0; p < passes; ++p) {
    src[(size_t)p % bytes] = (unsigned char)p; /* a different source each pass: the copy can't be elided */
    double t0 = now_s();
    memcpy(dst, src, bytes);
    __asm__ __volatile__("" ::"r"(dst) : "memory");
    double t = now_s() - t0;
    sink += dst[(size_t)p % bytes];
    gbs[p] = (double)bytes / 1e9 / t;
  }
  qsort(gbs, (size_t)passes, sizeof(double), cmp_double);
  double median = passes % 2 ? gbs[passes / 2] : 0.5 * (gbs[passes / 2 - 1] + gbs[passes / 2]);
  printf("# memcpy_bw: single-thread glibc memcpy, %zu B buffers touched first, 1 untimed + %d timed passes, "
         "GB/s = 1e9 B/s (check %lu)\n",
         bytes, passes, sink);
  printf("# %10s  %6s  %10s  %12s  %11s\n", "bytes", "passes", "best(GB/s)", "median(GB/s)", "worst(GB/s)");
  printf("%12zu  %6d  %10.2f  %12.2f  %11.2f\n", bytes, passes, gbs[passes - 1], median, gbs[0]);
  free(src);
  free(dst);
  free(gbs);
  return 0;
}
