// SPDX-License-Identifier: MIT
// The NCCL transport. "host": what runs without a GPU (the library loads,
// its argument checks fail cleanly with a message naming the field).
// "device": a one-rank NCCL communicator on GPU 0 exchanging blocks with
// itself and its all-reduce;
// "device2": two ranks on GPUs 0 and 1, one thread each, exchanging blocks
// around the ring as the ring layer does (post receive and send, start,
// wait) and agreeing with the all-reduce. Device modes skip (77) without
// enough CUDA devices; the ring layer's multi-GPU run is its own issue.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn_nccl.h"

#define RING_BYTES (3u << 20)

typedef struct rank_arg {
  ncclComm_t comm;
  int dev, fails;
} rank_arg;

// Three ring steps: each forwards what it received, so after step t rank r
// holds the block of rank (r - t - 1) mod 2, filled with that rank's byte.
static void *ring_rank(void *p) {
  rank_arg *a = p;
  cudaSetDevice(a->dev);
  cudaStream_t st;
  unsigned char *buf[2], *host = malloc(RING_BYTES);
  fa_comm *c = NULL;
  if (cudaStreamCreate(&st) != cudaSuccess ||
      cudaMalloc((void **)&buf[0], RING_BYTES) != cudaSuccess ||
      cudaMalloc((void **)&buf[1], RING_BYTES) != cudaSuccess ||
      fa_comm_create_nccl(a->comm, st, &c)) {
    printf("FAIL rank %d setup: %s\n", a->dev, fa_ring_last_error());
    a->fails++;
    return NULL;
  }
  const int n = c->size, r = c->rank;
  cudaMemsetAsync(buf[0], 0x10 + r, RING_BYTES, st);
  for (int t = 0; t < 3; t++) {
    const int cur = t & 1;
    if (c->post_recv(c->self, 0, buf[cur ^ 1], RING_BYTES, (r - 1 + n) % n,
                     1) ||
        c->post_send(c->self, 1, buf[cur], RING_BYTES, (r + 1) % n, 1) ||
        c->start(c->self) || c->wait(c->self, 0) || c->wait(c->self, 1)) {
      printf("FAIL rank %d step %d: %s\n", r, t, c->error(c->self));
      a->fails++;
      break;
    }
    cudaMemcpyAsync(host, buf[cur ^ 1], RING_BYTES, cudaMemcpyDeviceToHost, st);
    cudaStreamSynchronize(st);
    const unsigned char want = (unsigned char)(0x10 + (r - t - 1 + 2 * n) % n);
    for (size_t i = 0; i < RING_BYTES; i += 4099)
      if (host[i] != want) {
        printf("FAIL rank %d step %d: byte %zu is 0x%x, want 0x%x\n", r, t, i,
               host[i], want);
        a->fails++;
        break;
      }
  }
  int64_t v[2] = {r, -r};
  if (c->allreduce_max(c->self, v, 2) || v[0] != n - 1 || v[1] != 0) {
    printf("FAIL rank %d all-reduce: %lld %lld\n", r, (long long)v[0],
           (long long)v[1]);
    a->fails++;
  }
  fa_comm_destroy(c);
  cudaFree(buf[0]);
  cudaFree(buf[1]);
  cudaStreamDestroy(st);
  free(host);
  return NULL;
}

static int two_ranks(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    printf("SKIP: fewer than 2 CUDA devices here\n");
    return 77;
  }
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) {
    printf("FAIL: ncclCommInitAll\n");
    return 1;
  }
  rank_arg a[2] = {{comms[0], 0, 0}, {comms[1], 1, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, ring_rank, &a[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) ncclCommDestroy(comms[i]);
  const int fails = a[0].fails + a[1].fails;
  printf("%s: nccl two-rank ring exchange\n", fails ? "FAIL" : "ok");
  return fails ? 1 : 0;
}

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
  if (strcmp(mode, "device2") == 0) return two_ranks();
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    printf("SKIP: no CUDA device here\n");
    return 77;
  }
  // One rank: the same exchange with itself (NCCL sends to self).
  ncclComm_t nc;
  int dev = 0;
  if (ncclCommInitAll(&nc, 1, &dev) != ncclSuccess) {
    printf("FAIL: ncclCommInitAll\n");
    return 1;
  }
  rank_arg one = {nc, 0, 0};
  ring_rank(&one);
  fails += one.fails;
  ncclCommDestroy(nc);
  printf("%s: nccl device checks\n", fails ? "FAIL" : "ok");
  return fails ? 1 : 0;
}
