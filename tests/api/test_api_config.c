// SPDX-License-Identifier: MIT
// Version and configuration:
//   version  fa_version_number() == FA_VERSION_NUMBER (MAJOR * 10000 +
//            MINOR * 100 + PATCH) and fa_version() == FA_VERSION_STRING;
//            a CPU backend or kernel name with ":1" is FA_ERR_NO_DEVICE
//            (":0" is device 0).
//   config   FA_LOG=config FLASHATTN_BACKEND=cpu-scalar (set by CTest):
//            the first use prints the configuration table to stderr, with
//            FA_BACKEND's value coming from the old name; the old name
//            still binds (the cpu backend capped at cpu.scalar.f32); no
//            dispatch lines (config only); the table is read once (a later
//            setenv changes nothing).
//   alias    FLASHATTN_BACKEND=no-such-backend: AUTO fails with
//            FA_ERR_NO_DEVICE naming the variable the name came from.
//   both     FA_BACKEND=cpu-scalar FLASHATTN_BACKEND=no-such-backend: the
//            new name wins.
//   kernel   FA_BACKEND=cpu.scalar.f32: a kernel name binds AUTO contexts to
//            that kernel.
// Each mode sets its variables itself too (before the library's first use)
// so that the binary can be run by hand.
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <unistd.h>

#include "api_util.h"

static void need_env(const char *name, const char *value) {
  const char *v = getenv(name);
  if (!v || strcmp(v, value) != 0) setenv(name, value, 1);
}

/* A context bound to cpu-scalar (or its kernel) is the cpu backend whose
   f32 and bf16 problems both plan on cpu.scalar.f32 (no bf16 kernel is at
   or below scalar). */
static void expect_scalar(fa_context *c, const char *what) {
  char k[64];
  CHECK(strcmp(fa_context_backend(c), "cpu") == 0, "%s: backend %s", what,
        fa_context_backend(c));
  CHECK(strcmp(au_kernel_taken(c, FA_F32, k, sizeof k), "cpu.scalar.f32") == 0,
        "%s: f32 planned on \"%s\", not cpu.scalar.f32", what, k);
  CHECK(strcmp(au_kernel_taken(c, FA_BF16, k, sizeof k), "cpu.scalar.f32") == 0,
        "%s: bf16 planned on \"%s\", not cpu.scalar.f32", what, k);
}

static int mode_version(void) {
  CHECK(fa_version_number() == FA_VERSION_NUMBER,
        "fa_version_number() = %d, FA_VERSION_NUMBER = %d", fa_version_number(),
        FA_VERSION_NUMBER);
  CHECK(FA_VERSION_NUMBER == FA_VERSION_MAJOR * 10000 + FA_VERSION_MINOR * 100 +
                                 FA_VERSION_PATCH,
        "FA_VERSION_NUMBER %d is not MAJOR*10000 + MINOR*100 + PATCH",
        FA_VERSION_NUMBER);
  CHECK(strcmp(fa_version(), FA_VERSION_STRING) == 0,
        "fa_version() = %s, FA_VERSION_STRING = %s", fa_version(),
        FA_VERSION_STRING);
  char v[32];
  snprintf(v, sizeof v, "%d.%d.%d", FA_VERSION_MAJOR, FA_VERSION_MINOR,
           FA_VERSION_PATCH);
  CHECK(strcmp(fa_version(), v) == 0, "fa_version() = %s, expected %s",
        fa_version(), v);
  static const char *names[] = {"cpu:1", "cpu-scalar:1", "cpu.scalar.f32:1",
                                "cpu-scalar:7"};
  for (int i = 0; i < 4; i++) {
    fa_context *const sentinel = (fa_context *)(uintptr_t)0x99;
    fa_context *c = sentinel;
    fa_status s = fa_context_create_by_name(&c, names[i]);
    EXPECT_FAIL(names[i], s, FA_ERR_NO_DEVICE, "device", NULL);
    CHECK(strstr(fa_last_error(), names[i]) != NULL,
          "the message \"%s\" does not name \"%s\"", fa_last_error(), names[i]);
    CHECK(c == sentinel, "%s: ctx written by a failing create", names[i]);
  }
  fa_context *c = NULL;
  EXPECT_OK("cpu-scalar:0", fa_context_create_by_name(&c, "cpu-scalar:0"));
  fa_context_destroy(c);
  c = NULL;
  EXPECT_FAIL("cpu-scalar:x", fa_context_create_by_name(&c, "cpu-scalar:x"),
              FA_ERR_INVALID_ARGUMENT, NULL, NULL);
  return ut_finish("test_api_config version");
}

