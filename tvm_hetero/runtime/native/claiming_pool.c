// A parallel launcher for TVM's compiled CPU kernels whose caller runs every task that no other
// thread has claimed (see claiming_pool.py).
//
// TVM's own pool (TVMBackendParallelLaunch, thread_pool.cc) gives task i to thread i and waits
// for each of them: a kernel ends when its slowest thread does, so a thread that another process
// holds off its core for a scheduler slice (milliseconds) holds up the kernel (microseconds) with
// it. Here the tasks of a launch are claimed one at a time from a counter by whichever thread of
// the pool comes first (the caller included), and the caller waits only for tasks already
// claimed: a worker that has not woken by the time the caller has run the rest is not waited
// for. On a quiet machine each thread claims one task of a launch, as TVM's pool gives it.
//
// A pool belongs to the thread that configures it (tvmh_pool_use), as TVM's pools belong to the
// thread that launches; a thread without one launches on TVM's pool. Compiled modules reach the
// launcher through the address TVM FFI writes into each module's __TVMBackendParallelLaunch when
// it loads the module: tvmh_pool_install registers tvmh_parallel_launch for that symbol.
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

typedef struct {
  void* sync_handle;
  int32_t num_task;
} Env;
typedef int (*Lambda)(int task_id, Env* penv, void* cdata);
typedef int (*Launch)(Lambda flambda, void* cdata, int num_task);

typedef struct Pool {
  int threads;            // the caller and threads - 1 workers
  int spin;               // turns (a yield each) a worker looks for the next launch, then sleeps
  _Atomic uint64_t state; // the launch's number (high half) and its next unclaimed task
  _Atomic uint32_t launch_word;  // the launch's number: what sleeping workers wait on
  _Atomic int sleepers;
  _Atomic int done;
  _Atomic int failed;
  int caller_failed;             // a task the caller ran failed: its own thread has the error
  _Atomic(TVMFFIObjectHandle) error;  // the first error a worker's task raised
  _Atomic int stop;
  _Atomic(Lambda) job;
  _Atomic(void*) data;
  _Atomic int tasks;
  Env env;
  uint32_t launches;
  int in_launch;
  _Atomic long worker_tasks;  // tasks run by workers (not the caller), for tests
  pthread_t* workers;
  int* cores;  // the workers' cores (cores[i] for worker i), or NULL: not pinned
  int forks;   // the process's forks when it was made: a forked child has no workers
  int owner;   // the thread it belongs to (its id): the workers are named tvmh-<owner>
} Pool;

static Launch tvm_launch;  // TVM's own TVMBackendParallelLaunch
static pthread_key_t pool_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int forks;  // children forked from here: in one, a pool of its parent has no workers

static void forked(void) { forks++; }

