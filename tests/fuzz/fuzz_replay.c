// SPDX-License-Identifier: MIT
// Runs libFuzzer inputs without libFuzzer: each argument is a file or a
// directory of files, fed to LLVMFuzzerTestOneInput in name order. Lets any
// compiler (gcc too) replay the committed corpus and regression cases.
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  unsigned char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 4096;
      unsigned char *p = realloc(buf, cap);
      if (!p) {
        fclose(f);
        free(buf);
        return -1;
      }
      buf = p;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    if (!got) break;
    n += got;
  }
  fclose(f);
  printf("%s (%zu bytes)\n", path, n);
  fflush(stdout);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  int files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st)) {
      perror(argv[i]);
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (run_file(argv[i])) return 2;
      files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) {
      perror(argv[i]);
      return 2;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char **p = realloc(names, sizeof *names * (n + 1));
      if (!p) return 2;
      names = p;
      size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
      names[n] = malloc(len);
      snprintf(names[n++], len, "%s/%s", argv[i], e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp);
    for (size_t k = 0; k < n; k++) {
      if (run_file(names[k])) return 2;
      files++;
      free(names[k]);
    }
    free(names);
  }
  printf("fuzz_replay: %d inputs, every property held\n", files);
  return files ? 0 : 2;
}
