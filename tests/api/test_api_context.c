// SPDX-License-Identifier: MIT
// Contexts, memory, versions, status strings, fa_last_error() (cleared on
// success, thread-local), backend listing and fa_explain.
#include <pthread.h>
#include <stdint.h>

#include "api_util.h"

static int has_backend_prefix(const char *prefix) {
  for (int i = 0; i < fa_backend_count(); i++) {
    const char *n = fa_backend_name(i);
    if (n && strncmp(n, prefix, strlen(prefix)) == 0) return 1;
  }
  return 0;
}

static void test_version_status(void) {
  char want[64];
  snprintf(want, sizeof want, "%d.%d.%d", FA_VERSION_MAJOR, FA_VERSION_MINOR,
           FA_VERSION_PATCH);
  const char *v = fa_version();
  CHECK(v && strcmp(v, want) == 0, "fa_version \"%s\", macros say \"%s\"",
        v ? v : "(null)", want);

  const fa_status all[] = {FA_OK,
                           FA_ERR_INVALID_ARGUMENT,
                           FA_ERR_UNSUPPORTED,
                           FA_ERR_NO_DEVICE,
                           FA_ERR_OUT_OF_MEMORY,
                           FA_ERR_BACKEND};
  const int n = (int)(sizeof all / sizeof all[0]);
  // Stable numbers.
  CHECK(FA_OK == 0 && FA_ERR_INVALID_ARGUMENT == 1 && FA_ERR_UNSUPPORTED == 2 &&
            FA_ERR_NO_DEVICE == 3 && FA_ERR_OUT_OF_MEMORY == 4 &&
            FA_ERR_BACKEND == 5,
        "status numbers changed");
  for (int i = 0; i < n; i++) {
    const char *s = fa_status_string(all[i]);
    CHECK(s && *s, "fa_status_string(%d) empty", (int)all[i]);
    for (int j = 0; j < i; j++)
      CHECK(s && fa_status_string(all[j]) &&
                strcmp(s, fa_status_string(all[j])) != 0,
            "statuses %d and %d share the string \"%s\"", (int)all[i],
            (int)all[j], s ? s : "");
  }
  CHECK(strstr(fa_status_string(FA_ERR_INVALID_ARGUMENT), "invalid") != NULL,
        "invalid argument: \"%s\"", fa_status_string(FA_ERR_INVALID_ARGUMENT));
  const char *bad = fa_status_string((fa_status)99);
  CHECK(bad && *bad, "fa_status_string(99) is empty or NULL");
  for (int j = 0; j < n; j++)
    CHECK(!bad || strcmp(bad, fa_status_string(all[j])) != 0,
          "out-of-range status reads as \"%s\"", bad ? bad : "");
  const char *neg = fa_status_string((fa_status)-1);
  CHECK(neg && *neg, "fa_status_string(-1) is empty or NULL");
}

static void test_attention_init(void) {
  fa_attention a;
  memset(&a, 0x77, sizeof a);
  fa_attention_init(&a);
  CHECK(a.window_left == -1 && a.window_right == -1, "windows %d %d",
        a.window_left, a.window_right);
  CHECK(a.batch == 0 && a.seqlen_q == 0 && a.seqlen_k == 0 && a.heads_q == 0 &&
            a.heads_kv == 0 && a.head_dim == 0 && a.head_dim_v == 0 &&
            a.scale == 0.0f && a.causal == 0 && a.softcap == 0.0f &&
            a.max_blocks_per_seq == 0 && a.page_size == 0 && a.num_pages == 0,
        "a scalar field is not 0 after fa_attention_init");
  CHECK(!a.alibi_slopes && !a.sinks && !a.cu_seqlens_q && !a.cu_seqlens_k &&
            !a.seqused_k && !a.block_table,
        "a pointer field is not NULL after fa_attention_init");
  fa_attention_init(NULL); // no-op
}

