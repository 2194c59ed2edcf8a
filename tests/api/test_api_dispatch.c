// SPDX-License-Identifier: MIT
// Dispatch is never silent and can be steered from the environment:
//   log          FA_LOG=dispatch prints every candidate, taken or skipped
//                with its reason, to stderr; a kernel chosen by measured
//                rates says the rates;
//   force        FLASHATTN_BACKEND=cpu-scalar binds AUTO contexts to the
//                cpu backend capped at cpu.scalar.f32, and explain says so;
//   nonexistent  FLASHATTN_BACKEND=<unknown> makes AUTO fail with
//                FA_ERR_NO_DEVICE and a message naming it.
// CTest sets the variables; each mode also sets them itself before the
// library's first use, so the binary can be run by hand too.
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <unistd.h>

#include "api_util.h"

static fa_status tiny_forward(fa_context *c, int head_dim) {
  enum { N = 2 * 3 * 600 };
  static float q[N], k[N], v[N], o[N], lse[8];
  for (int i = 0; i < N; i++) q[i] = k[i] = v[i] = (float)(i % 7) * 0.1f;
  fa_attention a = ts_problem(1, 2, 3, 1, 1, head_dim);
  return fa_forward(c, &a, au_bshd(q, 2, 1, head_dim),
                    au_bshd(k, 3, 1, head_dim), au_bshd(v, 3, 1, head_dim),
                    au_bshd(o, 2, 1, head_dim), lse);
}

// Run fn with stderr captured into out (NUL-terminated).
static void capture_stderr(void (*fn)(void), char *out, size_t len) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = dup(2);
  if (!tmp || saved < 0 || dup2(fileno(tmp), 2) < 0) {
    CHECK(0, "cannot redirect stderr");
    out[0] = '\0';
    fn();
    return;
  }
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  size_t n = fread(out, 1, len - 1, tmp);
  out[n] = '\0';
  fclose(tmp);
}

static void log_body(void) {
  fa_context *c = NULL;
  fa_status s = fa_context_create(&c, FA_BACKEND_AUTO, 0);
  if (s != FA_OK) return;
  (void)tiny_forward(c, 8);
  (void)tiny_forward(c, 600);
  fa_context_destroy(c);
  // The cpu backend's choices (AUTO may be a GPU's): f32, a head dim no
  // kernel takes, and bf16, which a kernel scoring by measured rates may
  // take.
  if (fa_context_create(&c, FA_BACKEND_CPU, 0) != FA_OK) return;
  (void)tiny_forward(c, 600);
  char k[64];
  (void)au_kernel_taken(c, FA_F32, k, sizeof k);
  (void)au_kernel_taken(c, FA_BF16, k, sizeof k);
  fa_context_destroy(c);
}

/* The line of log that contains both a and b, or "" (into line). */
static const char *line_with(const char *log, const char *a, const char *b,
                             char *line, size_t len) {
  for (const char *ln = log; ln && *ln;) {
    const char *eol = strchr(ln, '\n');
    size_t n = eol ? (size_t)(eol - ln) : strlen(ln);
    (void)snprintf(line, len, "%.*s", (int)n, ln);
    if (strstr(line, a) && strstr(line, b)) return line;
    ln = eol ? eol + 1 : NULL;
  }
  line[0] = '\0';
  return line;
}

static int mode_log(void) {
  unsetenv("FLASHATTN_BACKEND");
  const char *env = getenv("FA_LOG");
  if (!env || !strstr(env, "dispatch")) setenv("FA_LOG", "dispatch", 1);
  static char log[1 << 16];
  capture_stderr(log_body, log, sizeof log);
  fprintf(stdout, "captured stderr:\n%s", log);
  for (int i = 0; i < fa_backend_count(); i++)
    CHECK(strstr(log, fa_backend_name(i)) != NULL,
          "backend %s never mentioned in the dispatch log", fa_backend_name(i));
  // A line that takes cpu-scalar (or the best backend) for head_dim 8...
  CHECK(strstr(log, "taken") != NULL, "no 'taken' line in the dispatch log");
  // ...and a line that skips it for head_dim 600, with the reason.
  char line[512];
  CHECK(*line_with(log, "skipped: head_dim 600", "cpu cpu.", line, sizeof line),
        "no line skips a CPU kernel for head_dim 600 with the reason");
  // The taken line names the kernel, cpu.<isa>.<dtype>.
  CHECK(*line_with(log, "cpu cpu.", ".f32: taken", line, sizeof line),
        "no line takes a cpu.<isa>.f32 kernel");
  // A kernel chosen by measured rates (vdpbf16ps against fp32 FMAs) says
  // the rates and its score, by its name.
  if (strstr(log, "cpu cpu.avx512bf16.bf16: accepts")) {
    CHECK(*line_with(log, "cpu.avx512bf16.bf16: vdpbf16ps measured", "GFLOP/s",
                     line, sizeof line) &&
              strstr(line, "score"),
          "the bf16 score's reason is not logged with the kernel and rate");
  }
  // AUTO binds the best-ranked backend.
  fa_context *c = NULL;
  if (fa_context_create(&c, FA_BACKEND_AUTO, 0) == FA_OK) {
    CHECK(strcmp(fa_context_backend(c), fa_backend_name(0)) == 0,
          "AUTO context uses %s, best ranked is %s", fa_context_backend(c),
          fa_backend_name(0));
    fa_context_destroy(c);
  }
  return ut_finish("test_api_dispatch log");
}

