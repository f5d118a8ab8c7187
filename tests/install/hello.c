/* hello.c: a program built out of tree against an installed hetcomm, through find_package(hetcomm CONFIG) and
 * through pkg-config (tests/install/install_check.sh). Two ranks as threads of this process
 * (hetcommCommInitAll): each sums its rank + 1 with the other's, and the program checks 3 on both. */
#include <hetcomm/hetcomm.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  hetcommComm_t comms[2];
  if (hetcommGetVersion(&version) != hetcommSuccess || hetcommCommInitAll(comms, 2, NULL) != hetcommSuccess) {
    fprintf(stderr, "hello: init failed: %s\n", hetcommGetLastError(NULL));
    return 1;
  }
  float x[2] = {1, 2}, y[2] = {0, 0};
  hetcommStream_t streams[2];
  for (int r = 0; r < 2; ++r) {
    if (hetcommStreamCreate(&streams[r]) != hetcommSuccess ||
        hetcommAllReduce(&x[r], &y[r], 1, hetcommFloat32, hetcommSum, comms[r], streams[r]) != hetcommSuccess) {
      fprintf(stderr, "hello: allreduce failed: %s\n", hetcommGetLastError(NULL));
      return 1;
    }
  }
  for (int r = 0; r < 2; ++r) {
    if (hetcommStreamSynchronize(streams[r]) != hetcommSuccess) {
      fprintf(stderr, "hello: synchronize failed: %s\n", hetcommGetLastError(NULL));
      return 1;
    }
    hetcommStreamDestroy(streams[r]);
    hetcommCommDestroy(comms[r]);
  }
  if (y[0] != 3 || y[1] != 3) {
    fprintf(stderr, "hello: got %g and %g, expected 3 and 3\n", y[0], y[1]);
    return 1;
  }
  printf("hello: hetcomm %d, allreduce over 2 ranks = %g\n", version, y[0]);
  return 0;
}