static void test_contexts(void) {
  fa_context *const sentinel = (fa_context *)(uintptr_t)0x4321;
  fa_context *c = sentinel;
  fa_status s = fa_context_create(NULL, FA_BACKEND_AUTO, 0);
  EXPECT_FAIL("create NULL out", s, FA_ERR_INVALID_ARGUMENT, "ctx", NULL);
  s = fa_context_create(&c, (fa_backend_kind)42, 0);
  EXPECT_FAIL("create kind 42", s, FA_ERR_INVALID_ARGUMENT, "kind", "42");
  CHECK(c == sentinel, "ctx written by a failing create");
  s = fa_context_create(&c, (fa_backend_kind)-3, 0);
  EXPECT_FAIL("create kind -3", s, FA_ERR_INVALID_ARGUMENT, "kind", "-3");
  CHECK(c == sentinel, "ctx written by a failing create");
  s = fa_context_create(&c, FA_BACKEND_CPU, -1);
  EXPECT_FAIL("create device -1", s, FA_ERR_INVALID_ARGUMENT, "device", "-1");
  CHECK(c == sentinel, "ctx written by a failing create");
  s = fa_context_create(&c, FA_BACKEND_CPU, 3);
  EXPECT_FAIL("create CPU device 3", s, FA_ERR_NO_DEVICE, "device", "3");
  CHECK(c == sentinel, "ctx written by a failing create");
  if (!has_backend_prefix("cuda")) {
    s = fa_context_create(&c, FA_BACKEND_CUDA, 0);
    EXPECT_FAIL("create CUDA without it", s, FA_ERR_NO_DEVICE, NULL, NULL);
    CHECK(c == sentinel, "ctx written by a failing create");
  }
  if (!has_backend_prefix("hip")) {
    s = fa_context_create(&c, FA_BACKEND_HIP, 0);
    EXPECT_FAIL("create HIP without it", s, FA_ERR_NO_DEVICE, NULL, NULL);
    CHECK(c == sentinel, "ctx written by a failing create");
  }
  s = fa_context_create_by_name(&c, "cpu-nonexistent-9");
  EXPECT_FAIL("create_by_name unknown", s, FA_ERR_NO_DEVICE, NULL, NULL);
  CHECK(strstr(fa_last_error(), "cpu-nonexistent-9") != NULL,
        "message \"%s\" does not name the backend asked for", fa_last_error());
  CHECK(c == sentinel, "ctx written by a failing create");
  s = fa_context_create_by_name(&c, NULL);
  EXPECT_FAIL("create_by_name NULL name", s, FA_ERR_INVALID_ARGUMENT, "name",
              NULL);
  s = fa_context_create_by_name(NULL, "cpu-scalar");
  EXPECT_FAIL("create_by_name NULL out", s, FA_ERR_INVALID_ARGUMENT, "ctx",
              NULL);

  // Backend listing.
  int n = fa_backend_count();
  CHECK(n >= 1, "fa_backend_count %d", n);
  int cpu = 0;
  for (int i = 0; i < n; i++) {
    const char *name = fa_backend_name(i);
    CHECK(name && *name, "fa_backend_name(%d) empty", i);
    // Backends are runtimes: one "cpu", whatever ISAs it has.
    if (name && strcmp(name, "cpu") == 0) cpu++;
    CHECK(!name || !strchr(name, '-'), "backend %s is not a runtime", name);
  }
  CHECK(cpu == 1, "cpu is %d of the %d usable backends", cpu, n);
  CHECK(fa_backend_name(n) == NULL, "fa_backend_name(count) not NULL");
  CHECK(fa_backend_name(-1) == NULL, "fa_backend_name(-1) not NULL");
  CHECK(strcmp(fa_context_backend(NULL), "") == 0,
        "fa_context_backend(NULL) not \"\"");

  // A CPU context and the calls a CPU context refuses.
  s = fa_context_create(&c, FA_BACKEND_AUTO, 0);
  EXPECT_OK("create AUTO", s);
  if (s != FA_OK) return;
  const char *bn = fa_context_backend(c);
  int listed = 0;
  for (int i = 0; i < n; i++) listed |= strcmp(bn, fa_backend_name(i)) == 0;
  CHECK(listed, "AUTO context backend \"%s\" is not a listed backend", bn);
  fa_context_destroy(c);

  s = fa_context_create(&c, FA_BACKEND_CPU, 0);
  EXPECT_OK("create CPU", s);
  if (s != FA_OK) return;
  CHECK(fa_last_error()[0] == '\0', "message after success \"%s\"",
        fa_last_error());
  s = fa_context_set_threads(c, -1);
  EXPECT_FAIL("set_threads -1", s, FA_ERR_INVALID_ARGUMENT, NULL, "-1");
  s = fa_context_set_threads(NULL, 2);
  EXPECT_FAIL("set_threads NULL ctx", s, FA_ERR_INVALID_ARGUMENT, "ctx", NULL);
  EXPECT_OK("set_threads 2", fa_context_set_threads(c, 2));
  EXPECT_OK("set_threads 0", fa_context_set_threads(c, 0));
  s = fa_context_set_stream(c, (void *)(uintptr_t)0x1000);
  EXPECT_FAIL("set_stream non-NULL on CPU", s, FA_ERR_UNSUPPORTED, "stream",
              NULL);
  EXPECT_OK("set_stream NULL on CPU", fa_context_set_stream(c, NULL));
  s = fa_context_set_stream(NULL, NULL);
  EXPECT_FAIL("set_stream NULL ctx", s, FA_ERR_INVALID_ARGUMENT, "ctx", NULL);

  // Memory.
  void *const psent = (void *)(uintptr_t)0x5555;
  void *p = psent;
  s = fa_malloc(c, 0, &p);
  EXPECT_FAIL("malloc 0 bytes", s, FA_ERR_INVALID_ARGUMENT, "bytes", "0");
  CHECK(p == psent, "ptr written by a failing fa_malloc");
  s = fa_malloc(NULL, 16, &p);
  EXPECT_FAIL("malloc NULL ctx", s, FA_ERR_INVALID_ARGUMENT, "ctx", NULL);
  CHECK(p == psent, "ptr written by a failing fa_malloc");
  s = fa_malloc(c, 16, NULL);
  EXPECT_FAIL("malloc NULL out", s, FA_ERR_INVALID_ARGUMENT, "ptr", NULL);
  s = fa_malloc(c, SIZE_MAX - 8, &p);
  EXPECT_FAIL("malloc SIZE_MAX", s, FA_ERR_OUT_OF_MEMORY, NULL, NULL);
  CHECK(p == psent, "ptr written by a failing fa_malloc");
  s = fa_malloc(c, 1000, &p);
  EXPECT_OK("malloc 1000", s);
  CHECK(fa_last_error()[0] == '\0', "message after success \"%s\"",
        fa_last_error());
  if (s == FA_OK) {
    CHECK(((uintptr_t)p & 63u) == 0, "fa_malloc pointer %p not 64-aligned", p);
    unsigned char src[1000], back[1000];
    for (int i = 0; i < 1000; i++) src[i] = (unsigned char)(i * 7 + 3);
    EXPECT_OK("copy_to_device", fa_copy_to_device(c, p, src, sizeof src));
    memset(back, 0, sizeof back);
    EXPECT_OK("copy_to_host", fa_copy_to_host(c, back, p, sizeof back));
    CHECK(memcmp(src, back, sizeof src) == 0, "copy round trip differs");
    EXPECT_OK("synchronize", fa_synchronize(c));
    s = fa_copy_to_device(c, NULL, src, 10);
    EXPECT_FAIL("copy_to_device NULL dst", s, FA_ERR_INVALID_ARGUMENT, "dst",
                NULL);
    s = fa_copy_to_host(c, back, NULL, 10);
    EXPECT_FAIL("copy_to_host NULL src", s, FA_ERR_INVALID_ARGUMENT, "src",
                NULL);
    EXPECT_OK("free", fa_free(c, p));
  }
  EXPECT_OK("free NULL", fa_free(c, NULL));
  s = fa_synchronize(NULL);
  EXPECT_FAIL("synchronize NULL", s, FA_ERR_INVALID_ARGUMENT, "ctx", NULL);
  fa_context_destroy(c);
  fa_context_destroy(NULL);
}

