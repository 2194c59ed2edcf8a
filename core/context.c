// SPDX-License-Identifier: MIT
// Contexts: a memory space, the backends that share it, and each backend's
// per-context state (threads, stream, scratch).
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "registry.h"

#define INVALID FA_ERR_INVALID_ARGUMENT

/* A context over backends idx[0 .. n), or over the one a name bound. */
static fa_status context_open(fa_context **out, const int *idx, int n,
                              const fa_binding *bound, int device) {
  fa_context *c = calloc(1, sizeof *c);
  if (!c) return fa_fail(FA_ERR_OUT_OF_MEMORY, "context allocation failed");
  c->device = device;
  c->forced = bound->idx >= 0;
  c->first_kernel = bound->first_kernel;
  c->only_kernel = bound->kernel;
  for (int i = 0; i < n; i++) {
    const fa_backend *b = fa_registry_at(idx[i])->backend;
    fa_status s = b->context_create(device, &c->state[i]);
    if (s) {
      fa_context_destroy(c);
      return s; // the backend recorded why
    }
    c->idx[i] = idx[i];
    c->n = i + 1;
  }
  *out = c;
  return FA_OK;
}

fa_status fa_context_create(fa_context **ctx, fa_backend_kind kind,
                            int device) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx (the output pointer) is NULL");
  int idx[FA_MAX_BACKENDS], n;
  fa_binding forced;
  fa_status s = fa_select_backends(kind, device, idx, &n, &forced);
  if (s) return s;
  return context_open(ctx, idx, n, &forced, device);
}

/* "name" or "name:N" (device N of a GPU backend). */
static fa_status split_device(const char *full, char *name, size_t len,
                              int *device) {
  const char *colon = strrchr(full, ':');
  *device = 0;
  size_t n = colon ? (size_t)(colon - full) : strlen(full);
  if (n >= len) return fa_fail(INVALID, "name \"%s\" is too long", full);
  memcpy(name, full, n);
  name[n] = '\0';
  if (!colon) return FA_OK;
  char *end;
  long d = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || *end || d < 0 || d > 1 << 20)
    return fa_fail(INVALID,
                   "name \"%s\": the device after ':' must be a number "
                   ">= 0",
                   full);
  *device = (int)d;
  return FA_OK;
}

fa_status fa_context_create_by_name(fa_context **ctx, const char *full) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx (the output pointer) is NULL");
  if (!full) return fa_fail(INVALID, "name is NULL");
  char name[128];
  int device;
  fa_status ds = split_device(full, name, sizeof name, &device);
  if (ds) return ds;
  // A kernel name ("cpu.avx2.f32") binds the context to that one kernel:
  // for triage and for testing kernels a better one would shadow.
  fa_binding bound;
  fa_status s = fa_registry_bind(name, "fa_context_create_by_name", &bound);
  if (s) return s;
  if (fa_registry_at(bound.idx)->backend->memory_space == FA_MEMORY_HOST &&
      device != 0)
    return fa_fail(FA_ERR_NO_DEVICE, "\"%s\": CPU backends have only device 0",
                   full);
  if (fa_log_dispatch())
    fa_log("context bound to %s by name (device %d)", name, device);
  return context_open(ctx, &bound.idx, 1, &bound, device);
}

void fa_context_destroy(fa_context *ctx) {
  if (!ctx) return;
  for (int i = 0; i < ctx->n; i++)
    fa_registry_at(ctx->idx[i])->backend->context_destroy(ctx->state[i]);
  free(ctx);
}

const char *fa_context_backend(const fa_context *ctx) {
  if (!ctx || ctx->n == 0) return "";
  return fa_registry_at(ctx->idx[0])->backend->name;
}

static const fa_backend *first(const fa_context *ctx) {
  return fa_registry_at(ctx->idx[0])->backend;
}

