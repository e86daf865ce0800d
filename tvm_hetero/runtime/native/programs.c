/* Programs of local CPU workers, run natively (tvm_hetero.runtime.native_programs).
 *
 * A plan holds every step of a deployment's local programs: call a unit (a VM function), take
 * an item of a tuple, or pass a value on (a copy between CPU workers of one process, which
 * moves no bytes). Each worker thread calls `tvm_hetero.native.serve` with the GIL
 * released and runs its steps for every microbatch by itself; a value made on another thread
 * is a latch (spin a while, then sleep on a futex). The caller fills the inputs, starts the
 * workers, waits on `tvm_hetero.native.wait` and takes the values. Only the C API of TVM FFI
 * is used, so the same source builds against the runtime-only wheel.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <tvm/ffi/c_api.h>

#include "ffi_helpers.h"
#include <unistd.h>

enum { UNIT = 0, ITEM = 1, ALIAS = 2 };
enum { OK = 0, FAILED = 1, TIMED_OUT = 2 };
/* a latch: unset, unset with a sleeper, set */
enum { UNSET = 0, SLEEPER = 1, SET = 2 };
/* a worker: not in the plan, spinning for the next request, claimed for it, running one,
 * told to leave (the plan is being freed) */
enum { IDLE = 0, SERVING = 1, CLAIMED = 2, BUSY = 3, STOPPED = 4 };

typedef struct {
  int32_t kind, function, out, index, n_in, in_at, n_wait, wait_at, n_set, set_at;
} Step;

typedef struct {
  int32_t n_steps, n_slots, n_latches, n_workers, n_functions;
  Step* steps;
  int32_t* ints; /* inputs, waits and sets of the steps */
  int32_t *program_at, *program_len, *programs;
  /* per worker, its program cut into segments, each starting at a step that waits for
   * another worker: segment j of worker w spans programs[segments[seg_at[w] + j] ..
   * segments[seg_at[w] + j + 1]) (offsets into its program), n_segments[w] of them */
  int32_t *segments, *seg_at, *n_segments;
  TVMFFIObjectHandle* functions;
  TVMFFIObjectHandle get_item, make_array;
  double timeout_s;
  double* spin_s; /* per worker: how long it spins before it sleeps */
  /* one request of n_runs microbatches */
  int32_t n_runs, cap_runs;
  TVMFFIAny* values;          /* cap_runs * n_slots, owned */
  _Atomic uint32_t* latches;  /* cap_runs * n_latches */
  _Atomic int32_t* pending;   /* per run: workers not yet through it */
  double *began, *ended;      /* cap_runs * n_steps, unit steps only */
  double* finished;           /* per run */
  _Atomic uint32_t workers_left;
  _Atomic int32_t status;
  int32_t failed_step, failed_latch;
  char message[2048];
  _Atomic int32_t* running; /* per worker: the unit it runs, -1 */
  _Atomic int32_t* started; /* per worker: whether it began this request */
  double* running_since;
  _Atomic int32_t inside; /* worker threads inside serve */
  _Atomic int32_t* state;  /* per worker: IDLE, SERVING, CLAIMED or BUSY */
} Plan;

static void futex_wake_all(_Atomic uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void futex_sleep(_Atomic uint32_t* word, uint32_t seen, double seconds) {
  if (seconds <= 0) return;
  struct timespec t;
  t.tv_sec = (time_t)seconds;
  t.tv_nsec = (long)((seconds - (double)t.tv_sec) * 1e9);
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, &t, NULL, 0);
}

/* One turn of a spin that ends at `until`: a pause, and every 64 turns a look at the clock
 * and a yield (a thread sharing this core, the caller say, runs then); 1 when time is up. */
static int spun_out(uint32_t turn, double until) {
  __builtin_ia32_pause();
  if ((turn & 63) != 0) return 0;
  sched_yield();
  return now_s() > until;
}

static void latch_set(_Atomic uint32_t* latch) {
  if (atomic_exchange(latch, SET) == SLEEPER) futex_wake_all(latch);
}

