/* MPI ping-pong latency: the Open MPI peer of hetcomm's p2p_latency (see run-latency.sh), like osu_latency.
 *
 * Rank 0 sends `size` bytes to rank 1 with MPI_Send and waits for them back with MPI_Recv; rank 1 mirrors it.
 * The latency is half the round trip. Per size: `warmup` untimed round trips, a barrier, `iters` timed ones, each
 * timed alone; rank 0 prints the mean, the median and the 90th percentile in p2p_latency's layout:
 *     size(B)  mean(us)  median(us)  p90(us)
 * Ranks other than 0 and 1 wait at the barriers.
 *
 * Build: mpicc -O2 mpi_latency.c -o mpi_latency
 * Run:   mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca pml ob1 --mca btl vader,self \
 *               ./mpi_latency --sizes 8,64,4K --iters 10000 --warmup 1000
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static size_t parse_bytes(const char* s) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  switch (*end) {
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    default: break;
  }
  return (size_t)v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* sizes = "8,64,512,4K";
  int iters = 10000, warmup = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--sizes")) sizes = argv[i + 1];
    else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
  }
  if (n < 2 || iters < 1 || warmup < 0) {
    if (rank == 0) fprintf(stderr, "mpi_latency: needs 2 ranks, --iters >= 1, --warmup >= 0\n");
    MPI_Finalize();
    return 2;
  }
  double* samples = malloc(sizeof(double) * (size_t)iters);
  char* buf = malloc(1 << 20);
  memset(buf, rank + 1, 1 << 20);
  if (rank == 0) printf("#%12s %10s %10s %10s\n", "size(B)", "mean(us)", "median(us)", "p90(us)");
  char* list = strdup(sizes);
  for (char* tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    size_t size = parse_bytes(tok);
    if (size == 0 || size > (1 << 20)) continue;
    for (int i = -warmup; i < iters; ++i) {
      if (i == 0) MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
      if (i >= 0) samples[i] = (MPI_Wtime() - t0) * 1e6 / 2;
    }
    double sum = 0;
    for (int i = 0; i < iters; ++i) sum += samples[i];
    qsort(samples, (size_t)iters, sizeof(double), cmp);
    if (rank == 0) printf(" %12zu %10.2f %10.2f %10.2f\n", size, sum / iters, samples[iters / 2], samples[iters * 9 / 10]);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  free(list);
  free(samples);
  free(buf);
  MPI_Finalize();
  return 0;
}