// ---- fa_last_error -------------------------------------------------------

typedef struct thread_result {
  fa_context *ctx;
  char before[256], after[256];
  fa_status status;
} thread_result;

static void *other_thread(void *arg) {
  thread_result *r = arg;
  snprintf(r->before, sizeof r->before, "%s", fa_last_error());
  void *p = NULL;
  r->status = fa_malloc(r->ctx, 0, &p); // fails with a message about bytes
  snprintf(r->after, sizeof r->after, "%s", fa_last_error());
  return NULL;
}

static void test_last_error(void) {
  fa_context *c = NULL;
  fa_status s = fa_context_create(&c, FA_BACKEND_CPU, 0);
  EXPECT_OK("create", s);
  if (s != FA_OK) return;
  // A failure, then a success: the message is cleared.
  s = fa_context_set_threads(c, -7);
  EXPECT_FAIL("set_threads -7", s, FA_ERR_INVALID_ARGUMENT, NULL, "-7");
  EXPECT_OK("set_threads 1", fa_context_set_threads(c, 1));
  CHECK(fa_last_error()[0] == '\0', "message \"%s\" survives a successful call",
        fa_last_error());

  // This thread's message is its own.
  s = fa_context_set_threads(c, -7);
  char mine[256];
  snprintf(mine, sizeof mine, "%s", fa_last_error());
  CHECK(mine[0] != '\0', "no message after failure");
  thread_result r;
  memset(&r, 0, sizeof r);
  r.ctx = c; // used by one thread at a time: this one waits
  pthread_t t;
  if (pthread_create(&t, NULL, other_thread, &r) != 0) {
    CHECK(0, "pthread_create failed");
  } else {
    pthread_join(t, NULL);
    CHECK(r.before[0] == '\0',
          "a new thread starts with this thread's message \"%s\"", r.before);
    CHECK(r.status == FA_ERR_INVALID_ARGUMENT && r.after[0] != '\0' &&
              strcmp(r.after, mine) != 0,
          "other thread: status %d message \"%s\"", (int)r.status, r.after);
    CHECK(strcmp(fa_last_error(), mine) == 0,
          "another thread's failure changed this thread's message to "
          "\"%s\" (was \"%s\")",
          fa_last_error(), mine);
  }
  fa_context_destroy(c);
}

