// SPDX-License-Identifier: MIT
// test_xval --list-kernels and --list-groups (xval_list.c): the lines the
// build turns into CTest tests (xval_discover.cmake).
#ifndef FA_TESTS_XVAL_LIST_H
#define FA_TESTS_XVAL_LIST_H

#include <stdio.h>

/* One line per registry entry, then one per kernel of its table:
     backend NAME RUNTIME NUM_KERNELS [(not usable here: WHY)]
     kernel NAME BACKEND fwd|fwd,bwd
   RUNTIME is cpu, cuda or hip. Returns 0. */
int xv_list_kernels(FILE *out);

/* One line per group of the grid (xv_group_name): group NAME fwd|bwd NUM_CASES.
   Returns 0, or 1 when a group has more cases than the runner holds. */
int xv_list_groups(FILE *out);

#endif
