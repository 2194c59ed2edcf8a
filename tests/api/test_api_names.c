// SPDX-License-Identifier: MIT
// The names a context is bound by (fa_context_create_by_name, FA_BACKEND):
//   names   "cpu" is the backend, its kernels are cpu.<isa>.<dtype> and
//           each binds exactly; "cpu-<isa>" binds the cpu backend capped
//           at that ISA (f32 plans on cpu.<isa>.f32, bf16 on a bf16 kernel
//           of that family only); an unknown name (a 0.2 kernel spelling
//           among them) is FA_ERR_NO_DEVICE listing the names there are.
//   capped  FA_CPU_MAX_ISA=avx2 (set by CTest): the kernels above it are
//           known but not usable, and binding them says why; "cpu" plans
//           on cpu.avx2.f32.
//   bogus   FA_CPU_MAX_ISA=bogus: no CPU kernel is offered, so the cpu
//           backend is unusable and AUTO says why (the names the cap takes).
#define _POSIX_C_SOURCE 200809L
#include "api_util.h"

/* The kernel a by-name context plans dtype on ("" if it cannot be made). */
static const char *planned(const char *name, fa_dtype dtype, char *k,
                           size_t len) {
  fa_context *c = NULL;
  k[0] = '\0';
  if (fa_context_create_by_name(&c, name) != FA_OK) return k;
  CHECK(strcmp(fa_context_backend(c), "cpu") == 0,
        "a context bound to %s reports backend %s", name,
        fa_context_backend(c));
  au_kernel_taken(c, dtype, k, len);
  fa_context_destroy(c);
  return k;
}

/* name is cpu.<isa>.<dtype> with dtype f32 or bf16. */
static int kernel_name_ok(const char *name) {
  const char *isa = name + 4, *dot = strchr(isa, '.');
  return !strncmp(name, "cpu.", 4) && dot && dot > isa &&
         (!strcmp(dot, ".f32") || !strcmp(dot, ".bf16"));
}

static void expect_unknown(const char *name) {
  fa_context *const sentinel = (fa_context *)(uintptr_t)0x99;
  fa_context *c = sentinel;
  fa_status s = fa_context_create_by_name(&c, name);
  EXPECT_FAIL(name, s, FA_ERR_NO_DEVICE, NULL, NULL);
  const char *m = fa_last_error();
  CHECK(strstr(m, name) && strstr(m, "cpu, ") && strstr(m, "cpu-scalar") &&
            strstr(m, "cpu.scalar.f32"),
        "%s: the message \"%s\" does not name it and list the names", name, m);
  CHECK(c == sentinel, "%s: ctx written by a failing create", name);
}

static int mode_names(void) {
  char k[64], best_f32[64], best_bf16[64];
  fa_context *c = NULL;
  EXPECT_OK("FA_BACKEND_CPU", fa_context_create(&c, FA_BACKEND_CPU, 0));
  au_kernel_taken(c, FA_F32, best_f32, sizeof best_f32);
  au_kernel_taken(c, FA_BF16, best_bf16, sizeof best_bf16);
  fa_context_destroy(c);
  CHECK(kernel_name_ok(best_f32), "CPU plans f32 on \"%s\"", best_f32);
  CHECK(kernel_name_ok(best_bf16), "CPU plans bf16 on \"%s\"", best_bf16);
  // "cpu" by name is the whole backend: the same choices as the kind.
  CHECK(!strcmp(planned("cpu", FA_F32, k, sizeof k), best_f32),
        "\"cpu\" plans f32 on %s, FA_BACKEND_CPU on %s", k, best_f32);
  CHECK(!strcmp(planned("cpu", FA_BF16, k, sizeof k), best_bf16),
        "\"cpu\" plans bf16 on %s, FA_BACKEND_CPU on %s", k, best_bf16);

  // Every kernel binds exactly, and is named cpu.<isa>.<dtype>.
  static char f32[16][64], bf16[16][64];
  const int nf = ts_kernels_accepting("cpu", FA_F32, f32, 16);
  const int nb = ts_kernels_accepting("cpu", FA_BF16, bf16, 16);
  CHECK(nf >= 1 && !strcmp(f32[nf - 1], "cpu.scalar.f32"),
        "the last f32 kernel is not cpu.scalar.f32 (%d kernels)", nf);
  CHECK(nf >= 1 && !strcmp(f32[0], best_f32),
        "the first f32 kernel %s is not the one taken, %s", f32[0], best_f32);
  for (int i = 0; i < nf + nb; i++) {
    const char *name = i < nf ? f32[i] : bf16[i - nf];
    CHECK(kernel_name_ok(name), "kernel \"%s\" is not cpu.<isa>.<dtype>", name);
    const fa_dtype dt = i < nf ? FA_F32 : FA_BF16;
    CHECK(!strcmp(planned(name, dt, k, sizeof k), name),
          "a context bound to %s plans on \"%s\"", name, k);
  }

  // cpu-<isa>: capped at the ISA. f32 on its own kernel; bf16 on a bf16
  // kernel of its family or on the f32 kernel.
  static const char *isas[] = {"scalar", "avx2", "avx512", "neon"};
  int aliases = 0;
  for (int i = 0; i < 4; i++) {
    char alias[32], own[32];
    snprintf(alias, sizeof alias, "cpu-%s", isas[i]);
    snprintf(own, sizeof own, "cpu.%s.f32", isas[i]);
    fa_context *a = NULL;
    fa_status s = fa_context_create_by_name(&a, alias);
    if (s) {
      EXPECT_FAIL(alias, s, FA_ERR_NO_DEVICE, NULL, NULL);
      CHECK(strstr(fa_last_error(), alias), "\"%s\" does not name %s",
            fa_last_error(), alias);
      continue; // not built here, or not usable on this CPU
    }
    aliases++;
    fa_context_destroy(a);
    CHECK(!strcmp(planned(alias, FA_F32, k, sizeof k), own),
          "%s plans f32 on \"%s\", not %s", alias, k, own);
    planned(alias, FA_BF16, k, sizeof k);
    const int family = !strcmp(isas[i], "avx512");
    CHECK(!strcmp(k, own) || (family && !strcmp(k, best_bf16)),
          "%s plans bf16 on \"%s\"", alias, k);
  }
  CHECK(aliases >= 1, "no cpu-<isa> name binds (cpu-scalar must)");
  CHECK(!strcmp(planned("cpu-scalar", FA_BF16, k, sizeof k), "cpu.scalar.f32"),
        "cpu-scalar plans bf16 on \"%s\"", k);

  // Unknown names, the 0.2 kernel spellings among them, list what exists.
  expect_unknown("cpu.scalar");
  expect_unknown("cpu.avx2");
  expect_unknown("cpu-nonexistent");
  expect_unknown("CPU");
  return ut_finish("test_api_names names");
}

