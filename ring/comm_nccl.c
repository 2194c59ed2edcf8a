// SPDX-License-Identifier: MIT
// The NCCL transport. NCCL point-to-point operations must be grouped or a
// ring of sends deadlocks (each rank's send waits for its neighbour's
// receive queued behind that neighbour's own send), so post_* only record;
// start() launches every recorded operation as one group on a private
// communication stream that first waits for the compute stream (the data
// to send is ready), and records one event per slot; wait(slot) makes the
// compute stream wait for that event, on the device. The all-reduce of the
// ring's agreements is an ncclAllReduce on the communication stream,
// synchronised to the host (the ring needs its values there).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn_nccl.h"
#include "ring_internal.h"

typedef struct pending {
  int send, peer;
  void *buf;
  size_t bytes;
} pending;

typedef struct comm_nccl {
  ncclComm_t comm;
  cudaStream_t compute, comm_stream;
  cudaEvent_t ready, done[FA_COMM_SLOTS];
  int launched[FA_COMM_SLOTS];
  pending op[FA_COMM_SLOTS];
  int posted[FA_COMM_SLOTS];
  int64_t *dev_values;
  char err[256];
} comm_nccl;

static int cuda_fail(comm_nccl *m, const char *what, cudaError_t e) {
  snprintf(m->err, sizeof m->err, "%s: %s", what, cudaGetErrorString(e));
  return 1;
}

static int nccl_fail(comm_nccl *m, const char *what, ncclResult_t e) {
  snprintf(m->err, sizeof m->err, "%s: %s (%s)", what, ncclGetErrorString(e),
           ncclGetLastError(m->comm));
  return 1;
}

static int post(comm_nccl *m, int slot, int send, void *buf, size_t bytes,
                int peer) {
  if (slot < 0 || slot >= FA_COMM_SLOTS || m->posted[slot]) {
    snprintf(m->err, sizeof m->err, "slot %d out of range or in use", slot);
    return 1;
  }
  m->op[slot] = (pending){send, peer, buf, bytes};
  m->posted[slot] = 1;
  m->launched[slot] = 0;
  return 0;
}

static int nccl_post_send(void *self, int slot, const void *buf, size_t bytes,
                          int peer, int tag) {
  (void)tag; // NCCL orders operations between a pair of ranks: no tags
  return post(self, slot, 1, (void *)buf, bytes, peer);
}

static int nccl_post_recv(void *self, int slot, void *buf, size_t bytes,
                          int peer, int tag) {
  (void)tag;
  return post(self, slot, 0, buf, bytes, peer);
}

static int nccl_start(void *self) {
  comm_nccl *m = self;
  cudaError_t e = cudaEventRecord(m->ready, m->compute);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(m->comm_stream, m->ready, 0);
  if (e != cudaSuccess)
    return cuda_fail(m, "cudaEventRecord/StreamWaitEvent", e);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return nccl_fail(m, "ncclGroupStart", r);
  for (int i = 0; i < FA_COMM_SLOTS; i++) {
    if (!m->posted[i] || m->launched[i]) continue;
    pending *p = &m->op[i];
    r = p->send ? ncclSend(p->buf, p->bytes, ncclUint8, p->peer, m->comm,
                           m->comm_stream)
                : ncclRecv(p->buf, p->bytes, ncclUint8, p->peer, m->comm,
                           m->comm_stream);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      return nccl_fail(m, p->send ? "ncclSend" : "ncclRecv", r);
    }
  }
  r = ncclGroupEnd();
  if (r != ncclSuccess) return nccl_fail(m, "ncclGroupEnd", r);
  for (int i = 0; i < FA_COMM_SLOTS; i++) {
    if (!m->posted[i] || m->launched[i]) continue;
    e = cudaEventRecord(m->done[i], m->comm_stream);
    if (e != cudaSuccess) return cuda_fail(m, "cudaEventRecord", e);
    m->launched[i] = 1;
  }
  return 0;
}