/* Wait for a latch: spin up to spin seconds, then sleep; 0 when the deadline passes first. */
static int latch_wait(_Atomic uint32_t* latch, double spin, double deadline) {
  if (atomic_load_explicit(latch, memory_order_acquire) == SET) return 1;
  double spin_until = now_s() + spin;
  for (uint32_t i = 1; !spun_out(i, spin_until); i++) {
    if (atomic_load_explicit(latch, memory_order_acquire) == SET) return 1;
  }
  for (;;) {
    uint32_t seen = UNSET;
    if (!atomic_compare_exchange_strong(latch, &seen, SLEEPER) && seen == SET) return 1;
    double left = deadline - now_s();
    if (left <= 0) return atomic_load(latch) == SET;
    futex_sleep(latch, SLEEPER, left);
    if (atomic_load_explicit(latch, memory_order_acquire) == SET) return 1;
  }
}

static void copy_any(TVMFFIAny* to, const TVMFFIAny* from) {
  if (from->type_index >= kTVMFFIStaticObjectBegin && from->v_obj != NULL) {
    TVMFFIObjectIncRef(from->v_obj);
  }
  *to = *from;
}

/* The first failure of a request: kept with its message; every latch set so no worker waits. */
static void fail(Plan* plan, int32_t status, int32_t step, int32_t latch, const char* message) {
  int32_t expected = OK;
  if (atomic_compare_exchange_strong(&plan->status, &expected, status)) {
    plan->failed_step = step;
    plan->failed_latch = latch;
    snprintf(plan->message, sizeof plan->message, "%s", message);
  }
  for (int64_t h = 0; h < (int64_t)plan->cap_runs * plan->n_latches; h++) {
    latch_set(&plan->latches[h]);
  }
}

static void fail_raised(Plan* plan, int32_t step) {
  TVMFFIObjectHandle error = NULL;
  char message[2048] = "unknown error";
  TVMFFIErrorMoveFromRaised(&error);
  if (error != NULL) {
    TVMFFIErrorCell* cell = (TVMFFIErrorCell*)((char*)error + sizeof(TVMFFIObject));
    snprintf(message, sizeof message, "%.*s: %.*s", (int)cell->kind.size, cell->kind.data,
             (int)cell->message.size, cell->message.data);
    TVMFFIObjectDecRef(error);
  }
  fail(plan, FAILED, step, -1, message);
}

/* One step of run r by worker w; 0 when the request failed. */
static int perform(Plan* plan, int32_t w, int32_t r, int32_t s, double deadline) {
  Step* step = &plan->steps[s];
  TVMFFIAny* values = &plan->values[(int64_t)r * plan->n_slots];
  _Atomic uint32_t* latches = &plan->latches[(int64_t)r * plan->n_latches];
  for (int32_t k = 0; k < step->n_wait; k++) {
    int32_t h = plan->ints[step->wait_at + k];
    if (!latch_wait(&latches[h], plan->spin_s[w], deadline)) {
      fail(plan, TIMED_OUT, s, h, "timed out");
      return 0;
    }
  }
  if (atomic_load(&plan->status) != OK) return 0;
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.zero_padding = 0;
  result.v_int64 = 0;
  if (step->kind == UNIT) {
    TVMFFIAny args[64];
    TVMFFIAny* argv = step->n_in <= 64 ? args : malloc(sizeof(TVMFFIAny) * step->n_in);
    for (int32_t k = 0; k < step->n_in; k++) argv[k] = values[plan->ints[step->in_at + k]];
    int64_t at = (int64_t)r * plan->n_steps + s;
    atomic_store(&plan->running[w], s);
    plan->running_since[w] = plan->began[at] = now_s();
    int rc = TVMFFIFunctionCall(plan->functions[step->function], argv, step->n_in, &result);
    plan->ended[at] = now_s();
    atomic_store(&plan->running[w], -1);
    if (argv != args) free(argv);
    if (rc != 0) {
      fail_raised(plan, s);
      return 0;
    }
  } else if (step->kind == ITEM) {
    TVMFFIAny args[2];
    args[0] = values[plan->ints[step->in_at]];
    args[1].type_index = kTVMFFIInt;
    args[1].zero_padding = 0;
    args[1].v_int64 = step->index;
    if (TVMFFIFunctionCall(plan->get_item, args, 2, &result) != 0) {
      fail_raised(plan, s);
      return 0;
    }
  } else {
    copy_any(&result, &values[plan->ints[step->in_at]]);
  }
  release_any(&values[step->out]);
  values[step->out] = result;
  for (int32_t k = 0; k < step->n_set; k++) latch_set(&latches[plan->ints[step->set_at + k]]);
  return 1;
}