static int mode_force(void) {
  const char *env = getenv("FLASHATTN_BACKEND");
  if (!env || strcmp(env, "cpu-scalar") != 0)
    setenv("FLASHATTN_BACKEND", "cpu-scalar", 1);
  fa_context *c = NULL;
  fa_status s = fa_context_create(&c, FA_BACKEND_AUTO, 0);
  EXPECT_OK("AUTO with FLASHATTN_BACKEND=cpu-scalar", s);
  if (s == FA_OK) {
    char k[64];
    CHECK(strcmp(fa_context_backend(c), "cpu") == 0, "forced context uses %s",
          fa_context_backend(c));
    CHECK(strcmp(au_kernel_taken(c, FA_BF16, k, sizeof k), "cpu.scalar.f32") ==
              0,
          "bf16 under cpu-scalar plans on %s", k);
    EXPECT_OK("forced forward", tiny_forward(c, 8));
    // Forcing never falls back: head_dim 600 stays unsupported.
    s = tiny_forward(c, 600);
    EXPECT_FAIL("forced, head_dim 600", s, FA_ERR_UNSUPPORTED, "head_dim",
                "600");
    fa_context_destroy(c);
  }
  char buf[2048];
  fa_attention a;
  fa_attention_init(&a);
  a.batch = a.seqlen_q = a.seqlen_k = a.heads_q = a.heads_kv = 1;
  a.head_dim = 8;
  fa_explain(&a, FA_F32, buf, sizeof buf);
  printf("explain:\n%s", buf);
  CHECK(strstr(buf, "cpu cpu.scalar.f32: taken"),
        "explain under FLASHATTN_BACKEND=cpu-scalar: %s", buf);
  // The kernels above the cap are there, left out by the variable.
  for (int i = 0; i < 2; i++) {
    static const char *above[] = {"cpu.avx512.f32", "cpu.avx2.f32"};
    fa_context *ck = NULL;
    if (fa_context_create_by_name(&ck, above[i]) != FA_OK) continue;
    fa_context_destroy(ck);
    char line[512];
    CHECK(*line_with(buf, above[i], "FA_BACKEND leaves it out", line,
                     sizeof line),
          "explain does not say FA_BACKEND leaves %s out: %s", above[i], buf);
  }
  return ut_finish("test_api_dispatch force");
}

static int mode_nonexistent(void) {
  const char *env = getenv("FLASHATTN_BACKEND");
  if (!env || !*env || strcmp(env, "cpu-scalar") == 0)
    setenv("FLASHATTN_BACKEND", "nonexistent-backend", 1);
  env = getenv("FLASHATTN_BACKEND");
  fa_context *const sentinel = (fa_context *)(uintptr_t)0x99;
  fa_context *c = sentinel;
  fa_status s = fa_context_create(&c, FA_BACKEND_AUTO, 0);
  EXPECT_FAIL("AUTO with FLASHATTN_BACKEND unknown", s, FA_ERR_NO_DEVICE, NULL,
              NULL);
  CHECK(strstr(fa_last_error(), env) != NULL,
        "message \"%s\" does not name \"%s\"", fa_last_error(), env);
  CHECK(strstr(fa_last_error(), "FLASHATTN_BACKEND") != NULL,
        "message \"%s\" does not say where the name came from",
        fa_last_error());
  CHECK(c == sentinel, "ctx written by a failing create");
  // An unknown name lists the names there are: the backend, the cap, the
  // reference kernel.
  CHECK(strstr(fa_last_error(), "cpu, ") &&
            strstr(fa_last_error(), "cpu-scalar") &&
            strstr(fa_last_error(), "cpu.scalar.f32"),
        "message \"%s\" does not list the names there are", fa_last_error());
  if (s == FA_OK) fa_context_destroy(c);
  return ut_finish("test_api_dispatch nonexistent");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "log") == 0) return mode_log();
  if (strcmp(mode, "force") == 0) return mode_force();
  if (strcmp(mode, "nonexistent") == 0) return mode_nonexistent();
  fprintf(stderr, "usage: %s log|force|nonexistent\n", argv[0]);
  return 2;
}
