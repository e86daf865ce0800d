/* A remote worker's program, run natively (tvm_hetero.runtime.native_remote).
 *
 * One worker process, one program thread: its steps (call a unit, take an item of a tuple) for
 * every microbatch of a run, in order. A value made by an earlier step is a slot; a value a
 * peer's program pushes arrives on a program link (the wire format of program_links.py: a
 * packed header, the name, the shape, the type's name, the bytes), read here into a tensor kept
 * for that value and microbatch; anything else (the client's inputs, pushes to a data port, the
 * values the client reads) goes through a Python callback. What a step makes that a peer's
 * program reads leaves on the link to that peer from this thread; while a send waits for room,
 * the links coming in are read on (two programs sending to each other never both wait). Only
 * the C API of TVM FFI is used, so the source builds against the runtime-only wheel.
 */
#define _GNU_SOURCE
#include <dlpack/dlpack.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <tvm/ffi/c_api.h>

#include "ffi_helpers.h"
#include <unistd.h>

enum { UNIT = 0, ITEM = 1 };
enum { LINK = 0, HELD = 1 };
enum { OK = 0, FAILED = 1, LATE = 2 };
enum { HEAD = 12, READ_BYTES = 64 * 1024, MAX_DIMS = 16, MAX_LINKS = 256 };
/* callbacks into the session (Python): held(ext, mb) -> value; hold(op, mb, value);
 * deliver(op, mb, value); allocate(ext, mb, kind, *shape) -> tensor; relink() */
enum { CB_HELD = 0, CB_HOLD = 1, CB_DELIVER = 2, CB_ALLOCATE = 3, CB_RELINK = 4, N_CB = 5 };

typedef struct {
  int32_t kind, function, n_in, in_at, n_push, push_at, hold, deliver, index;
} Op;

typedef struct {
  int32_t kind, name;
} Ext;

typedef struct { /* where value (ext, mb) is received, kept run after run */
  TVMFFIObjectHandle tensor;
  int64_t run; /* the run whose value it holds whole, -1 none */
  int32_t ndim;
  int64_t shape[MAX_DIMS];
  char kind[32];
} Slot;

typedef struct {
  int fd, dead, have;
  char buf[READ_BYTES];
  int64_t left; /* payload bytes of a value begun still to come */
  char* dst;    /* where they go, NULL to drop them */
  Slot* slot;   /* whose value it is, NULL when dropped */
  int64_t run;  /* the run it belongs to */
} Inlink;

typedef struct {
  int32_t n_ops, n_ext, n_functions, n_outlinks, n_names;
  Op* ops;
  int32_t* ints;
  Ext* ext;
  char** names;
  int32_t* hash; /* open addressing over the link values' names: ext index + 1, 0 empty */
  int32_t hash_size;
  TVMFFIObjectHandle* functions;
  TVMFFIObjectHandle callbacks[N_CB], get_item, array_size, make_array;
  int* outlinks; /* fds, -1 dead */
  Inlink* links[MAX_LINKS];
  int32_t n_links;
  int wake_fd;
  double spin_s;
  /* one run */
  int64_t run;
  int32_t cap_mb, n_mb;
  TVMFFIAny* values; /* cap_mb * n_ops, owned */
  TVMFFIAny* held;   /* cap_mb * n_ext, owned */
  Slot* slots;       /* cap_mb * n_ext */
  double* events;    /* cap_mb * n_ops * 6 */
  int32_t n_events;
  int32_t status, failed_ext, failed_mb;
  char kind[64], message[2048]; /* a failure's error kind and text */
  char scratch[READ_BYTES]; /* payloads dropped */
  char outbuf[READ_BYTES];  /* a push's header and small bytes */
} Ctx;

static void object_any(TVMFFIAny* any, TVMFFIObjectHandle obj) {
  any->type_index = ((TVMFFIObject*)obj)->type_index;
  any->zero_padding = 0;
  any->v_obj = obj;
}

/* The first failure of a run is kept: raised as `kind` with `message` when the run returns. */
static void fail(Ctx* ctx, const char* kind, const char* message) {
  if (ctx->status != OK) return;
  ctx->status = FAILED;
  snprintf(ctx->kind, sizeof ctx->kind, "%s", kind);
  snprintf(ctx->message, sizeof ctx->message, "%s", message);
}

