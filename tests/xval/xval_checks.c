// SPDX-License-Identifier: MIT
// The checks every case gets after its call: guard bands, inputs unchanged,
// poison outside the views and nothing left unwritten inside them, NaN/Inf
// parity with the oracle, rows with no visible key, the failure messages.
#define _POSIX_C_SOURCE 200809L // fmemopen
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xval_run.h"

void xv_msg(msgbuf *m, const char *fmt, ...) {
  m->count++;
  if (m->count > 12 || m->len >= sizeof m->text - 1) return;
  m->len +=
      (size_t)snprintf(m->text + m->len, sizeof m->text - m->len, "    - ");
  if (m->len >= sizeof m->text - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(m->text + m->len, sizeof m->text - m->len, fmt, ap);
  va_end(ap);
  if (n > 0) m->len += (size_t)n;
  while (m->len > 0 && m->text[m->len - 1] == '\n') m->len--;
  if (m->len > sizeof m->text - 2) m->len = sizeof m->text - 2;
  m->text[m->len++] = '\n';
  m->text[m->len] = 0;
}

/* ---- checks
 * ------------------------------------------------------------------ */

const char *xv_buf_name(int id) {
  static const char *n[NBUF] = {"q",
                                "k",
                                "v",
                                "do",
                                "o",
                                "dq",
                                "dk",
                                "dv",
                                "lse",
                                "dsinks",
                                "cu_seqlens_q",
                                "cu_seqlens_k",
                                "seqused_k",
                                "block_table",
                                "alibi_slopes",
                                "sinks",
                                "q_positions",
                                "k_positions",
                                "q.descale",
                                "k.descale",
                                "v.descale"};
  return n[id];
}

/* The element type of an output buffer (poison pattern). */
static fa_dtype buf_dtype(const xs *s, int id) {
  if (id == B_LSE || id == B_DSINKS) return FA_F32;
  if (id == B_Q || id == B_K || id == B_V) return s->c->dt;
  return s->dto;
}

/* Re-poison output buffers and upload them. */
int xv_poison_upload(xs *s, const int *ids, int n) {
  for (int i = 0; i < n; i++) {
    ts_buf *b = &s->buf[ids[i]];
    if (!b->alloc) continue;
    fa_dtype t = buf_dtype(s, ids[i]);
    ts_poison(b->host, t, b->bytes / ts_dtype_size(t));
    if (ts_buf_upload(s->ctx, b)) return -1;
  }
  return 0;
}

int xv_download(xs *s, const int *ids, int n) {
  for (int i = 0; i < n; i++)
    if (ts_buf_download(s->ctx, &s->buf[ids[i]])) return -1;
  return 0;
}

/* Guards of every buffer, inputs and arrays unchanged. */
void xv_check_memory(xs *s, msgbuf *m) {
  for (int i = 0; i < NBUF; i++) {
    ts_buf *b = &s->buf[i];
    if (!b->alloc) continue;
    if (ts_buf_download(s->ctx, b)) {
      xv_msg(m, "download of %s failed", xv_buf_name(i));
      continue;
    }
    char line[256] = "guard band damaged";
    FILE *f = fmemopen(line, sizeof line, "w");
    if (!ts_buf_guards_ok(b, xv_buf_name(i), f)) {
      if (f) fclose(f), f = NULL;
      xv_msg(m, "%s", line);
    }
    if (f) fclose(f);
    if (s->snap[i] && memcmp(s->snap[i], b->alloc, xv_alloc_bytes(b))) {
      size_t at = 0;
      while (s->snap[i][at] == b->alloc[at]) at++;
      xv_msg(m, "input %s was modified (first at byte %td of the payload)",
             xv_buf_name(i), (ptrdiff_t)at - TS_GUARD_BYTES);
    }
  }
}

/* 1 marks a logical element, 2 one the library may or may not write (key
   rows past seqused_k within a sequence's storage), 0 the rest: stride
   padding, pages the block table does not name for the real keys. */
unsigned char *xv_view_marks(const xs *s, const xt *x) {
  size_t n = x->buf->bytes / ts_dtype_size(x->t.dtype);
  unsigned char *mk = calloc(n + 1, 1);
  if (!mk) return NULL;
  const fa_attention *a = &s->a;
  for (int b = 0; b < a->batch; b++) {
    int rows = xv_rows_of(s, x->klike, b), extra = rows;
    if (x->klike) {
      if (a->block_table) {
        int ps = a->page_size;
        extra = (rows + ps - 1) / ps * ps; // rest of the last named page
      } else {
        extra = s->store_k[b];
      }
    }
    for (int r = 0; r < extra; r++)
      for (int h = 0; h < x->heads; h++) {
        int64_t o = xv_elem_index(s, x, b, r, h) + (int64_t)x->off;
        for (int c = 0; c < x->dim; c++) mk[o + c] = r < rows ? 1 : 2;
      }
  }
  return mk;
}

/* Check the view of output x (poison outside it, written inside) and widen
   its logical elements into dense [b][rows][heads][dim] (rows = max). */
void xv_extract(xs *s, const xt *x, const char *name, double *dense,
                msgbuf *m) {
  const fa_attention *a = &s->a;
  int R = x->klike ? a->seqlen_k : a->seqlen_q;
  memset(dense, 0, sizeof(double) * a->batch * R * x->heads * x->dim);
  unsigned char *mk = xv_view_marks(s, x);
  if (!mk) {
    xv_msg(m, "out of memory");
    return;
  }
  size_t n = x->buf->bytes / ts_dtype_size(x->t.dtype), outside = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (mk[i] == 0 && !ts_is_poison(x->buf->host, x->t.dtype, (int64_t)i))
      if (outside++ == 0) first = i;
  if (outside)
    xv_msg(m,
           "%s: %zu elements outside the view were written (first at "
           "element %zu of the buffer)",
           name, outside, first);
  size_t unwritten = 0;
  for (int b = 0; b < a->batch; b++)
    for (int r = 0; r < xv_rows_of(s, x->klike, b); r++)
      for (int h = 0; h < x->heads; h++) {
        int64_t o = xv_elem_index(s, x, b, r, h);
        double *d = dense + (((size_t)b * R + r) * x->heads + h) * x->dim;
        for (int c = 0; c < x->dim; c++) {
          if (ts_is_poison(x->t.data, x->t.dtype, o + c)) {
            if (unwritten++ == 0)
              xv_msg(m, "%s[b=%d][%s=%d][h=%d][%d] was never written", name, b,
                     x->klike ? "key" : "row", r, h, c);
          }
          d[c] = ts_load(x->t.data, x->t.dtype, o + c);
        }
      }
  if (unwritten > 1)
    xv_msg(m, "%s: %zu elements never written", name, unwritten);
  free(mk);
}

void xv_check_finite(const double *ref, const double *got, size_t n,
                     const char *name, msgbuf *m) {
  size_t first = 0, bad = ts_nonfinite_parity(ref, got, n, &first);
  if (bad)
    xv_msg(m,
           "%s: %zu values whose NaN/Inf status differs from the oracle "
           "(first flat index %zu: got %g, expected %g)",
           name, bad, first, got[first], ref[first]);
}

void xv_check_err(const char *name, double err, double bound, msgbuf *m) {
  if (!(err <= bound))
    xv_msg(m, "%s: error %.3e exceeds bound %.3e", name, err, bound);
}

/* Rows with no visible key: O exactly 0, lse -inf (or the sink). */
void xv_check_empty_rows(xs *s, const double *o, const double *lse, msgbuf *m) {
  const fa_attention *a = &s->a;
  int DV = s->c->dv, bad = 0;
  for (int b = 0; b < a->batch; b++)
    for (int i = 0; i < s->lq[b]; i++) {
      if (fa_oracle_visible_count(a, b, i)) continue;
      for (int h = 0; h < a->heads_q; h++) {
        const double *r =
            o + (((size_t)b * a->seqlen_q + i) * a->heads_q + h) * DV;
        for (int c = 0; c < DV; c++)
          if (r[c] != 0.0 && bad++ < 3)
            xv_msg(m,
                   "o[b=%d][row=%d][h=%d][%d] = %g in a row with no visible "
                   "key (must be exactly 0)",
                   b, i, h, c, r[c]);
        if (lse) {
          double want = a->sinks ? (double)a->sinks[h] : -INFINITY;
          double got = lse[((size_t)b * a->heads_q + h) * a->seqlen_q + i];
          if (got != want && bad++ < 3)
            xv_msg(m,
                   "lse[b=%d][h=%d][row=%d] = %g in a row with no visible key "
                   "(must be %g)",
                   b, h, i, got, want);
        }
      }
    }
}

/* The library's lse as dense double; padding rows (varlen) set to -inf like
   the oracle's. */
void xv_extract_lse(xs *s, double *dense) {
  const fa_attention *a = &s->a;
  const float *l = (const float *)s->buf[B_LSE].host;
  for (int b = 0; b < a->batch; b++)
    for (int h = 0; h < a->heads_q; h++)
      for (int i = 0; i < a->seqlen_q; i++) {
        size_t x = ((size_t)b * a->heads_q + h) * a->seqlen_q + i;
        dense[x] = i < s->lq[b] ? (double)l[x] : -INFINITY;
      }
}

/* Every output buffer in ids still holds its poison (a failing call wrote
   nothing). */
void xv_check_untouched(xs *s, const int *ids, int n, msgbuf *m) {
  for (int k = 0; k < n; k++) {
    ts_buf *b = &s->buf[ids[k]];
    if (!b->alloc || ts_buf_download(s->ctx, b)) continue;
    fa_dtype t = buf_dtype(s, ids[k]);
    size_t cnt = b->bytes / ts_dtype_size(t);
    for (size_t i = 0; i < cnt; i++)
      if (!ts_is_poison(b->host, t, (int64_t)i)) {
        xv_msg(m, "%s was written by a call that failed", xv_buf_name(ids[k]));
        break;
      }
  }
}
