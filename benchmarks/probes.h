/* What the C probes under benchmarks/ share (runtime/pingpong.c,
 * cpu_kernels/cross_core_reads.c): a monotonic clock in seconds, and pinning the calling thread
 * to a core. Each includes it as "../probes.h", after defining _GNU_SOURCE. */
#ifndef TVM_HETERO_BENCHMARKS_PROBES_H
#define TVM_HETERO_BENCHMARKS_PROBES_H

#include <sched.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  sched_setaffinity(0, sizeof set, &set);
}

#endif