/* The error a call raised, as the run's failure (`what` failed, where the error is gone). */
static void fail_raised(Ctx* ctx, const char* what) {
  TVMFFIObjectHandle error = NULL;
  TVMFFIErrorMoveFromRaised(&error);
  if (error == NULL) {
    fail(ctx, "RuntimeError", what);
    return;
  }
  TVMFFIErrorCell* cell = (TVMFFIErrorCell*)((char*)error + sizeof(TVMFFIObject));
  char kind[64], message[2048];
  snprintf(kind, sizeof kind, "%.*s", (int)cell->kind.size, cell->kind.data);
  snprintf(message, sizeof message, "%.*s", (int)cell->message.size, cell->message.data);
  TVMFFIObjectDecRef(error);
  fail(ctx, kind, message);
}

static DLTensor* tensor_of(const TVMFFIAny* any) {
  if (any->type_index == kTVMFFITensor) {
    return (DLTensor*)((char*)any->v_obj + sizeof(TVMFFIObject));
  }
  return NULL;
}

/* numpy's name of a DLPack type ("float32"), 0 when it has none */
static int kind_name(DLDataType t, char* out, size_t size) {
  if (t.lanes != 1) return 0;
  if (t.code == kDLBool) return snprintf(out, size, "bool") > 0;
  const char* base = t.code == kDLFloat ? "float" : t.code == kDLInt ? "int"
                   : t.code == kDLUInt ? "uint" : NULL;  /* clang-format off */
  return base != NULL && snprintf(out, size, "%s%d", base, (int)t.bits) > 0;
}

static int64_t item_bytes(const char* kind) {
  if (strcmp(kind, "bool") == 0) return 1;
  size_t n = strlen(kind), d = n;
  while (d > 0 && kind[d - 1] >= '0' && kind[d - 1] <= '9') d--;
  if (d == n || d == 0) return -1;
  long bits = strtol(kind + d, NULL, 10);
  return bits > 0 && bits % 8 == 0 ? bits / 8 : -1;
}

static uint32_t hash_name(const char* s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
  return h;
}

/* the link value named s[0:n], -1 for none */
static int32_t find_ext(Ctx* ctx, const char* s, size_t n) {
  for (uint32_t i = hash_name(s, n) % ctx->hash_size;; i = (i + 1) % ctx->hash_size) {
    int32_t k = ctx->hash[i] - 1;
    if (k < 0) return -1;
    const char* name = ctx->names[ctx->ext[k].name];
    if (strlen(name) == n && memcmp(name, s, n) == 0) return k;
  }
}

static Slot* slot_of(Ctx* ctx, int32_t k, int32_t mb) { return &ctx->slots[(int64_t)mb * ctx->n_ext + k]; }

/* The tensor a value of (k, mb) with this shape and type is received into: the one kept where
 * they match, else a new one from the session; NULL (the request failed) when none. */
static char* receive_into(Ctx* ctx, Slot* slot, int32_t k, int32_t mb, int32_t ndim,
                          const int64_t* shape, const char* kind) {
  int same = slot->tensor != NULL && slot->ndim == ndim && strcmp(slot->kind, kind) == 0;
  for (int32_t d = 0; same && d < ndim; d++) same = slot->shape[d] == shape[d];
  if (!same) {
    TVMFFIAny args[3 + MAX_DIMS], made;
    int_any(&args[0], k);
    int_any(&args[1], mb);
    TVMFFIByteArray text = {kind, strlen(kind)};
    if (TVMFFIStringFromByteArray(&text, &args[2]) != 0) return NULL;
    for (int32_t d = 0; d < ndim; d++) int_any(&args[3 + d], shape[d]);
    none(&made);
    int rc = TVMFFIFunctionCall(ctx->callbacks[CB_ALLOCATE], args, 3 + ndim, &made);
    release_any(&args[2]);
    if (rc != 0) {
      fail_raised(ctx, "allocate");
      return NULL;
    }
    if (made.type_index != kTVMFFITensor) {
      release_any(&made);
      fail(ctx, "TypeError", "allocate: not a tensor");
      return NULL;
    }
    if (slot->tensor != NULL) TVMFFIObjectDecRef(slot->tensor);
    slot->tensor = made.v_obj;
    slot->ndim = ndim;
    memcpy(slot->shape, shape, sizeof(int64_t) * ndim);
    snprintf(slot->kind, sizeof slot->kind, "%s", kind);
  }
  DLTensor* t = (DLTensor*)((char*)slot->tensor + sizeof(TVMFFIObject));
  return (char*)t->data + t->byte_offset;
}

