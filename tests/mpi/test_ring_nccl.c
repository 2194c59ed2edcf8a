// SPDX-License-Identifier: MIT
// The NCCL transport. "host": what runs without a GPU (the library loads,
// its argument checks fail cleanly with a message naming the field).
// "device": a one-rank NCCL communicator ring on GPU 0 — skips (77) where
// no CUDA device exists; the multi-GPU run is its own issue.
#include <stdio.h>
#include <string.h>

#include "flashattn_nccl.h"

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "host";
  int fails = 0;
  if (strcmp(mode, "host") == 0) {
    fa_comm *c = (fa_comm *)1;
    fa_status s = fa_comm_create_nccl(NULL, NULL, &c);
    if (s != FA_ERR_INVALID_ARGUMENT || c != NULL ||
        !strstr(fa_ring_last_error(), "comm")) {
      printf("FAIL NULL comm: status %d, \"%s\"\n", s, fa_ring_last_error());
      fails++;
    }
    s = fa_comm_create_nccl(NULL, NULL, NULL);
    if (s != FA_ERR_INVALID_ARGUMENT || !strstr(fa_ring_last_error(), "out")) {
      printf("FAIL NULL out: status %d, \"%s\"\n", s, fa_ring_last_error());
      fails++;
    }
    fa_comm_destroy(NULL);
    printf("%s: nccl host checks (NCCL %d)\n", fails ? "FAIL" : "ok",
           NCCL_VERSION_CODE);
    return fails ? 1 : 0;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    printf("SKIP: no CUDA device here\n");
    return 77;
  }
  ncclComm_t nc;
  int dev = 0;
  if (ncclCommInitAll(&nc, 1, &dev) != ncclSuccess) {
    printf("FAIL: ncclCommInitAll\n");
    return 1;
  }
  fa_comm *c = NULL;
  fa_status s = fa_comm_create_nccl(nc, NULL, &c);
  int64_t v[2] = {3, -4};
  if (s || c->size != 1 || c->rank != 0 || c->allreduce_max(c->self, v, 2) ||
      v[0] != 3 || v[1] != -4) {
    printf("FAIL: one-rank NCCL communicator: %s\n", fa_ring_last_error());
    fails++;
  }
  fa_comm_destroy(c);
  ncclCommDestroy(nc);
  printf("%s: nccl device checks\n", fails ? "FAIL" : "ok");
  return fails ? 1 : 0;
}
