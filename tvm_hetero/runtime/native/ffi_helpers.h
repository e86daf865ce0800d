/* What the native sources share: the clock, FFI values, errors and registration. Each source
 * that includes it gets its own copy (static): a library is built from one source. */
#ifndef TVM_HETERO_NATIVE_FFI_HELPERS_H_
#define TVM_HETERO_NATIVE_FFI_HELPERS_H_

#include <stdint.h>
#include <string.h>
#include <time.h>
#include <tvm/ffi/c_api.h>

/* monotonic seconds, the clock of Python's time.perf_counter */
static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline void none(TVMFFIAny* any) {
  any->type_index = kTVMFFINone;
  any->zero_padding = 0;
  any->v_int64 = 0;
}

/* drop the reference an owned value holds; it is None after */
static inline void release_any(TVMFFIAny* any) {
  if (any->type_index >= kTVMFFIStaticObjectBegin && any->v_obj != NULL) {
    TVMFFIObjectDecRef(any->v_obj);
  }
  none(any);
}

static inline void int_any(TVMFFIAny* any, int64_t v) {
  any->type_index = kTVMFFIInt;
  any->zero_padding = 0;
  any->v_int64 = v;
}

/* an FFI function's integer result */
static inline int set_int(TVMFFIAny* result, int64_t v) {
  int_any(result, v);
  return 0;
}

/* an FFI function's ValueError */
static inline int raise_(const char* message) {
  TVMFFIErrorSetRaisedFromCStr("ValueError", message);
  return -1;
}

static inline double float_of(const TVMFFIAny* arg) {
  return arg->type_index == kTVMFFIFloat ? arg->v_float64 : (double)arg->v_int64;
}

/* a global FFI function (a reference the caller owns), NULL where there is none */
static inline TVMFFIObjectHandle global(const char* name) {
  TVMFFIByteArray n = {name, strlen(name)};
  TVMFFIObjectHandle f = NULL;
  TVMFFIFunctionGetGlobal(&n, &f);
  return f;
}

/* An FFI function's `function(handle, index, function)`: a reference to `function` kept as
 * functions[index] (of `count`); 0, or -1 with a ValueError naming `usage`. */
static inline int keep_function(TVMFFIObjectHandle* functions, int64_t count,
                                const TVMFFIAny* args, int32_t n, const char* usage) {
  int64_t k = n == 3 ? args[1].v_int64 : -1;
  if (k < 0 || k >= count || args[2].type_index != kTVMFFIFunction) return raise_(usage);
  TVMFFIObjectIncRef(args[2].v_obj);
  if (functions[k] != NULL) TVMFFIObjectDecRef(functions[k]);
  functions[k] = args[2].v_obj;
  return 0;
}

/* register `call` as the global FFI function `name`; 0 on success */
static inline int define(const char* name, TVMFFISafeCallType call) {
  TVMFFIObjectHandle f = NULL;
  if (TVMFFIFunctionCreate(NULL, call, NULL, &f) != 0) return -1;
  TVMFFIByteArray n = {name, strlen(name)};
  int rc = TVMFFIFunctionSetGlobal(&n, f, 1);
  TVMFFIObjectDecRef(f);
  return rc;
}

#endif /* TVM_HETERO_NATIVE_FFI_HELPERS_H_ */