static void end_run(Plan* plan, int32_t r) {
  if (atomic_fetch_sub(&plan->pending[r], 1) == 1) plan->finished[r] = now_s();
}

/* Worker w's program for every run of the request: the program cut into segments, each
 * starting at a step that waits for another worker; the oldest run whose next segment has
 * its inputs goes next (segment j of run k after that of run k - 1), the oldest waited on
 * when none has. */
static void run_program(Plan* plan, int32_t w) {
  const int32_t* mine = &plan->programs[plan->program_at[w]];
  const int32_t* seg_at = &plan->segments[plan->seg_at[w]];
  int32_t n_seg = plan->n_segments[w];
  int32_t n_runs = plan->n_runs;
  int32_t* done = calloc(n_runs > 0 ? n_runs : 1, sizeof(int32_t));
  double deadline_step = plan->timeout_s;
  for (;;) {
    int32_t choice = -1;
    for (int32_t k = 0; k < n_runs; k++) {
      int32_t j = done[k];
      if (j == n_seg || (k > 0 && done[k - 1] <= j)) continue;
      if (choice < 0) choice = k;
      Step* first = &plan->steps[mine[seg_at[j]]];
      _Atomic uint32_t* latches = &plan->latches[(int64_t)k * plan->n_latches];
      int ready = 1;
      for (int32_t q = 0; q < first->n_wait && ready; q++) {
        ready = atomic_load(&latches[plan->ints[first->wait_at + q]]) == SET;
      }
      if (ready) {
        choice = k;
        break;
      }
    }
    if (choice < 0 || atomic_load(&plan->status) != OK) break;
    int32_t j = done[choice]++;
    for (int32_t i = seg_at[j]; i < seg_at[j + 1]; i++) {
      if (!perform(plan, w, choice, mine[i], now_s() + deadline_step)) goto out;
    }
    if (done[choice] == n_seg) end_run(plan, choice);
  }
  if (n_seg == 0) {
    for (int32_t k = 0; k < n_runs; k++) end_run(plan, k);
  }
out:
  free(done);
}

/* ---- FFI functions -------------------------------------------------------------------- */

static Plan* plan_of(const TVMFFIAny* arg) { return (Plan*)(intptr_t)arg->v_int64; }

/* new(address of int32 table, its length, timeout_s) -> plan. The table: n_steps n_slots
 * n_latches n_workers n_functions; per step its ten fields (Step); the number of ints and
 * the ints; per worker the length of its program; the programs; per worker how long it
 * spins before it sleeps, in microseconds. */
