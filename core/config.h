// SPDX-License-Identifier: MIT
// One configuration: every environment switch the library reads, in one
// table (core/config.c), read once at first use. docs/configuration.md
// lists them; FA_LOG=dispatch (or config) prints the table as read.
#ifndef FA_CORE_CONFIG_H
#define FA_CORE_CONFIG_H

#include <stddef.h>

/* The value of switch `name` (one of the table's names, e.g. "FA_CHECKED"):
   the string as set (NULL if unset or empty). Names outside the table are a
   programming error: NULL, and a log line when logging. */
const char *fa_config_string(const char *name);

/* The switch as an integer: 0 if unset, empty or "0"; strtol otherwise
   ("1", "2"); 1 for any other non-numeric value ("on", "yes"). */
long fa_config_int(const char *name);

/* The environment variable switch `name` was read from: its name, or its
   0.1 alias ("FLASHATTN_BACKEND" for FA_BACKEND); NULL if unset. */
const char *fa_config_source(const char *name);

/* The table with the values read, one "NAME=value (source)" line per
   switch, snprintf-style. */
size_t fa_config_describe(char *buf, size_t len);

#endif
