// SPDX-License-Identifier: MIT
// A program against an installed libflashattn-ring: a one-rank ring (the
// communicator written out here, as a user's own transport would be) runs
// one causal forward, checked against fa_forward() on the same inputs.
#include <flashattn.h>
#include <flashattn_ring.h>

#include <math.h>
#include <stdio.h>

enum { B = 1, S = 33, H = 2, D = 16 };
#define N (B * S * H * D)

static float q[N], k[N], v[N], o_ring[N], o_ref[N];

// One rank has no peer: nothing is ever sent or received.
static int no_peer(void *self, int slot, const void *buf, size_t bytes,
                   int peer, int tag) {
  (void)self, (void)slot, (void)buf, (void)bytes, (void)peer, (void)tag;
  return 1;
}
static int no_peer_recv(void *self, int slot, void *buf, size_t bytes, int peer,
                        int tag) {
  return no_peer(self, slot, buf, bytes, peer, tag);
}
static int nothing_pending(void *self, int slot) {
  (void)self, (void)slot;
  return 0;
}
static int max_of_one(void *self, int64_t *values, int n) {
  (void)self, (void)values, (void)n;
  return 0;
}
static const char *error_text(void *self) {
  (void)self;
  return "a one-rank ring has no peer";
}

static fa_tensor view(float *data) {
  fa_tensor t = {0};
  t.data = data;
  t.dtype = FA_F32;
  t.stride_batch = (int64_t)S * H * D;
  t.stride_seq = (int64_t)H * D;
  t.stride_head = D;
  return t;
}

static int check(fa_status s, const char *what) {
  if (s == FA_OK) return 0;
  fprintf(stderr, "%s: %s: %s / %s\n", what, fa_status_string(s),
          fa_last_error(), fa_ring_last_error());
  return 1;
}

int main(void) {
  for (int i = 0; i < N; i++) {
    q[i] = (float)sin(0.37 * i);
    k[i] = (float)cos(0.23 * i);
    v[i] = (float)sin(0.11 * i + 1.0);
  }
  fa_comm comm = {sizeof comm};
  comm.rank = 0;
  comm.size = 1;
  comm.memory = FA_COMM_HOST_MEMORY;
  comm.post_send = no_peer;
  comm.post_recv = no_peer_recv;
  comm.wait = nothing_pending;
  comm.allreduce_max = max_of_one;
  comm.error = error_text;

  fa_context *ctx = NULL;
  if (check(fa_context_create(&ctx, FA_BACKEND_CPU, 0), "context")) return 1;
  fa_attention a;
  fa_attention_init(&a);
  a.batch = B;
  a.seqlen_q = a.seqlen_k = S;
  a.heads_q = a.heads_kv = H;
  a.head_dim = D;
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  fa_ring_options opt;
  fa_ring_options_init(&opt);
  fa_ring *ring = NULL;
  int bad =
      check(fa_ring_create(&ring, ctx, &comm, &a, &opt), "ring create") ||
      check(
          fa_ring_forward(ring, view(q), view(k), view(v), view(o_ring), NULL),
          "ring forward") ||
      check(fa_forward(ctx, &a, view(q), view(k), view(v), view(o_ref), NULL),
            "forward");
  double err = 0.0;
  for (int i = 0; !bad && i < N; i++) {
    double e = fabs((double)o_ring[i] - o_ref[i]);
    if (!(e <= err)) err = e; // NaN-sticky
  }
  fa_ring_destroy(ring);
  fa_context_destroy(ctx);
  if (bad) return 1;
  printf("one-rank ring forward, %lld local rows: max |ring - fa_forward| = "
         "%.2g\n",
         (long long)S, err);
  return err <= 1e-5 ? 0 : 1;
}
