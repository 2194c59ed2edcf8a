// SPDX-License-Identifier: MIT
// Errors without hangs: every failure, local or remote, becomes the same
// status and message on every rank. The only collective the communicator
// offers is a max all-reduce of a few integers, so the failing rank's
// status, rank and message travel as integers: first the lowest failing
// rank and its status, then that rank's message, eight bytes per integer.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ring_internal.h"

static _Thread_local char ring_msg[RING_MSG + 64];

fa_status ring_fail(fa_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ring_msg, sizeof ring_msg, fmt, ap);
  va_end(ap);
  return s;
}

void ring_clear_error(void) { ring_msg[0] = '\0'; }

const char *ring_error_text(void) { return ring_msg; }

const char *fa_ring_last_error(void) { return ring_msg; }

fa_status ring_transport_fail(fa_comm *c, const char *what) {
  const char *t = c->error ? c->error(c->self) : NULL;
  return ring_fail(FA_ERR_BACKEND, "rank %d: transport: %s failed: %s", c->rank,
                   what, t && *t ? t : "(no text)");
}

#define MSG_WORDS (RING_MSG / 8)

fa_status ring_agree(fa_comm *c, fa_status local, const char *msg) {
  // Lowest failing rank wins: key = (size - rank) * 256 + status.
  int64_t key = local == FA_OK ? 0 : (int64_t)(c->size - c->rank) * 256 + local;
  char mine[RING_MSG];
  snprintf(mine, sizeof mine, "%s", local == FA_OK || !msg ? "" : msg);
  if (c->allreduce_max(c->self, &key, 1))
    return ring_transport_fail(c, "all-reduce (status)");
  if (key == 0) return FA_OK;
  const int rank = c->size - (int)(key / 256);
  const fa_status s = (fa_status)(key % 256);
  int64_t words[MSG_WORDS];
  for (int i = 0; i < MSG_WORDS; i++) words[i] = INT64_MIN;
  if (rank == c->rank) memcpy(words, mine, sizeof words);
  if (c->allreduce_max(c->self, words, MSG_WORDS))
    return ring_transport_fail(c, "all-reduce (message)");
  char text[RING_MSG];
  memcpy(text, words, sizeof text);
  text[RING_MSG - 1] = '\0';
  // A message that already names its rank (transport failures) is kept.
  if (strncmp(text, "rank ", 5) == 0) return ring_fail(s, "%s", text);
  return ring_fail(s, "rank %d: %s", rank, text);
}

fa_status ring_same(fa_comm *c, const int64_t *values, int n, int *field,
                    int64_t *lo, int64_t *hi, int *rank) {
  int64_t v[64];
  *field = -1;
  if (n > 32) n = 32;
  for (int i = 0; i < n; i++) {
    v[i] = values[i];
    v[n + i] = values[i] == INT64_MIN ? INT64_MAX : -values[i];
  }
  if (c->allreduce_max(c->self, v, 2 * n))
    return ring_transport_fail(c, "all-reduce (problem check)");
  for (int i = 0; i < n; i++)
    if (v[i] != -v[n + i]) {
      *field = i;
      *hi = v[i];
      *lo = -v[n + i];
      break;
    }
  if (*field < 0) return FA_OK;
  // Name a rank that differs: the lowest one not holding the maximum.
  int64_t who = values[*field] != *hi ? c->size - c->rank : 0;
  if (c->allreduce_max(c->self, &who, 1))
    return ring_transport_fail(c, "all-reduce (problem check)");
  *rank = c->size - (int)who;
  return FA_OK;
}