static int f_new(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  if (n != 3) return raise_("new(table, length, timeout_s)");
  const int32_t* t = (const int32_t*)(intptr_t)args[0].v_int64;
  int64_t length = args[1].v_int64;
  Plan* plan = calloc(1, sizeof(Plan));
  plan->n_steps = t[0];
  plan->n_slots = t[1];
  plan->n_latches = t[2];
  plan->n_workers = t[3];
  plan->n_functions = t[4];
  plan->timeout_s = float_of(&args[2]);
  int64_t at = 5;
  plan->steps = malloc(sizeof(Step) * (plan->n_steps + 1));
  memcpy(plan->steps, t + at, sizeof(Step) * plan->n_steps);
  at += 10 * (int64_t)plan->n_steps;
  int64_t n_ints = t[at++];
  plan->ints = malloc(sizeof(int32_t) * (n_ints + 1));
  memcpy(plan->ints, t + at, sizeof(int32_t) * n_ints);
  at += n_ints;
  plan->program_at = malloc(sizeof(int32_t) * (plan->n_workers + 1));
  plan->program_len = malloc(sizeof(int32_t) * (plan->n_workers + 1));
  int64_t total = 0;
  for (int32_t w = 0; w < plan->n_workers; w++) {
    plan->program_at[w] = (int32_t)total;
    plan->program_len[w] = t[at++];
    total += plan->program_len[w];
  }
  plan->programs = malloc(sizeof(int32_t) * (total + 1));
  memcpy(plan->programs, t + at, sizeof(int32_t) * total);
  at += total;
  plan->segments = malloc(sizeof(int32_t) * (total + plan->n_workers + 1));
  plan->seg_at = malloc(sizeof(int32_t) * (plan->n_workers + 1));
  plan->n_segments = malloc(sizeof(int32_t) * (plan->n_workers + 1));
  int32_t used = 0;
  for (int32_t w = 0; w < plan->n_workers; w++) {
    const int32_t* mine = &plan->programs[plan->program_at[w]];
    int32_t len = plan->program_len[w], n_seg = 0;
    plan->seg_at[w] = used;
    for (int32_t i = 0; i < len; i++) {
      if (i == 0 || plan->steps[mine[i]].n_wait > 0) plan->segments[used + n_seg++] = i;
    }
    plan->segments[used + n_seg] = len;
    plan->n_segments[w] = n_seg;
    used += n_seg + 1;
  }
  plan->spin_s = malloc(sizeof(double) * (plan->n_workers + 1));
  for (int32_t w = 0; w < plan->n_workers; w++) plan->spin_s[w] = 1e-6 * t[at++];
  if (at != length) {
    free(plan);
    return raise_("new: the table's length does not match its contents");
  }
  plan->functions = calloc(plan->n_functions + 1, sizeof(TVMFFIObjectHandle));
  plan->get_item = global("ffi.ArrayGetItem");
  plan->make_array = global("ffi.Array");
  plan->running = malloc(sizeof(int32_t) * (plan->n_workers + 1));
  plan->running_since = calloc(plan->n_workers + 1, sizeof(double));
  plan->state = calloc(plan->n_workers + 1, sizeof(int32_t));
  plan->started = calloc(plan->n_workers + 1, sizeof(int32_t));
  for (int32_t w = 0; w < plan->n_workers; w++) atomic_init(&plan->running[w], -1);
  return set_int(result, (int64_t)(intptr_t)plan);
}

/* function(plan, index, function): the unit function of that index (a reference kept). */
static int f_function(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  Plan* plan = plan_of(&args[0]);
  const char* usage = "function(plan, index, function)";
  if (keep_function(plan->functions, plan->n_functions, args, n, usage) != 0) return -1;
  return set_int(result, 0);
}

/* The buffers of a request's runs, their values released. */
static void free_requests(Plan* plan) {
  for (int64_t i = 0; i < (int64_t)plan->cap_runs * plan->n_slots; i++) {
    release_any(&plan->values[i]);
  }
  free(plan->values);
  free((void*)plan->latches);
  free((void*)plan->pending);
  free(plan->began);
  free(plan->ended);
  free(plan->finished);
}

/* begin(plan, n_runs): a request of n_runs microbatches (latches unset, values cleared). */
static int f_begin(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  int32_t runs = (int32_t)args[1].v_int64;
  if (runs > plan->cap_runs) {
    free_requests(plan);
    plan->cap_runs = runs;
    plan->values = calloc((size_t)runs * plan->n_slots + 1, sizeof(TVMFFIAny));
    plan->latches = calloc((size_t)runs * plan->n_latches + 1, sizeof(uint32_t));
    plan->pending = calloc(runs, sizeof(int32_t));
    plan->began = calloc((size_t)runs * plan->n_steps + 1, sizeof(double));
    plan->ended = calloc((size_t)runs * plan->n_steps + 1, sizeof(double));
    plan->finished = calloc(runs, sizeof(double));
  }
  plan->n_runs = runs;
  for (int64_t h = 0; h < (int64_t)runs * plan->n_latches; h++) plan->latches[h] = UNSET;
  for (int32_t k = 0; k < runs; k++) plan->pending[k] = plan->n_workers;
  for (int32_t w = 0; w < plan->n_workers; w++) atomic_store(&plan->started[w], 0);
  atomic_store(&plan->status, OK);
  plan->failed_step = plan->failed_latch = -1;
  plan->message[0] = 0;
  atomic_store(&plan->workers_left, (uint32_t)plan->n_workers);
  return set_int(result, 0);
}