static int mode_capped(void) {
  const char *cap = getenv("FA_CPU_MAX_ISA");
  if (!cap || strcmp(cap, "avx2") != 0) setenv("FA_CPU_MAX_ISA", "avx2", 1);
  fa_context *c = NULL;
  fa_status s = fa_context_create_by_name(&c, "cpu.avx512.f32");
  if (s == FA_OK || !strstr(fa_last_error(), "capped")) {
    printf("SKIP: cpu.avx512.f32 is not built or not run here: %s\n",
           s ? fa_last_error() : "it binds");
    if (!s) fa_context_destroy(c);
    return 77;
  }
  EXPECT_FAIL("cpu.avx512.f32 capped", s, FA_ERR_NO_DEVICE, "FA_CPU_MAX_ISA",
              NULL);
  s = fa_context_create_by_name(&c, "cpu-avx512");
  EXPECT_FAIL("cpu-avx512 capped", s, FA_ERR_NO_DEVICE, "FA_CPU_MAX_ISA", NULL);
  CHECK(strstr(fa_last_error(), "not usable here"), "cpu-avx512 capped: \"%s\"",
        fa_last_error());
  char k[64];
  CHECK(!strcmp(planned("cpu", FA_F32, k, sizeof k), "cpu.avx2.f32"),
        "capped at avx2, f32 plans on \"%s\"", k);
  CHECK(!strcmp(planned("cpu", FA_BF16, k, sizeof k), "cpu.avx2.f32"),
        "capped at avx2, bf16 plans on \"%s\"", k);
  return ut_finish("test_api_names capped");
}

static int mode_bogus(void) {
  const char *cap = getenv("FA_CPU_MAX_ISA");
  if (!cap || strcmp(cap, "bogus") != 0) setenv("FA_CPU_MAX_ISA", "bogus", 1);
  fa_context *c = NULL;
  fa_status s = fa_context_create(&c, FA_BACKEND_CPU, 0);
  EXPECT_FAIL("CPU context, FA_CPU_MAX_ISA=bogus", s, FA_ERR_NO_DEVICE,
              "FA_CPU_MAX_ISA scalar", NULL);
  if (!s) fa_context_destroy(c);
  s = fa_context_create_by_name(&c, "cpu");
  EXPECT_FAIL("\"cpu\", FA_CPU_MAX_ISA=bogus", s, FA_ERR_NO_DEVICE,
              "FA_CPU_MAX_ISA", NULL);
  if (!s) fa_context_destroy(c);
  for (int i = 0; i < fa_backend_count(); i++)
    CHECK(strcmp(fa_backend_name(i), "cpu") != 0,
          "cpu is listed usable with no kernel");
  return ut_finish("test_api_names bogus");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "names";
  if (!strcmp(mode, "names")) return mode_names();
  if (!strcmp(mode, "capped")) return mode_capped();
  if (!strcmp(mode, "bogus")) return mode_bogus();
  fprintf(stderr, "usage: %s names|capped|bogus\n", argv[0]);
  return 2;
}