/* The header at the start of link l's buffer, whole: its value's payload is routed (into the
 * value's tensor, or dropped: an older run's, a name this program does not read) and what of
 * it is in the buffer taken. 1 when a header was taken, 0 when more bytes are needed, -1 when
 * the link is out of step (dropped). */
static int take_header(Ctx* ctx, Inlink* l) {
  if (l->have < HEAD) return 0;
  const unsigned char* b = (const unsigned char*)l->buf;
  uint64_t nbytes;
  uint16_t n_name;
  memcpy(&nbytes, b, 8);
  memcpy(&n_name, b + 8, 2);
  int32_t ndim = b[10], n_kind = b[11];
  int64_t size = HEAD + n_name + 8 * (int64_t)ndim + n_kind;
  if (size > READ_BYTES || ndim > MAX_DIMS || n_kind >= 32) return -1;
  if (l->have < size) return 0;
  const char* name = l->buf + HEAD;
  int64_t shape[MAX_DIMS], count = 1;
  memcpy(shape, l->buf + HEAD + n_name, 8 * (size_t)ndim);
  for (int32_t d = 0; d < ndim; d++) {
    if (shape[d] < 0) return -1;
    count *= shape[d];
  }
  char kind[32];
  memcpy(kind, l->buf + HEAD + n_name + 8 * ndim, n_kind);
  kind[n_kind] = 0;
  int64_t item = item_bytes(kind);
  if (item < 0 || (uint64_t)(count * item) != nbytes) return -1;
  /* RUN/MB:NAME; a name too long to be one of this program's is dropped */
  char label[1024], *end;
  int32_t k = -1;
  long long run = -1;
  long mb = -1;
  if (n_name < sizeof label) {
    memcpy(label, name, n_name);
    label[n_name] = 0;
    char* colon = strchr(label, ':');
    run = strtoll(label, &end, 10);
    mb = (*end == '/' && colon != NULL) ? strtol(end + 1, NULL, 10) : -1;
    k = colon == NULL ? -1 : find_ext(ctx, colon + 1, strlen(colon + 1));
  }
  l->slot = NULL;
  l->dst = NULL;
  if (k >= 0 && run == ctx->run && mb >= 0 && mb < ctx->n_mb && ctx->ext[k].kind == LINK) {
    Slot* slot = slot_of(ctx, k, (int32_t)mb);
    l->dst = receive_into(ctx, slot, k, (int32_t)mb, ndim, shape, kind);
    if (l->dst == NULL) return -1;
    l->slot = slot;
    l->run = run;
  }
  int64_t here = l->have - size < (int64_t)nbytes ? l->have - size : (int64_t)nbytes;
  if (l->dst != NULL && here > 0) {
    memcpy(l->dst, l->buf + size, (size_t)here);
    l->dst += here;
  }
  l->left = (int64_t)nbytes - here;
  memmove(l->buf, l->buf + size + here, (size_t)(l->have - size - here));
  l->have -= (int)(size + here);
  if (l->left == 0 && l->slot != NULL) l->slot->run = l->run;
  return 1;
}

/* Read what link l holds now, without waiting; values that end are marked arrived. */
static void pump(Ctx* ctx, Inlink* l) {
  while (!l->dead && ctx->status == OK) {
    ssize_t n;
    if (l->left > 0) {
      char* to = l->dst != NULL ? l->dst : ctx->scratch;
      size_t most = l->dst != NULL || l->left < READ_BYTES ? (size_t)l->left : READ_BYTES;
      n = recv(l->fd, to, most, MSG_DONTWAIT);
      if (n > 0) {
        if (l->dst != NULL) l->dst += n;
        l->left -= n;
        if (l->left == 0 && l->slot != NULL) l->slot->run = l->run;
        continue;
      }
    } else {
      int taken = take_header(ctx, l);
      if (taken > 0) continue;
      if (taken < 0 || l->have == READ_BYTES) {
        l->dead = 1;
        return;
      }
      n = recv(l->fd, l->buf + l->have, READ_BYTES - l->have, MSG_DONTWAIT);
      if (n > 0) {
        l->have += (int)n;
        continue;
      }
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) l->dead = 1;
    return;
  }
}

static void pump_all(Ctx* ctx) {
  for (int32_t i = 0; i < ctx->n_links; i++) pump(ctx, ctx->links[i]);
}

/* Sleep until a link has bytes, the wake-up is written or `seconds` pass; `out` (>= 0): or
 * until that fd takes more. A wake-up asks the session for its links again. */
