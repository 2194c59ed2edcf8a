// SPDX-License-Identifier: MIT
// The fuzzer's buffers: each payload between sentinel bands (ASan-poisoned),
// or against an inaccessible page in the throughput build.
#include "fz_harness.h"

#define FZ_SENTINEL 0xcb

#ifdef FZ_GUARD_PAGES
#include <sys/mman.h>
#include <unistd.h>

/* [PROT_NONE page][usable: 2^k pages][PROT_NONE page], mapped once and kept
   in a pool per k: a warm harness makes no system call per execution. */
typedef struct fz_region {
  unsigned char *usable;
  size_t size;
  struct fz_region *next;
} fz_region;

static fz_region *region_pool[48];
static size_t page_bytes;
uint32_t side_bits; // which side each buffer's page is on (per input)

static fz_region *region_get(size_t need) {
  if (!page_bytes) page_bytes = (size_t)sysconf(_SC_PAGESIZE);
  int k = 0;
  while ((page_bytes << k) < need) k++;
  fz_region *r = region_pool[k];
  if (r) {
    region_pool[k] = r->next;
    return r;
  }
  size_t size = page_bytes << k, map = size + 2 * page_bytes;
  unsigned char *m = mmap(NULL, map, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  r = malloc(sizeof *r);
  if (m == MAP_FAILED || !r) die("harness out of memory (%zu bytes)", need);
  if (mprotect(m, page_bytes, PROT_NONE) ||
      mprotect(m + page_bytes + size, page_bytes, PROT_NONE))
    die("mprotect failed");
  r->usable = m + page_bytes;
  r->size = size;
  return r;
}

static void region_put(fz_region *r) {
  int k = 0;
  while ((page_bytes << k) < r->size) k++;
  r->next = region_pool[k];
  region_pool[k] = r;
}
#endif

void buf_make(fz_buf *b, size_t bytes, size_t align) {
  memset(b, 0, sizeof *b);
  b->bytes = bytes;
  b->lead = FZ_GUARD + align;
  b->tail = FZ_GUARD;
#ifdef FZ_GUARD_PAGES
  const int right = side_bits & 1;
  side_bits = side_bits >> 1 | side_bits << 31;
  b->lead = right ? FZ_GUARD : 0;
  b->tail = right ? 0 : FZ_GUARD;
  b->total = b->lead + bytes + b->tail;
  fz_region *r = region_get(b->total);
  b->region = r;
  b->alloc = right ? r->usable + r->size - b->total : r->usable;
#else
  b->total = b->lead + bytes + b->tail;
  b->alloc = aligned_alloc(64, (b->total + 63) / 64 * 64);
#endif
  b->snap = malloc(b->total);
  if (!b->alloc || !b->snap) die("harness out of memory (%zu bytes)", bytes);
  memset(b->alloc, FZ_SENTINEL, b->total);
  b->data = b->alloc + b->lead;
  b->used = 1;
  FZ_POISON(b->alloc, b->lead);
  FZ_POISON(b->data + bytes, b->tail);
}

void buf_free(fz_buf *b) {
  if (!b->used) return;
  FZ_UNPOISON(b->alloc, b->total);
#ifdef FZ_GUARD_PAGES
  region_put(b->region);
#else
  free(b->alloc);
#endif
  free(b->snap);
  memset(b, 0, sizeof *b);
}

FZ_CHECKER void buf_snapshot(fz_buf *b) {
  if (!b->used) return;
  FZ_UNPOISON(b->alloc, b->total);
  memcpy(b->snap, b->alloc, b->total);
  FZ_POISON(b->alloc, b->lead);
  FZ_POISON(b->data + b->bytes, b->tail);
}

/* Offset of the first byte that differs from the snapshot (guards
   included, relative to the payload), or LONG_MIN if none. */
FZ_CHECKER long buf_changed(fz_buf *b) {
  if (!b->used) return LONG_MIN;
  FZ_UNPOISON(b->alloc, b->total);
  long at = LONG_MIN;
  if (memcmp(b->alloc, b->snap, b->total)) // (the loop only to locate it)
    for (size_t i = 0; i < b->total; i++)
      if (b->alloc[i] != b->snap[i]) {
        at = (long)i - (long)b->lead;
        break;
      }
  FZ_POISON(b->alloc, b->lead);
  FZ_POISON(b->data + b->bytes, b->tail);
  return at;
}

FZ_CHECKER int guards_ok(fz_buf *b) {
  if (!b->used) return 1;
  FZ_UNPOISON(b->alloc, b->total);
  static unsigned char band[FZ_GUARD + 64];
  if (band[0] != FZ_SENTINEL) memset(band, FZ_SENTINEL, sizeof band);
  int ok = b->lead <= sizeof band && !memcmp(b->alloc, band, b->lead) &&
           !memcmp(b->data + b->bytes, band, b->tail);
  FZ_POISON(b->alloc, b->lead);
  FZ_POISON(b->data + b->bytes, b->tail);
  return ok;
}
