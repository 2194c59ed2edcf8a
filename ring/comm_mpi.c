// SPDX-License-Identifier: MIT
// The MPI transport: nonblocking point-to-point on a private duplicate of
// the caller's communicator, one MPI_Request per slot, and MPI_Allreduce
// for the ring's agreements. Every MPI call is checked; its error string
// becomes the transport's text.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "flashattn_mpi.h"
#include "ring_internal.h"

typedef struct comm_mpi {
  MPI_Comm comm;
  MPI_Request req[FA_COMM_SLOTS];
  char err[MPI_MAX_ERROR_STRING + 64];
} comm_mpi;

static int mpi_fail(comm_mpi *m, const char *what, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS)
    snprintf(text, sizeof text, "MPI error %d", rc);
  snprintf(m->err, sizeof m->err, "%s: %s", what, text);
  return rc ? rc : 1;
}

static int bad_slot(comm_mpi *m, int slot, size_t bytes) {
  if (slot < 0 || slot >= FA_COMM_SLOTS) {
    snprintf(m->err, sizeof m->err, "slot %d out of [0, %d)", slot,
             FA_COMM_SLOTS);
    return 1;
  }
  if (bytes > (size_t)INT_MAX) {
    snprintf(m->err, sizeof m->err,
             "a message of %zu bytes exceeds MPI's int count (%d); use more "
             "ranks or a smaller batch",
             bytes, INT_MAX);
    return 1;
  }
  if (m->req[slot] != MPI_REQUEST_NULL) {
    snprintf(m->err, sizeof m->err, "slot %d is still in use", slot);
    return 1;
  }
  return 0;
}

static int mpi_post_send(void *self, int slot, const void *buf, size_t bytes,
                         int peer, int tag) {
  comm_mpi *m = self;
  if (bad_slot(m, slot, bytes)) return 1;
  int rc =
      MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm, &m->req[slot]);
  return rc == MPI_SUCCESS ? 0 : mpi_fail(m, "MPI_Isend", rc);
}

static int mpi_post_recv(void *self, int slot, void *buf, size_t bytes,
                         int peer, int tag) {
  comm_mpi *m = self;
  if (bad_slot(m, slot, bytes)) return 1;
  int rc =
      MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm, &m->req[slot]);
  return rc == MPI_SUCCESS ? 0 : mpi_fail(m, "MPI_Irecv", rc);
}

static int mpi_wait(void *self, int slot) {
  comm_mpi *m = self;
  if (slot < 0 || slot >= FA_COMM_SLOTS) return bad_slot(m, slot, 0);
  if (m->req[slot] == MPI_REQUEST_NULL) return 0;
  int rc = MPI_Wait(&m->req[slot], MPI_STATUS_IGNORE);
  return rc == MPI_SUCCESS ? 0 : mpi_fail(m, "MPI_Wait", rc);
}

static int mpi_allreduce_max(void *self, int64_t *values, int n) {
  comm_mpi *m = self;
  int rc =
      MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_INT64_T, MPI_MAX, m->comm);
  return rc == MPI_SUCCESS ? 0 : mpi_fail(m, "MPI_Allreduce", rc);
}

static const char *mpi_error(void *self) { return ((comm_mpi *)self)->err; }

static void mpi_destroy(void *self) {
  comm_mpi *m = self;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    for (int i = 0; i < FA_COMM_SLOTS; i++)
      if (m->req[i] != MPI_REQUEST_NULL) {
        MPI_Cancel(&m->req[i]);
        MPI_Request_free(&m->req[i]);
      }
    MPI_Comm_free(&m->comm);
  }
  free(m);
}

fa_status fa_comm_create_mpi(MPI_Comm comm, fa_comm **out) {
  ring_clear_error();
  if (!out) return ring_fail(FA_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized)
    return ring_fail(FA_ERR_INVALID_ARGUMENT,
                     "MPI is %s (the program "
                     "initialises MPI; the library never calls MPI_Init)",
                     finalized ? "finalized" : "not initialized");
  if (comm == MPI_COMM_NULL)
    return ring_fail(FA_ERR_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
  comm_mpi *m = calloc(1, sizeof *m);
  fa_comm *c = calloc(1, sizeof *c);
  if (!m || !c) {
    free(m);
    free(c);
    return ring_fail(FA_ERR_OUT_OF_MEMORY, "MPI communicator: out of memory");
  }
  for (int i = 0; i < FA_COMM_SLOTS; i++) m->req[i] = MPI_REQUEST_NULL;
  m->comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(comm, &m->comm);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->comm, &c->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(m->comm, &c->size);
  if (rc != MPI_SUCCESS) {
    mpi_fail(m, "MPI_Comm_dup/rank/size", rc);
    fa_status s = ring_fail(FA_ERR_BACKEND, "transport: %s", m->err);
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    free(m);
    free(c);
    return s;
  }
  c->struct_size = sizeof *c;
  c->self = m;
  c->memory = FA_COMM_HOST_MEMORY;
  c->post_send = mpi_post_send;
  c->post_recv = mpi_post_recv;
  c->wait = mpi_wait;
  c->allreduce_max = mpi_allreduce_max;
  c->error = mpi_error;
  c->destroy = mpi_destroy;
  *out = c;
  return FA_OK;
}