static void sleep_on_links(Ctx* ctx, double seconds, int out) {
  struct pollfd fds[MAX_LINKS + 2];
  int n = 0;
  for (int32_t i = 0; i < ctx->n_links; i++) {
    if (!ctx->links[i]->dead) fds[n++] = (struct pollfd){ctx->links[i]->fd, POLLIN, 0};
  }
  int wake = n;
  fds[n++] = (struct pollfd){ctx->wake_fd, POLLIN, 0};
  if (out >= 0) fds[n++] = (struct pollfd){out, POLLOUT, 0};
  int ms = (int)(seconds * 1e3 + 0.999);
  if (poll(fds, (nfds_t)n, ms < 1 ? 1 : ms) > 0 && (fds[wake].revents & POLLIN)) {
    char drain[256];
    while (read(ctx->wake_fd, drain, sizeof drain) > 0) {
    }
    TVMFFIAny result;
    none(&result);
    if (TVMFFIFunctionCall(ctx->callbacks[CB_RELINK], NULL, 0, &result) != 0) {
      fail_raised(ctx, "relink");
    }
    release_any(&result);
  }
}

/* Wait for value (k, mb) from a link: read the links, spinning spin_s, then sleeping on them;
 * 0 when the deadline passed first. */
static int await_link(Ctx* ctx, int32_t k, int32_t mb, double deadline) {
  Slot* slot = slot_of(ctx, k, mb);
  double spin_until = now_s() + ctx->spin_s;
  for (uint32_t turn = 1;; turn++) {
    if (slot->run == ctx->run) return 1;
    pump_all(ctx);
    if (slot->run == ctx->run) return 1;
    if (ctx->status != OK) return 0;
    double now = now_s();
    if (now >= deadline) return 0;
    if (now < spin_until) {
      __builtin_ia32_pause();
      if ((turn & 63) == 0) sched_yield();
      continue;
    }
    sleep_on_links(ctx, deadline - now < 1.0 ? deadline - now : 1.0, -1);
  }
}

/* All of [p, p + n) on fd, reading the links while it has no room; 0 when the peer is gone or
 * took nothing before the deadline (the link is then dropped: its reader blames this worker). */
static int send_all(Ctx* ctx, int fd, const char* p, size_t n, double deadline) {
  while (n > 0) {
    ssize_t sent = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      p += sent;
      n -= (size_t)sent;
      continue;
    }
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 0;
    if (now_s() > deadline) return 0;
    pump_all(ctx);
    sleep_on_links(ctx, 0.05, fd);
  }
  return 1;
}

/* A step's tensor to peer o as `name` (RUN/MB:NAME): header and small bytes in one send. */
static void push(Ctx* ctx, int32_t o, const char* name, const TVMFFIAny* value, double timeout) {
  int fd = ctx->outlinks[o];
  if (fd < 0) return;
  DLTensor* t = tensor_of(value);
  char kind[32];
  if (t == NULL || t->ndim > MAX_DIMS || t->device.device_type != kDLCPU ||
      !kind_name(t->dtype, kind, sizeof kind)) {
    fail(ctx, "TypeError", "a program link carries CPU tensors only");
    return;
  }
  int64_t count = 1;
  for (int32_t d = 0; d < t->ndim; d++) count *= t->shape[d];
  uint64_t nbytes = (uint64_t)count * ((t->dtype.bits + 7) / 8);
  uint16_t n_name = (uint16_t)strlen(name);
  uint8_t ndim = (uint8_t)t->ndim, n_kind = (uint8_t)strlen(kind);
  size_t head = HEAD + n_name + 8 * (size_t)ndim + n_kind;
  char* msg = ctx->outbuf;
  if (head > READ_BYTES) {
    fail(ctx, "ValueError", "a value's name too long for a program link");
    return;
  }
  memcpy(msg, &nbytes, 8);
  memcpy(msg + 8, &n_name, 2);
  msg[10] = (char)ndim;
  msg[11] = (char)n_kind;
  memcpy(msg + HEAD, name, n_name);
  memcpy(msg + HEAD + n_name, t->shape, 8 * (size_t)ndim);
  memcpy(msg + HEAD + n_name + 8 * ndim, kind, n_kind);
  const char* data = (const char*)t->data + t->byte_offset;
  double deadline = now_s() + timeout;
  int ok;
  if (head + nbytes <= READ_BYTES) {
    memcpy(msg + head, data, (size_t)nbytes);
    ok = send_all(ctx, fd, msg, head + (size_t)nbytes, deadline);
  } else {
    ok = send_all(ctx, fd, msg, head, deadline) &&
         send_all(ctx, fd, data, (size_t)nbytes, deadline);
  }
  if (!ok) ctx->outlinks[o] = -1;
}