fa_status fa_context_set_stream(fa_context *ctx, void *stream) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  for (int i = 0; i < ctx->n; i++) {
    const fa_backend *b = fa_registry_at(ctx->idx[i])->backend;
    if (!b->set_stream) {
      if (!stream) continue;
      return fa_fail(FA_ERR_UNSUPPORTED,
                     "stream=%p: backend %s has no streams (only NULL is "
                     "accepted)",
                     stream, b->name);
    }
    fa_status s = b->set_stream(ctx->state[i], stream);
    if (s) return s;
  }
  return FA_OK;
}

fa_status fa_context_set_checked(fa_context *ctx, int on) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  if (on != 0 && on != 1) return fa_fail(INVALID, "on=%d must be 0 or 1", on);
  ctx->checked = on;
  return FA_OK;
}

fa_status fa_context_set_threads(fa_context *ctx, int n) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  if (n < 0)
    return fa_fail(INVALID, "n=%d threads must be >= 0 (0 = default)", n);
  for (int i = 0; i < ctx->n; i++) {
    const fa_backend *b = fa_registry_at(ctx->idx[i])->backend;
    if (!b->set_threads)
      return fa_fail(FA_ERR_UNSUPPORTED, "backend %s does not use host threads",
                     b->name);
    fa_status s = b->set_threads(ctx->state[i], n);
    if (s) return s;
  }
  return FA_OK;
}

fa_status fa_malloc(fa_context *ctx, size_t bytes, void **ptr) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  if (!ptr) return fa_fail(INVALID, "ptr (the output pointer) is NULL");
  if (bytes == 0) return fa_fail(INVALID, "bytes=0: nothing to allocate");
  return first(ctx)->mem_alloc(ctx->state[0], bytes, ptr);
}

fa_status fa_free(fa_context *ctx, void *ptr) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  if (!ptr) return FA_OK;
  return first(ctx)->mem_free(ctx->state[0], ptr);
}

static fa_status check_copy(fa_context *ctx, void *dst, const void *src,
                            size_t bytes) {
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  if (bytes && !dst) return fa_fail(INVALID, "dst is NULL");
  if (bytes && !src) return fa_fail(INVALID, "src is NULL");
  return FA_OK;
}

fa_status fa_copy_to_device(fa_context *ctx, void *dst, const void *src,
                            size_t bytes) {
  fa_clear_error();
  fa_status s = check_copy(ctx, dst, src, bytes);
  if (s || !bytes) return s;
  return first(ctx)->copy_to_device(ctx->state[0], dst, src, bytes);
}

fa_status fa_copy_to_host(fa_context *ctx, void *dst, const void *src,
                          size_t bytes) {
  fa_clear_error();
  fa_status s = check_copy(ctx, dst, src, bytes);
  if (s || !bytes) return s;
  return first(ctx)->copy_to_host(ctx->state[0], dst, src, bytes);
}

fa_status fa_synchronize(fa_context *ctx) {
  fa_clear_error();
  if (!ctx) return fa_fail(INVALID, "ctx is NULL");
  for (int i = 0; i < ctx->n; i++) {
    fa_status s =
        fa_registry_at(ctx->idx[i])->backend->synchronize(ctx->state[i]);
    if (s) return s;
  }
  return FA_OK;
}

/* Host-memory implementations shared by CPU backends. */
fa_status fa_host_mem_alloc(void *state, size_t bytes, void **ptr) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded < bytes)
    return fa_fail(FA_ERR_OUT_OF_MEMORY, "bytes=%zu is too large", bytes);
  void *p = aligned_alloc(64, rounded);
  if (!p)
    return fa_fail(FA_ERR_OUT_OF_MEMORY, "allocating %zu bytes failed", bytes);
  *ptr = p;
  return FA_OK;
}

fa_status fa_host_mem_free(void *state, void *ptr) {
  free(ptr);
  return FA_OK;
}

fa_status fa_host_copy(void *state, void *dst, const void *src, size_t bytes) {
  memmove(dst, src, bytes);
  return FA_OK;
}

fa_status fa_host_synchronize(void *state) { return FA_OK; }