static int nccl_wait(void *self, int slot) {
  comm_nccl *m = self;
  if (slot < 0 || slot >= FA_COMM_SLOTS) {
    snprintf(m->err, sizeof m->err, "slot %d out of range", slot);
    return 1;
  }
  if (!m->posted[slot]) return 0;
  if (!m->launched[slot] && nccl_start(m)) return 1;
  cudaError_t e = cudaStreamWaitEvent(m->compute, m->done[slot], 0);
  m->posted[slot] = m->launched[slot] = 0;
  return e == cudaSuccess ? 0 : cuda_fail(m, "cudaStreamWaitEvent", e);
}

static int nccl_allreduce_max(void *self, int64_t *values, int n) {
  comm_nccl *m = self;
  const size_t b = sizeof(int64_t) * (size_t)n;
  cudaError_t e = cudaMemcpyAsync(m->dev_values, values, b,
                                  cudaMemcpyHostToDevice, m->comm_stream);
  if (e != cudaSuccess) return cuda_fail(m, "cudaMemcpyAsync", e);
  ncclResult_t r = ncclAllReduce(m->dev_values, m->dev_values, (size_t)n,
                                 ncclInt64, ncclMax, m->comm, m->comm_stream);
  if (r != ncclSuccess) return nccl_fail(m, "ncclAllReduce", r);
  e = cudaMemcpyAsync(values, m->dev_values, b, cudaMemcpyDeviceToHost,
                      m->comm_stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(m->comm_stream);
  return e == cudaSuccess ? 0 : cuda_fail(m, "cudaStreamSynchronize", e);
}

static const char *nccl_error(void *self) { return ((comm_nccl *)self)->err; }

static void nccl_destroy(void *self) {
  comm_nccl *m = self;
  if (m->comm_stream) cudaStreamSynchronize(m->comm_stream);
  for (int i = 0; i < FA_COMM_SLOTS; i++)
    if (m->done[i]) cudaEventDestroy(m->done[i]);
  if (m->ready) cudaEventDestroy(m->ready);
  if (m->dev_values) cudaFree(m->dev_values);
  if (m->comm_stream) cudaStreamDestroy(m->comm_stream);
  free(m);
}

fa_status fa_comm_create_nccl(ncclComm_t comm, cudaStream_t stream,
                              fa_comm **out) {
  ring_clear_error();
  if (!out) return ring_fail(FA_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  if (!comm) return ring_fail(FA_ERR_INVALID_ARGUMENT, "comm is NULL");
  comm_nccl *m = calloc(1, sizeof *m);
  fa_comm *c = calloc(1, sizeof *c);
  if (!m || !c) {
    free(m);
    free(c);
    return ring_fail(FA_ERR_OUT_OF_MEMORY, "NCCL communicator: out of memory");
  }
  m->comm = comm;
  m->compute = stream;
  int bad = 0;
  ncclResult_t r = ncclCommCount(comm, &c->size);
  if (r == ncclSuccess) r = ncclCommUserRank(comm, &c->rank);
  if (r != ncclSuccess) bad = nccl_fail(m, "ncclCommCount/UserRank", r);
  cudaError_t e = cudaSuccess;
  if (!bad)
    e = cudaStreamCreateWithFlags(&m->comm_stream, cudaStreamNonBlocking);
  if (!bad && e == cudaSuccess)
    e = cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming);
  for (int i = 0; !bad && e == cudaSuccess && i < FA_COMM_SLOTS; i++)
    e = cudaEventCreateWithFlags(&m->done[i], cudaEventDisableTiming);
  if (!bad && e == cudaSuccess)
    e = cudaMalloc((void **)&m->dev_values, sizeof(int64_t) * 64);
  if (!bad && e != cudaSuccess) bad = cuda_fail(m, "CUDA setup", e);
  if (bad) {
    fa_status s = ring_fail(FA_ERR_BACKEND, "transport: %s", m->err);
    nccl_destroy(m);
    free(c);
    return s;
  }
  c->struct_size = sizeof *c;
  c->self = m;
  c->memory = FA_COMM_DEVICE_MEMORY;
  c->post_send = nccl_post_send;
  c->post_recv = nccl_post_recv;
  c->start = nccl_start;
  c->wait = nccl_wait;
  c->allreduce_max = nccl_allreduce_max;
  c->error = nccl_error;
  c->destroy = nccl_destroy;
  *out = c;
  return FA_OK;
}