/* Input `ref` of a step in microbatch mb (a view, owned elsewhere): an earlier step's value
 * (ref >= 0), else external value -1 - ref, from a link or from the session; 0 on failure. */
static int input(Ctx* ctx, int32_t ref, int32_t mb, double wait_s, TVMFFIAny* arg) {
  if (ref >= 0) {
    *arg = ctx->values[(int64_t)mb * ctx->n_ops + ref];
    return 1;
  }
  int32_t k = -1 - ref;
  if (ctx->ext[k].kind == LINK) {
    if (!await_link(ctx, k, mb, now_s() + wait_s)) {
      if (ctx->status == OK) {
        ctx->status = LATE;
        ctx->failed_ext = k;
        ctx->failed_mb = mb;
      }
      return 0;
    }
    object_any(arg, slot_of(ctx, k, mb)->tensor);
    return 1;
  }
  TVMFFIAny* held = &ctx->held[(int64_t)mb * ctx->n_ext + k];
  if (held->type_index == kTVMFFINone) {
    TVMFFIAny args[2];
    int_any(&args[0], k);
    int_any(&args[1], mb);
    if (TVMFFIFunctionCall(ctx->callbacks[CB_HELD], args, 2, held) != 0) {
      none(held);
      fail_raised(ctx, "held");
      return 0;
    }
  }
  *arg = *held;
  return 1;
}

/* A callback on (op, mb, value); 0 when it raised. */
static int tell(Ctx* ctx, int32_t which, int32_t i, int32_t mb, const TVMFFIAny* value) {
  TVMFFIAny args[3], result;
  int_any(&args[0], i);
  int_any(&args[1], mb);
  args[2] = *value;
  none(&result);
  if (TVMFFIFunctionCall(ctx->callbacks[which], args, 3, &result) != 0) {
    fail_raised(ctx, which == CB_HOLD ? "hold" : "deliver");
    return 0;
  }
  release_any(&result);
  return 1;
}

static int64_t arity(Ctx* ctx, const TVMFFIAny* value) {
  if (value->type_index != kTVMFFIArray) return -1;
  TVMFFIAny arg = *value, result;
  none(&result);
  if (TVMFFIFunctionCall(ctx->array_size, &arg, 1, &result) != 0) return -1;
  return result.v_int64;
}

/* Step i of microbatch mb; 0 when the run failed. */
static int perform(Ctx* ctx, int32_t i, int32_t mb, double t0, double wait_s) {
  Op* op = &ctx->ops[i];
  double start = now_s();
  TVMFFIAny args[64];
  TVMFFIAny* argv = op->n_in <= 64 ? args : malloc(sizeof(TVMFFIAny) * (size_t)op->n_in);
  int ok = 1;
  for (int32_t k = 0; k < op->n_in && ok; k++) {
    ok = input(ctx, ctx->ints[op->in_at + k], mb, wait_s, &argv[k]);
  }
  double waited = now_s() - start;
  TVMFFIAny result;
  none(&result);
  if (ok && op->kind == UNIT) {
    ok = TVMFFIFunctionCall(ctx->functions[op->function], argv, op->n_in, &result) == 0;
    if (!ok) fail_raised(ctx, "unit");
  } else if (ok) {
    TVMFFIAny pair[2] = {argv[0]};
    int_any(&pair[1], op->index);
    ok = TVMFFIFunctionCall(ctx->get_item, pair, 2, &result) == 0;
    if (!ok) fail_raised(ctx, "item");
  }
  if (argv != args) free(argv);
  if (!ok) return 0;
  TVMFFIAny* slot = &ctx->values[(int64_t)mb * ctx->n_ops + i];
  release_any(slot);
  *slot = result;
  if (op->hold && !tell(ctx, CB_HOLD, i, mb, slot)) return 0;
  for (int32_t p = 0; p < op->n_push && ctx->status == OK; p++) {
    char name[1024];
    int32_t o = ctx->ints[op->push_at + 2 * p], label = ctx->ints[op->push_at + 2 * p + 1];
    snprintf(name, sizeof name, "%lld/%d:%s", (long long)ctx->run, mb, ctx->names[label]);
    push(ctx, o, name, slot, wait_s);
  }
  if (ctx->status != OK) return 0;
  if (op->deliver && !tell(ctx, CB_DELIVER, i, mb, slot)) return 0;
  double* e = &ctx->events[6 * (int64_t)ctx->n_events++];
  e[0] = i;
  e[1] = mb;
  e[2] = start - t0;
  e[3] = now_s() - t0;
  e[4] = waited;
  e[5] = (double)arity(ctx, slot);
  return 1;
}

