/* MPI_Allreduce benchmark: the MPI peer of hetcomm's foundation comparison (see run-foundation.sh).
 *
 * float32, MPI_SUM, out-of-place. For each size: one verified call, `warmup` untimed calls, MPI_Barrier,
 * `iters` timed calls (MPI_Wtime); the per-call time is averaged over ranks and rank 0 prints one row in
 * nccl-tests' column layout:
 *     size(B)  count  type  redop  root  time(us)  algbw(GB/s)  busbw(GB/s)  #wrong
 * with GB = 1e9 bytes and busbw = algbw * 2(n-1)/n (the busbw is the 8th field, as in nccl-tests).
 *
 * Build: mpicc -O2 mpi_allreduce.c -o mpi_allreduce
 * Run (Open MPI's TCP BTL on loopback, as root):
 *     mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca pml ob1 --mca btl tcp,self \
 *            --mca btl_tcp_if_include lo ./mpi_allreduce --sizes 1M,64M --iters 20 --warmup 5
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0;

static void usage(const char* prog, const char* why) {
  if (g_rank == 0)
    fprintf(stderr,
            "%s: %s\nusage: %s [--sizes 1M,64M] [--iters 20] [--warmup 5]\n"
            "  sizes are bytes, with optional K/M/G (binary) suffix\n",
            prog, why, prog);
  MPI_Finalize();
  exit(2);
}

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

/* nccl-tests' number formatting: %.2f, then %.1f, then %.0f, then %.1e, whatever fits the width. */
static const char* fmt_num(char* buf, size_t len, double v, int width) {
  const char* fmts[] = {"%.2f", "%.1f", "%.0f"};
  for (int i = 0; i < 3; ++i) {
    snprintf(buf, len, fmts[i], v);
    if ((int)strlen(buf) <= width) return buf;
  }
  snprintf(buf, len, "%.1e", v);
  return buf;
}

static inline float input_value(int r, size_t i) { return (float)((r + 1) * (int)(1 + i % 7)); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  size_t sizes[64];
  int nsizes = 2;
  sizes[0] = (size_t)1 << 20;
  sizes[1] = (size_t)64 << 20;
  int iters = 20, warmup = 5;
  for (int i = 1; i < argc; ++i) {
    const char* k = argv[i];
    if (i + 1 >= argc) usage(argv[0], "missing value");
    const char* v = argv[++i];
    if (!strcmp(k, "--iters") || !strcmp(k, "-n")) iters = atoi(v);
    else if (!strcmp(k, "--warmup") || !strcmp(k, "-w")) warmup = atoi(v);
    else if (!strcmp(k, "--sizes")) {
      nsizes = 0;
      char* copy = strdup(v);
      for (char* tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        if (nsizes == 64 || parse_bytes(tok, &sizes[nsizes]) != 0) usage(argv[0], "bad --sizes");
        ++nsizes;
      }
      free(copy);
    } else usage(argv[0], "unknown argument");
  }
  if (iters < 1 || warmup < 0 || nsizes == 0) usage(argv[0], "bad iters/warmup/sizes");

  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  int failures = 0;
  if (g_rank == 0) {
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    char* nl = strchr(ver, '\n');
    if (nl) *nl = '\0';
    char* comma = strchr(ver, ',');
    if (comma) *comma = '\0';
    printf("# mpi_allreduce: %s, nranks %d, MPI_Allreduce float sum out-of-place, warmup %d, iters %d\n", ver, n,
           warmup, iters);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
  }

  for (int s = 0; s < nsizes; ++s) {
    size_t count = sizes[s] / sizeof(float);
    if (count == 0) continue;
    if (count > (size_t)0x7fffffff) usage(argv[0], "size too large for an int count");
    size_t bytes = count * sizeof(float);
    float* in = (float*)malloc(bytes);
    float* out = (float*)malloc(bytes);
    if (!in || !out) {
      fprintf(stderr, "mpi_allreduce rank %d: out of memory\n", g_rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < count; ++i) in[i] = input_value(g_rank, i);
    memset(out, 0, bytes);

    /* Verified call. */
    MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0, wrong_all = 0;
    for (size_t i = 0; i < count; ++i) {
      float expect = 0;
      for (int r = 0; r < n; ++r) expect += input_value(r, i);
      if (out[i] != expect) ++wrong;
    }
    MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (wrong_all) ++failures;

    for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double sec = (MPI_Wtime() - t0) / iters, sec_sum = 0;
    MPI_Allreduce(&sec, &sec_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    sec = sec_sum / n;

    double algbw = (double)bytes / 1e9 / sec, busbw = algbw * bus_factor;
    if (g_rank == 0) {
      char b1[64], b2[64], b3[64];
      printf("%12zu  %12zu  %8s  %6s  %6s  %7s  %6s  %6s  %6ld\n", bytes, count, "float", "sum", "-1",
             fmt_num(b1, sizeof b1, sec * 1e6, 7), fmt_num(b2, sizeof b2, algbw, 6),
             fmt_num(b3, sizeof b3, busbw, 6), wrong_all);
      fflush(stdout);
    }
    free(in);
    free(out);
  }

  if (g_rank == 0) {
    printf("# Out of bounds values : %d %s\n", failures, failures ? "FAILED" : "OK");
    fflush(stdout);
  }
  MPI_Finalize();
  if (failures) {
    fprintf(stderr, "mpi_allreduce rank %d: wrong allreduce result\n", g_rank);
    return 1;
  }
  return 0;
}