/* put(plan, run, slot, value) */
static int f_put(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  Plan* plan = plan_of(&args[0]);
  int64_t r = args[1].v_int64, s = args[2].v_int64;
  if (n != 4 || r < 0 || r >= plan->n_runs || s < 0 || s >= plan->n_slots) {
    return raise_("put(plan, run, slot, value)");
  }
  TVMFFIAny* slot = &plan->values[r * plan->n_slots + s];
  release_any(slot);
  return TVMFFIAnyViewToOwnedAny(&args[3], slot) != 0 ? -1 : set_int(result, 0);
}

/* serve(plan, worker): its program for every run of the request, the caller told; then it
 * spins up to spin_s for the next request (start claims it) before it returns. */
static int f_serve(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  int32_t w = (int32_t)args[1].v_int64;
  atomic_fetch_add(&plan->inside, 1);
  for (;;) {
    atomic_store(&plan->state[w], BUSY);
    atomic_store(&plan->started[w], 1);
    run_program(plan, w);
    atomic_store(&plan->state[w], SERVING);
    if (atomic_fetch_sub(&plan->workers_left, 1) == 1) futex_wake_all(&plan->workers_left);
    double until = now_s() + plan->spin_s[w];
    for (uint32_t i = 1; atomic_load_explicit(&plan->state[w], memory_order_acquire) == SERVING;
         i++) {
      if (spun_out(i, until)) break;
    }
    int32_t seen = SERVING;
    if (atomic_compare_exchange_strong(&plan->state[w], &seen, IDLE) || seen == STOPPED) break;
  }
  atomic_fetch_sub(&plan->inside, 1);
  return set_int(result, 0);
}

/* start(plan) -> the workers to give a serve job (a bit each): those not spinning for it. */
static int f_start(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  int64_t jobs = 0;
  for (int32_t w = 0; w < plan->n_workers; w++) {
    int32_t serving = SERVING;
    if (!atomic_compare_exchange_strong(&plan->state[w], &serving, CLAIMED)) jobs |= 1LL << w;
  }
  return set_int(result, jobs);
}

/* wait(plan, seconds, spin_s) -> 1 when every worker is through the request, else 0: spins
 * up to spin_s, then sleeps. */
static int f_wait(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  double start = now_s(), deadline = start + float_of(&args[1]), spin = float_of(&args[2]);
  /* each turn a yield: on a worker's core the caller hands it the core at once */
  while (spin > 0 && atomic_load_explicit(&plan->workers_left, memory_order_acquire) != 0) {
    sched_yield();
    if (now_s() > start + spin) break;
  }
  uint32_t left;
  while ((left = atomic_load(&plan->workers_left)) != 0) {
    double rest = deadline - now_s();
    if (rest <= 0) break;
    futex_sleep(&plan->workers_left, left, rest);
  }
  return set_int(result, atomic_load(&plan->workers_left) == 0);
}

/* take(plan, run) -> every slot of the run as an Array (the slots emptied). */
static int f_take(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  int64_t r = args[1].v_int64;
  TVMFFIAny* values = &plan->values[r * plan->n_slots];
  int rc = TVMFFIFunctionCall(plan->make_array, values, plan->n_slots, result);
  for (int32_t s = 0; s < plan->n_slots; s++) release_any(&values[s]);
  return rc;
}

/* times(plan, address of doubles): per run and unit step began and ended, then per run when
 * it finished (monotonic seconds, the clock of Python's time.perf_counter). */