/* ---- FFI functions -------------------------------------------------------------------- */

static Ctx* ctx_of(const TVMFFIAny* arg) { return (Ctx*)(intptr_t)arg->v_int64; }

static void free_ctx(Ctx* ctx) {
  for (int64_t i = 0; i < (int64_t)ctx->cap_mb * ctx->n_ops; i++) release_any(&ctx->values[i]);
  for (int64_t i = 0; i < (int64_t)ctx->cap_mb * ctx->n_ext; i++) {
    release_any(&ctx->held[i]);
    if (ctx->slots[i].tensor != NULL) TVMFFIObjectDecRef(ctx->slots[i].tensor);
  }
  for (int32_t k = 0; k < ctx->n_functions; k++) {
    if (ctx->functions != NULL && ctx->functions[k] != NULL) TVMFFIObjectDecRef(ctx->functions[k]);
  }
  TVMFFIObjectHandle own[] = {ctx->get_item, ctx->array_size, ctx->make_array};
  for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) {
    if (own[k] != NULL) TVMFFIObjectDecRef(own[k]);
  }
  for (int k = 0; k < N_CB; k++) {
    if (ctx->callbacks[k] != NULL) TVMFFIObjectDecRef(ctx->callbacks[k]);
  }
  for (int32_t i = 0; i < ctx->n_links; i++) free(ctx->links[i]);
  if (ctx->names != NULL) free(ctx->names[0]);
  free(ctx->names);
  free(ctx->ops);
  free(ctx->ints);
  free(ctx->ext);
  free(ctx->hash);
  free(ctx->functions);
  free(ctx->outlinks);
  free(ctx->values);
  free(ctx->held);
  free(ctx->slots);
  free(ctx->events);
  free(ctx);
}

/* new(table, length, names, names_length, wake_fd, spin_s, held, hold, deliver, allocate,
 * relink) -> ctx. The table (int32): n_ops n_ext n_functions n_outlinks n_names; per op its
 * nine fields (Op); the number of ints and the ints (inputs; pushes as outlink, name pairs);
 * per external value its kind and name. The names: n_names strings, each ended by a zero. */
