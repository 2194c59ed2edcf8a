// SPDX-License-Identifier: MIT
// Thread-local error message behind fa_last_error(). Every failing path
// goes through fa_fail() so that the status and the message never disagree.
#ifndef FA_CORE_ERROR_H
#define FA_CORE_ERROR_H

#include "flashattn.h"

#if defined(__GNUC__)
#define FA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FA_PRINTF(a, b)
#endif

/* Record a message for fa_last_error() and return s. */
fa_status fa_fail(fa_status s, const char *fmt, ...) FA_PRINTF(2, 3);
/* Clear the message at the start of each public call. */
void fa_clear_error(void);

#endif
