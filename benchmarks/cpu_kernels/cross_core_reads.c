/* What a kernel pays to read what the other core just wrote: one thread on core 0 reads a
 * buffer (AVX-512 loads, summed) that it wrote itself, that a thread on core 1 wrote, and
 * that neither has touched since 64 MiB were written over the caches. Prints GB/s of each,
 * means over ROUNDS. A layer whose threads split its input differently from the layer before
 * reads about half of it the second way (``benchmarks/models/kernels_inside.py``).
 *
 *     cc -O2 -mavx512f -pthread -o cross_core_reads cross_core_reads.c
 *     ./cross_core_reads KIB [ROUNDS]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../probes.h"

static size_t floats;
static float *data;
static volatile int phase;
static volatile float sink;

static float read_all(void) {
  __m512 sum = _mm512_setzero_ps();
  for (size_t i = 0; i < floats; i += 16) sum = _mm512_add_ps(sum, _mm512_load_ps(data + i));
  return _mm512_reduce_add_ps(sum);
}

static void write_all(float value) {
  __m512 v = _mm512_set1_ps(value);
  for (size_t i = 0; i < floats; i += 16) _mm512_store_ps(data + i, v);
}

static void *other_core(void *unused) {
  (void)unused;
  pin(1);
  while (phase != 1) {
  }
  write_all(2.0f);
  phase = 2;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s KIB [ROUNDS]\n", argv[0]);
    return 2;
  }
  size_t kib = strtoul(argv[1], NULL, 10);
  int rounds = argc > 2 ? atoi(argv[2]) : 20;
  floats = kib * 1024 / sizeof(float);
  data = aligned_alloc(64, floats * sizeof(float));
  char *flush = malloc(64u << 20);
  memset(data, 0, floats * sizeof(float));
  pin(0);
  double own = 0, other = 0, cold = 0;
  for (int r = 0; r < rounds; r++) {
    write_all(1.0f);
    double t = now_s();
    sink = read_all();
    own += now_s() - t;
    pthread_t thread;
    phase = 0;
    pthread_create(&thread, NULL, other_core, NULL);
    phase = 1;
    while (phase != 2) {
    }
    t = now_s();
    sink = read_all();
    other += now_s() - t;
    pthread_join(thread, NULL);
    memset(flush, r, 64u << 20);
    t = now_s();
    sink = read_all();
    cold += now_s() - t;
  }
  double bytes = (double)kib * 1024 * rounds;
  printf("%zu KiB read on core 0: written there %.1f GB/s, written by core 1 %.1f GB/s, "
         "after 64 MiB written over the caches %.1f GB/s\n",
         kib, bytes / own / 1e9, bytes / other / 1e9, bytes / cold / 1e9);
  return 0;
}