static int f_times(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  double* out = (double*)(intptr_t)args[1].v_int64;
  int64_t cells = (int64_t)plan->n_runs * plan->n_steps;
  memcpy(out, plan->began, sizeof(double) * cells);
  memcpy(out + cells, plan->ended, sizeof(double) * cells);
  memcpy(out + 2 * cells, plan->finished, sizeof(double) * plan->n_runs);
  return set_int(result, 0);
}

/* abort(plan, message): the request fails (the caller gave up on it); every latch set */
static int f_abort(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  fail(plan_of(&args[0]), FAILED, -1, -1, "abandoned by the caller");
  return set_int(result, 0);
}

/* status(plan) -> OK, FAILED or TIMED_OUT */
static int f_status(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  return set_int(result, atomic_load(&plan_of(&args[0])->status));
}

/* failure(plan) -> [failed step, failed latch, message] */
static int f_failure(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  TVMFFIAny parts[3];
  set_int(&parts[0], plan->failed_step);
  set_int(&parts[1], plan->failed_latch);
  TVMFFIByteArray text = {plan->message, strlen(plan->message)};
  if (TVMFFIStringFromByteArray(&text, &parts[2]) != 0) return -1;
  int rc = TVMFFIFunctionCall(plan->make_array, parts, 3, result);
  release_any(&parts[2]);
  return rc;
}

/* running(plan, worker) -> [unit step or -1, since (monotonic seconds), whether it began
 * this request] */
static int f_running(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  int64_t w = args[1].v_int64;
  TVMFFIAny parts[3];
  set_int(&parts[0], atomic_load(&plan->running[w]));
  parts[1].type_index = kTVMFFIFloat;
  parts[1].zero_padding = 0;
  parts[1].v_float64 = plan->running_since[w];
  set_int(&parts[2], atomic_load(&plan->started[w]));
  return TVMFFIFunctionCall(plan->make_array, parts, 3, result);
}

/* free(plan) -> 1 when freed; 0 when a worker thread is still inside it (left as it is). */
static int f_free(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Plan* plan = plan_of(&args[0]);
  for (int32_t w = 0; w < plan->n_workers; w++) {
    int32_t serving = SERVING;
    atomic_compare_exchange_strong(&plan->state[w], &serving, STOPPED);
  }
  double until = now_s() + 0.05; /* a spinning worker leaves within microseconds */
  while (atomic_load(&plan->inside) != 0 && now_s() < until) usleep(100);
  if (atomic_load(&plan->inside) != 0) return set_int(result, 0);
  free_requests(plan);
  for (int32_t k = 0; k < plan->n_functions; k++) {
    if (plan->functions[k] != NULL) TVMFFIObjectDecRef(plan->functions[k]);
  }
  if (plan->get_item != NULL) TVMFFIObjectDecRef(plan->get_item);
  if (plan->make_array != NULL) TVMFFIObjectDecRef(plan->make_array);
  free(plan->steps);
  free(plan->ints);
  free(plan->program_at);
  free(plan->program_len);
  free(plan->programs);
  free(plan->segments);
  free(plan->seg_at);
  free(plan->n_segments);
  free(plan->spin_s);
  free(plan->functions);
  free((void*)plan->running);
  free((void*)plan->started);
  free(plan->running_since);
  free((void*)plan->state);
  free(plan);
  return set_int(result, 1);
}

/* Registers the functions above as tvm_hetero.native.*; 0 on success. */
int tvm_hetero_native_register(void) {
  return define("tvm_hetero.native.new", f_new) | define("tvm_hetero.native.function", f_function) |
         define("tvm_hetero.native.begin", f_begin) | define("tvm_hetero.native.put", f_put) |
         define("tvm_hetero.native.serve", f_serve) |
         define("tvm_hetero.native.start", f_start) |
         define("tvm_hetero.native.wait", f_wait) | define("tvm_hetero.native.take", f_take) |
         define("tvm_hetero.native.times", f_times) |
         define("tvm_hetero.native.status", f_status) |
         define("tvm_hetero.native.failure", f_failure) |
         define("tvm_hetero.native.abort", f_abort) |
         define("tvm_hetero.native.running", f_running) | define("tvm_hetero.native.free", f_free);
}