static int mode_config(void) {
  need_env("FA_LOG", "config");
  need_env("FLASHATTN_BACKEND", "cpu-scalar");
  unsetenv("FA_BACKEND");
  // Capture stderr across the library's first use.
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = dup(2);
  if (!tmp || saved < 0 || dup2(fileno(tmp), 2) < 0) {
    fprintf(stderr, "cannot redirect stderr\n");
    return 1;
  }
  fa_context *c = NULL;
  fa_status s = fa_context_create(&c, FA_BACKEND_AUTO, 0);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  static char log[1 << 16];
  rewind(tmp);
  size_t n = fread(log, 1, sizeof log - 1, tmp);
  log[n] = '\0';
  fclose(tmp);
  printf("captured stderr:\n%s", log);
  EXPECT_OK("AUTO with FLASHATTN_BACKEND=cpu-scalar", s);
  if (!s) expect_scalar(c, "the old variable name");
  fa_context_destroy(c);
  CHECK(strstr(log, "configuration") != NULL, "no configuration table");
  CHECK(strstr(log, "FA_BACKEND=cpu-scalar (from FLASHATTN_BACKEND)") != NULL,
        "the table does not show FA_BACKEND from its old name");
  CHECK(strstr(log, "FA_LOG=config") != NULL, "the table lacks FA_LOG");
  static const char *switches[] = {"FA_MODULE_PATH", "FA_CHECKED",
                                   "FA_CPU_MAX_ISA"};
  for (int i = 0; i < 3; i++)
    CHECK(strstr(log, switches[i]) != NULL, "the table lacks %s", switches[i]);
  CHECK(strstr(log, "dispatch:") == NULL,
        "FA_LOG=config printed dispatch lines");
  // Read once: a change now is not seen.
  setenv("FLASHATTN_BACKEND", "no-such-backend", 1);
  setenv("FA_BACKEND", "no-such-backend", 1);
  c = NULL;
  s = fa_context_create(&c, FA_BACKEND_AUTO, 0);
  EXPECT_OK("AUTO after the environment changed", s);
  if (!s) expect_scalar(c, "the table read again");
  fa_context_destroy(c);
  return ut_finish("test_api_config config");
}

static int mode_alias(void) {
  need_env("FLASHATTN_BACKEND", "no-such-backend");
  unsetenv("FA_BACKEND");
  fa_context *c = NULL;
  fa_status s = fa_context_create(&c, FA_BACKEND_AUTO, 0);
  EXPECT_FAIL("AUTO with FLASHATTN_BACKEND=no-such-backend", s,
              FA_ERR_NO_DEVICE, "FLASHATTN_BACKEND", NULL);
  CHECK(strstr(fa_last_error(), "no-such-backend") != NULL,
        "the message \"%s\" does not name the backend", fa_last_error());
  if (!s) fa_context_destroy(c);
  return ut_finish("test_api_config alias");
}

/* An AUTO context (under the variables the mode set) is bound to scalar. */
static int auto_is_scalar(const char *what, const char *mode) {
  fa_context *c = NULL;
  fa_status s = fa_context_create(&c, FA_BACKEND_AUTO, 0);
  EXPECT_OK(what, s);
  if (!s) {
    expect_scalar(c, what);
    fa_context_destroy(c);
  }
  return ut_finish(mode);
}

static int mode_both(void) {
  need_env("FA_BACKEND", "cpu-scalar");
  need_env("FLASHATTN_BACKEND", "no-such-backend");
  return auto_is_scalar("FA_BACKEND over FLASHATTN_BACKEND",
                        "test_api_config both");
}

static int mode_kernel(void) {
  need_env("FA_BACKEND", "cpu.scalar.f32");
  return auto_is_scalar("FA_BACKEND=cpu.scalar.f32", "test_api_config kernel");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "version")) return mode_version();
  if (!strcmp(mode, "config")) return mode_config();
  if (!strcmp(mode, "alias")) return mode_alias();
  if (!strcmp(mode, "both")) return mode_both();
  if (!strcmp(mode, "kernel")) return mode_kernel();
  fprintf(stderr, "usage: %s version|config|alias|both|kernel\n", argv[0]);
  return 2;
}
