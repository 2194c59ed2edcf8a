// SPDX-License-Identifier: MIT
// The tests' one check macro: CHECK(cond, "format", args...) counts a
// check, and a failure prints file, line, the condition and the message
// (the first 40; UT_VERBOSE=1 prints them all); FAIL("format", args...) is
// a check that failed (for a failure found by other means). The counts are
// atomic: threads may check at once. ut_finish(name) prints the totals and
// returns the exit code (1 if any check failed). Header-only, so that the
// API tests, which link nothing but the library, use it too.
// Also a small reproducible random number generator for unit tests.
#ifndef FA_TESTS_CHECK_H
#define FA_TESTS_CHECK_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define UT_UNUSED __attribute__((unused))
#else
#define UT_UNUSED
#endif

static atomic_long ut_failures;
static atomic_long ut_checks;

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void
ut_report(const char *file, int line, const char *expr, const char *fmt, ...) {
  // The first few say enough; UT_VERBOSE=1 prints them all.
  if (++ut_failures > (getenv("UT_VERBOSE") ? 100000 : 40)) return;
  fprintf(stderr, "%s:%d: FAILED%s%s: ", file, line, *expr ? " " : "", expr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

// CHECK(cond, "format", args...): the message says what was seen.
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    ut_checks++;                                                               \
    if (!(cond)) ut_report(__FILE__, __LINE__, #cond, __VA_ARGS__);            \
  } while (0)

// FAIL("format", args...): a failed check, with what was seen.
#define FAIL(...)                                                              \
  do {                                                                         \
    ut_checks++;                                                               \
    ut_report(__FILE__, __LINE__, "", __VA_ARGS__);                            \
  } while (0)

UT_UNUSED static int ut_finish(const char *name) {
  if (ut_failures) {
    fprintf(stderr, "%s: %ld of %ld checks failed\n", name,
            atomic_load(&ut_failures), atomic_load(&ut_checks));
    return 1;
  }
  printf("%s: all %ld checks passed\n", name, atomic_load(&ut_checks));
  return 0;
}

// xorshift64*: reproducible pseudo-random numbers, independent of libc.
static uint64_t ut_rng_state = 0x9e3779b97f4a7c15ull;

UT_UNUSED static uint64_t ut_rand64(void) {
  uint64_t x = ut_rng_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  ut_rng_state = x;
  return x * 0x2545f4914f6cdd1dull;
}

// Uniform integer in [lo, hi] (inclusive).
UT_UNUSED static int ut_rand_int(int lo, int hi) {
  return lo + (int)(ut_rand64() % (uint64_t)(hi - lo + 1));
}

// Uniform double in [lo, hi).
UT_UNUSED static double ut_rand_uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(ut_rand64() >> 11) * 0x1.0p-53);
}

#endif
