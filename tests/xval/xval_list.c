// SPDX-License-Identifier: MIT
// What the xval tests are generated from (tests/xval/xval_discover.cmake):
// the backends and kernels of the registry, by the names that
// fa_context_create_by_name binds, and the groups of the grid. Nothing here
// is guessed from file names: a kernel added to a backend's table, or a
// group added to the grid's table, gets its tests at the next build.
//
// The registry lists every compiled-in backend whether or not it can run
// here (a GPU module loaded without a device), with its kernel table (the
// cpu backend's: the kernels of the ISAs this CPU runs); only a module that
// could not be loaded at all (its runtime library missing) is a placeholder
// without kernels, and the listing says so.
#include <stdio.h>

#include "registry.h"
#include "xval.h"
#include "xval_list.h"

int xv_list_kernels(FILE *out) {
  for (int i = 0; i < fa_registry_size(); i++) {
    const fa_registry_entry *e = fa_registry_at(i);
    const fa_backend *b = e->backend;
    const char *rt = fa_backend_kind_name(b->kind);
    fprintf(out, "backend %s %s %d", b->name, rt, b->num_kernels);
    if (!e->usable) fprintf(out, " (not usable here: %s)", e->why);
    fputc('\n', out);
    for (int k = 0; k < b->num_kernels; k++)
      fprintf(out, "kernel %s %s %s\n", b->kernels[k].name, b->name,
              b->kernels[k].backward ? "fwd,bwd" : "fwd");
  }
  return 0;
}

int xv_list_groups(FILE *out) {
  static xcase cases[XV_MAX_CASES];
  for (int g = 0; xv_group_name(g); g++) {
    int n = xv_group_cases(xv_group_name(g), cases, XV_MAX_CASES);
    if (n < 0 || n > XV_MAX_CASES) {
      fprintf(stderr, "test_xval: group %s has %d cases (at most %d)\n",
              xv_group_name(g), n, XV_MAX_CASES);
      return 1;
    }
    // A group is a backward group when any of its cases runs a backward:
    // a forward-only kernel gets no test of it.
    int bwd = 0;
    for (int i = 0; i < n; i++) bwd |= cases[i].bwd;
    fprintf(out, "group %s %s %d\n", xv_group_name(g), bwd ? "bwd" : "fwd", n);
  }
  return 0;
}
