// SPDX-License-Identifier: MIT
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char fa_error_message[512];

fa_status fa_fail(fa_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(fa_error_message, sizeof fa_error_message, fmt, ap);
  va_end(ap);
  return s;
}

void fa_clear_error(void) { fa_error_message[0] = '\0'; }

const char *fa_last_error(void) { return fa_error_message; }

const char *fa_status_string(fa_status s) {
  switch (s) {
  case FA_OK:
    return "ok";
  case FA_ERR_INVALID_ARGUMENT:
    return "invalid argument";
  case FA_ERR_UNSUPPORTED:
    return "unsupported";
  case FA_ERR_NO_DEVICE:
    return "no device";
  case FA_ERR_OUT_OF_MEMORY:
    return "out of memory";
  case FA_ERR_BACKEND:
    return "backend error";
  }
  return "unknown status";
}