static inline void pause_once(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// Claim and run the tasks of launch ``number`` until none is left; a launch that has moved on
// stops the claims (its job and data are read before the claim, which checks they still hold).
static void run_tasks(Pool* p, uint32_t number, int worker) {
  for (;;) {
    uint64_t s = atomic_load(&p->state);
    if ((uint32_t)(s >> 32) != number) return;
    Lambda job = atomic_load(&p->job);
    void* data = atomic_load(&p->data);
    int tasks = atomic_load(&p->tasks);
    if ((int)(uint32_t)s >= tasks) return;
    if (!atomic_compare_exchange_weak(&p->state, &s, s + 1)) continue;
    if (job((int)(uint32_t)s, &p->env, data) != 0) {
      atomic_store(&p->failed, 1);
      if (worker) {  // hand the error over: the run reads it from the caller's thread
        TVMFFIObjectHandle raised = NULL, none = NULL;
        TVMFFIErrorMoveFromRaised(&raised);
        if (raised != NULL && !atomic_compare_exchange_strong(&p->error, &none, raised))
          TVMFFIObjectDecRef(raised);
      } else {
        p->caller_failed = 1;
      }
    }
    if (worker) atomic_fetch_add(&p->worker_tasks, 1);
    atomic_fetch_add(&p->done, 1);
  }
}

typedef struct {
  Pool* pool;
  int index;
} WorkerArg;

static void* worker_main(void* arg) {
  WorkerArg a = *(WorkerArg*)arg;
  free(arg);
  Pool* p = a.pool;
  if (p->cores != NULL) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(p->cores[a.index], &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  uint32_t seen = atomic_load(&p->launch_word);
  while (!atomic_load(&p->stop)) {
    uint32_t number;
    int spins = 0;
    while ((number = atomic_load(&p->launch_word)) == seen && !atomic_load(&p->stop)) {
      if (++spins <= p->spin) {  // as TVM's pool threads look: a yield a turn
        sched_yield();
        continue;
      }
      atomic_fetch_add(&p->sleepers, 1);
      syscall(SYS_futex, &p->launch_word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
      atomic_fetch_sub(&p->sleepers, 1);
      spins = 0;
    }
    seen = number;
    run_tasks(p, number, 1);
  }
  return NULL;
}

static void wake_all(Pool* p) {
  if (atomic_load(&p->sleepers) > 0)
    syscall(SYS_futex, &p->launch_word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void free_pool(void* arg) {
  Pool* p = arg;
  if (p == NULL) return;
  atomic_store(&p->stop, 1);
  atomic_fetch_add(&p->launch_word, 1);
  syscall(SYS_futex, &p->launch_word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
  if (p->forks == forks)
    for (int i = 1; i < p->threads; i++) pthread_join(p->workers[i], NULL);
  free(p->workers);
  free(p->cores);
  free(p);
}

static void make_key(void) {
  pthread_key_create(&pool_key, free_pool);
  pthread_atfork(NULL, NULL, forked);
}

// Give the calling thread a pool of ``threads`` threads (itself and threads - 1 workers, each
// worker on cores[i] when ``cores`` has ``threads`` entries, else where the caller may run),
// whose workers look ``spin`` times (a yield each) for the next launch before they sleep;
// ``threads`` 0 removes its pool (its launches go to TVM's pool). 0 when done, -1 when a
// worker could not be started or the launcher is not installed.
int tvmh_pool_use(int threads, const int* cores, int ncores, int spin) {
  if (tvm_launch == NULL) return -1;  // not installed
  pthread_once(&key_once, make_key);
  Pool* old = pthread_getspecific(pool_key);
  if (old != NULL && old->threads == threads && old->spin == spin &&
      (old->cores == NULL) == (ncores == 0) &&
      (ncores == 0 || memcmp(old->cores, cores, sizeof(int) * ncores) == 0))
    return 0;
  pthread_setspecific(pool_key, NULL);
  free_pool(old);
  if (threads <= 0) return 0;
  Pool* p = calloc(1, sizeof(Pool));
  if (p == NULL) return -1;
  p->threads = threads;
  p->spin = spin;
  p->forks = forks;
  p->owner = (int)syscall(SYS_gettid);
  p->workers = calloc((size_t)threads, sizeof(pthread_t));
  if (ncores == threads) {
    p->cores = malloc(sizeof(int) * (size_t)ncores);
    if (p->cores != NULL) memcpy(p->cores, cores, sizeof(int) * (size_t)ncores);
  }
  if (p->workers == NULL || (ncores == threads && p->cores == NULL)) {
    p->threads = 1;
    free_pool(p);
    return -1;
  }
  for (int i = 1; i < threads; i++) {
    WorkerArg* arg = malloc(sizeof(WorkerArg));
    if (arg == NULL) {
      p->threads = i;
      free_pool(p);
      return -1;
    }
    arg->pool = p;
    arg->index = i;
    if (pthread_create(&p->workers[i], NULL, worker_main, arg) != 0) {
      free(arg);
      p->threads = i;
      free_pool(p);
      return -1;
    }
    char name[16];  // named before use returns: ps, top and the tests see whose it is
    snprintf(name, sizeof(name), "tvmh-%d", p->owner);
    pthread_setname_np(p->workers[i], name);
  }
  pthread_setspecific(pool_key, p);
  return 0;
}

// TVMBackendParallelLaunch's contract: run flambda(task, env, cdata) for task in [0, num_task)
// (num_task 0: one task a thread), each task once, and return when all have; -1 if one failed.
int tvmh_parallel_launch(Lambda flambda, void* cdata, int num_task) {
  pthread_once(&key_once, make_key);
  Pool* p = pthread_getspecific(pool_key);
  if (p == NULL) return tvm_launch(flambda, cdata, num_task);
  if (num_task <= 0) num_task = p->threads;
  if (p->in_launch || p->threads == 1 || p->forks != forks) {  // no workers: run them here
    Env env = {NULL, num_task};
    int failed = 0;
    for (int i = 0; i < num_task; i++) failed |= flambda(i, &env, cdata) != 0;
    return failed ? -1 : 0;
  }
  p->in_launch = 1;
  atomic_store(&p->job, flambda);
  atomic_store(&p->data, cdata);
  atomic_store(&p->tasks, num_task);
  p->env.sync_handle = NULL;
  p->env.num_task = num_task;
  atomic_store(&p->done, 0);
  atomic_store(&p->failed, 0);
  p->caller_failed = 0;
  uint32_t number = ++p->launches;
  atomic_store(&p->state, (uint64_t)number << 32);
  atomic_store(&p->launch_word, number);
  wake_all(p);
  run_tasks(p, number, 0);
  for (long spins = 0; atomic_load(&p->done) < num_task; spins++) {
    if (spins < 20000) pause_once();
    else sched_yield();  // a claimed task's thread is off its core: let it (or others) run
  }
  p->in_launch = 0;
  TVMFFIObjectHandle error = atomic_exchange(&p->error, NULL);
  if (!atomic_load(&p->failed)) return 0;
  if (!p->caller_failed) {
    if (error != NULL) TVMFFIErrorSetRaised(error);  // takes a reference of its own
    else TVMFFIErrorSetRaisedFromCStr("RuntimeError", "a parallel task failed");
  }
  if (error != NULL) TVMFFIObjectDecRef(error);
  return -1;
}

long tvmh_pool_worker_tasks(void) {
  pthread_once(&key_once, make_key);
  Pool* p = pthread_getspecific(pool_key);
  return p == NULL ? -1 : atomic_load(&p->worker_tasks);
}

// Route TVM's parallel launches through tvmh_parallel_launch for modules loaded (or compiled in
// memory) from now on: TVM FFI writes the last address registered for a context symbol into each
// module that has it, and libtvm_runtime registered TVM's launcher (``tvm``) when it was loaded.
// 1 when installed (or already), 0 when the registration failed.
int tvmh_pool_install(void* tvm) {
  static int installed;
  if (installed) return 1;
  if (tvm == NULL) return 0;
  tvm_launch = (Launch)tvm;  // before any thread has a pool: nothing launches here yet
  if (TVMFFIEnvModRegisterContextSymbol("__TVMBackendParallelLaunch",
                                        (void*)&tvmh_parallel_launch) != 0)
    return 0;
  installed = 1;
  return 1;
}