static int f_new(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  if (n != 11) return raise_("new(table, length, names, length, wake_fd, spin_s, 5 callbacks)");
  for (int k = 6; k < 11; k++) {
    if (args[k].type_index != kTVMFFIFunction) return raise_("new: callbacks are functions");
  }
  const int32_t* t = (const int32_t*)(intptr_t)args[0].v_int64;
  int64_t length = args[1].v_int64, at = 5;
  Ctx* ctx = calloc(1, sizeof(Ctx));
  ctx->n_ops = t[0];
  ctx->n_ext = t[1];
  ctx->n_functions = t[2];
  ctx->n_outlinks = t[3];
  ctx->n_names = t[4];
  ctx->ops = malloc(sizeof(Op) * ((size_t)ctx->n_ops + 1));
  memcpy(ctx->ops, t + at, sizeof(Op) * (size_t)ctx->n_ops);
  at += 9 * (int64_t)ctx->n_ops;
  int64_t n_ints = t[at++];
  ctx->ints = malloc(sizeof(int32_t) * ((size_t)n_ints + 1));
  memcpy(ctx->ints, t + at, sizeof(int32_t) * (size_t)n_ints);
  at += n_ints;
  ctx->ext = malloc(sizeof(Ext) * ((size_t)ctx->n_ext + 1));
  memcpy(ctx->ext, t + at, sizeof(Ext) * (size_t)ctx->n_ext);
  at += 2 * (int64_t)ctx->n_ext;
  /* the names */
  int64_t n_bytes = args[3].v_int64;
  char* blob = malloc((size_t)n_bytes + 1);
  memcpy(blob, (const char*)(intptr_t)args[2].v_int64, (size_t)n_bytes);
  blob[n_bytes] = 0;
  ctx->names = malloc(sizeof(char*) * ((size_t)ctx->n_names + 1));
  int64_t offset = 0;
  for (int32_t k = 0; k < ctx->n_names; k++) {
    ctx->names[k] = blob + (offset < n_bytes ? offset : n_bytes);
    offset += (int64_t)strlen(ctx->names[k]) + 1;
  }
  if (ctx->n_names == 0) ctx->names[0] = blob;
  ctx->hash_size = 2 * ctx->n_ext + 1;
  ctx->hash = calloc((size_t)ctx->hash_size, sizeof(int32_t));
  ctx->functions = calloc((size_t)ctx->n_functions + 1, sizeof(TVMFFIObjectHandle));
  ctx->outlinks = malloc(sizeof(int) * ((size_t)ctx->n_outlinks + 1));
  for (int32_t o = 0; o < ctx->n_outlinks; o++) ctx->outlinks[o] = -1;
  ctx->get_item = global("ffi.ArrayGetItem");
  ctx->array_size = global("ffi.ArraySize");
  ctx->make_array = global("ffi.Array");
  for (int k = 0; k < N_CB; k++) {
    TVMFFIObjectIncRef(args[6 + k].v_obj);
    ctx->callbacks[k] = args[6 + k].v_obj;
  }
  int valid = at == length && offset == n_bytes;
  for (int32_t k = 0; valid && k < ctx->n_ext; k++) {
    valid = ctx->ext[k].name >= 0 && ctx->ext[k].name < ctx->n_names;
    if (valid && ctx->ext[k].kind == LINK) {
      const char* name = ctx->names[ctx->ext[k].name];
      uint32_t i = hash_name(name, strlen(name)) % ctx->hash_size;
      while (ctx->hash[i] != 0) i = (i + 1) % ctx->hash_size;
      ctx->hash[i] = k + 1;
    }
  }
  if (!valid || ctx->get_item == NULL || ctx->array_size == NULL || ctx->make_array == NULL) {
    free_ctx(ctx);
    return raise_("new: the table does not match its contents");
  }
  ctx->wake_fd = (int)args[4].v_int64;
  ctx->spin_s = float_of(&args[5]);
  return set_int(result, (int64_t)(intptr_t)ctx);
}

/* function(ctx, index, function): the unit function of that index (a reference kept). */
static int f_function(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  Ctx* ctx = ctx_of(&args[0]);
  const char* usage = "function(ctx, index, function)";
  if (keep_function(ctx->functions, ctx->n_functions, args, n, usage) != 0) return -1;
  return set_int(result, 0);
}

/* outlink(ctx, index, fd): the connection to a peer that outlink `index` names. */
static int f_outlink(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  Ctx* ctx = ctx_of(&args[0]);
  int64_t o = args[1].v_int64;
  if (n != 3 || o < 0 || o >= ctx->n_outlinks) return raise_("outlink(ctx, index, fd)");
  ctx->outlinks[o] = (int)args[2].v_int64;
  return set_int(result, 0);
}

/* links(ctx, *fds): the links read from now on (one already read keeps what it has begun). */
static int f_links(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  Ctx* ctx = ctx_of(&args[0]);
  if (n - 1 > MAX_LINKS) return raise_("links: too many");
  Inlink* kept[MAX_LINKS];
  int32_t n_kept = 0;
  for (int32_t a = 1; a < n; a++) {
    int fd = (int)args[a].v_int64;
    Inlink* l = NULL;
    for (int32_t i = 0; i < ctx->n_links && l == NULL; i++) {
      if (ctx->links[i] != NULL && ctx->links[i]->fd == fd) {
        l = ctx->links[i];
        ctx->links[i] = NULL;
      }
    }
    if (l == NULL) {
      l = calloc(1, sizeof(Inlink));
      l->fd = fd;
    }
    kept[n_kept++] = l;
  }
  for (int32_t i = 0; i < ctx->n_links; i++) free(ctx->links[i]);
  memcpy(ctx->links, kept, sizeof(Inlink*) * (size_t)n_kept);
  ctx->n_links = n_kept;
  return set_int(result, 0);
}

/* run(ctx, run, microbatches, wait_s, t0) -> OK or LATE (a link value did not come within
 * wait_s: late() says which): the program for each microbatch in turn, events timed from t0
 * (monotonic seconds). A step that failed raises its error. */