// ---- fa_explain -----------------------------------------------------------

static void line_of(const char *text, const char *name, char *out, size_t len) {
  out[0] = '\0';
  for (const char *s = text; s && *s;) {
    const char *e = strchr(s, '\n');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (strncmp(s, name, strlen(name)) == 0 && n < len) {
      memcpy(out, s, n);
      out[n] = '\0';
      return;
    }
    s = e ? e + 1 : NULL;
  }
}

static void test_explain(void) {
  fa_attention a = ts_problem(1, 16, 64, 2, 1, 64);
  a.causal = FA_CAUSAL_BOTTOM_RIGHT;
  char buf[4096];
  size_t n = fa_explain(&a, FA_F32, buf, sizeof buf);
  CHECK(n > 0 && n == strlen(buf), "explain returned %zu for %zu chars", n,
        strlen(buf));
  printf("explain (supported):\n%s", buf);
  // At least one line per usable backend (one per kernel); AUTO takes a
  // kernel of the best ranked backend, and exactly one kernel is taken.
  int taken = 0;
  for (const char *at = buf; *at;) {
    const char *end = strchr(at, '\n');
    size_t len = end ? (size_t)(end - at) : strlen(at);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)len, at);
    if (strstr(line, ": taken")) {
      taken++;
      CHECK(strncmp(line, fa_backend_name(0), strlen(fa_backend_name(0))) == 0,
            "the taken kernel is not the best-ranked backend's: \"%s\"", line);
    }
    at += len + (end != NULL);
  }
  CHECK(taken == 1, "%d kernels claim to be taken", taken);
  for (int i = 0; i < fa_backend_count(); i++) {
    const char *name = fa_backend_name(i);
    char line[512];
    line_of(buf, name, line, sizeof line);
    CHECK(line[0] != '\0', "explain has no line for backend %s", name);
  }
  char line[512];
  line_of(buf, "cpu cpu.scalar.f32:", line, sizeof line);
  CHECK(line[0] && !strstr(line, "skipped:"),
        "cpu.scalar.f32 skips a problem it supports: \"%s\"", line);

  CHECK(fa_explain(&a, FA_F32, NULL, 0) == n, "explain length query");
  char small[10];
  memset(small, 'x', sizeof small);
  CHECK(fa_explain(&a, FA_F32, small, sizeof small) == n && small[9] == '\0' &&
            strncmp(small, buf, 9) == 0,
        "explain truncation");

  a.head_dim = 600;
  n = fa_explain(&a, FA_F32, buf, sizeof buf);
  printf("explain (head_dim 600):\n%s", buf);
  line_of(buf, "cpu cpu.scalar.f32:", line, sizeof line);
  CHECK(strstr(line, "skipped") != NULL && strstr(line, "head_dim") &&
            strstr(line, "600"),
        "cpu.scalar.f32 line for head_dim 600: \"%s\"", line);

  a.head_dim = 64;
  a.batch = -1;
  n = fa_explain(&a, FA_F32, buf, sizeof buf);
  CHECK(n > 0 && strstr(buf, "batch") != NULL,
        "explain of an invalid problem does not say what is wrong: \"%s\"",
        buf);
  (void)fa_explain(NULL, FA_F32, buf, sizeof buf); // must not crash
}

int main(void) {
  test_version_status();
  test_attention_init();
  test_contexts();
  test_last_error();
  test_explain();
  return ut_finish("test_api_context");
}