static int f_run(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  Ctx* ctx = ctx_of(&args[0]);
  int32_t n_mb = (int32_t)args[2].v_int64;
  if (n != 5 || n_mb < 0) return raise_("run(ctx, run, microbatches, wait_s, t0)");
  if (n_mb > ctx->cap_mb) {
    int64_t old = ctx->cap_mb;
    ctx->values = realloc(ctx->values, sizeof(TVMFFIAny) * ((size_t)n_mb * ctx->n_ops + 1));
    ctx->held = realloc(ctx->held, sizeof(TVMFFIAny) * ((size_t)n_mb * ctx->n_ext + 1));
    ctx->slots = realloc(ctx->slots, sizeof(Slot) * ((size_t)n_mb * ctx->n_ext + 1));
    ctx->events = realloc(ctx->events, sizeof(double) * 6 * ((size_t)n_mb * ctx->n_ops + 1));
    for (int64_t i = old * ctx->n_ops; i < (int64_t)n_mb * ctx->n_ops; i++) none(&ctx->values[i]);
    for (int64_t i = old * ctx->n_ext; i < (int64_t)n_mb * ctx->n_ext; i++) {
      none(&ctx->held[i]);
      memset(&ctx->slots[i], 0, sizeof(Slot));
      ctx->slots[i].run = -1;
    }
    ctx->cap_mb = n_mb;
  }
  for (int64_t i = 0; i < (int64_t)ctx->cap_mb * ctx->n_ops; i++) release_any(&ctx->values[i]);
  for (int64_t i = 0; i < (int64_t)ctx->cap_mb * ctx->n_ext; i++) release_any(&ctx->held[i]);
  ctx->run = args[1].v_int64;
  ctx->n_mb = n_mb;
  ctx->status = OK;
  ctx->n_events = 0;
  ctx->failed_ext = ctx->failed_mb = -1;
  ctx->kind[0] = ctx->message[0] = 0;
  double wait_s = float_of(&args[3]), t0 = float_of(&args[4]);
  for (int32_t mb = 0; mb < n_mb && ctx->status == OK; mb++) {
    for (int32_t i = 0; i < ctx->n_ops && perform(ctx, i, mb, t0, wait_s); i++) {
    }
  }
  if (ctx->status == FAILED) {
    TVMFFIErrorSetRaisedFromCStr(ctx->kind, ctx->message);
    return -1;
  }
  return set_int(result, ctx->status);
}

/* events(ctx, address of doubles) -> their count: per step run, its op, microbatch, start,
 * end, seconds waited for inputs and arity (-1 a tensor), six doubles. */
static int f_events(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Ctx* ctx = ctx_of(&args[0]);
  memcpy((void*)(intptr_t)args[1].v_int64, ctx->events, sizeof(double) * 6 * ctx->n_events);
  return set_int(result, ctx->n_events);
}

/* late(ctx) -> [external value, microbatch]: what a run that returned LATE waited for */
static int f_late(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  Ctx* ctx = ctx_of(&args[0]);
  TVMFFIAny parts[2];
  int_any(&parts[0], ctx->failed_ext);
  int_any(&parts[1], ctx->failed_mb);
  return TVMFFIFunctionCall(ctx->make_array, parts, 2, result);
}

static int f_free(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  (void)n;
  free_ctx(ctx_of(&args[0]));
  return set_int(result, 0);
}

/* readable(fd, spin_s): 1 when fd has bytes to read (or its peer closed) within spin_s of
 * spinning, else 0 (then the caller sleeps on it); called with the GIL released, yielding every
 * turn (the caller's thread may share a core with a worker). */
static int f_readable(void* self, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  (void)self;
  if (n != 2) return raise_("readable(fd, spin_s)");
  struct pollfd fd = {(int)args[0].v_int64, POLLIN, 0};
  double until = now_s() + float_of(&args[1]);
  do {
    if (poll(&fd, 1, 0) != 0) return set_int(result, 1);
    sched_yield();
  } while (now_s() < until);
  return set_int(result, 0);
}

/* Registers the functions above as tvm_hetero.remote.*; 0 on success. */
int tvm_hetero_remote_register(void) {
  return define("tvm_hetero.remote.new", f_new) | define("tvm_hetero.remote.function", f_function) |
         define("tvm_hetero.remote.outlink", f_outlink) |
         define("tvm_hetero.remote.links", f_links) | define("tvm_hetero.remote.run", f_run) |
         define("tvm_hetero.remote.events", f_events) |
         define("tvm_hetero.remote.late", f_late) | define("tvm_hetero.remote.free", f_free) |
         define("tvm_hetero.remote.readable", f_readable);
}
