/* A stand-in CUDA driver for the runtime's host-side tests: device memory is host memory
 * (malloc), copies are memcpy, and the one "kernel" of a module, saxpy(float* x, float* y,
 * int n, float a), runs on the host: y[i] = a * x[i] + y[i]. Stream capture records saxpy
 * launches into a graph that a replay runs. Events time nothing: each record advances a
 * counter by one "millisecond". Only the behaviour the runtime relies on is modelled.
 * Enumerator values are those of cuda.h. */
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

typedef unsigned long long CUdeviceptr;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_IMAGE = 200, NOT_FOUND = 500,
       STREAM_CAPTURE_UNSUPPORTED = 900 };

static int context_token, stream_token, module_token, function_token;
static int capturing;
static int max_dynamic_smem = 48 * 1024 - 1024; /* 48 KiB minus the kernel's static 1 KiB */
static int event_clock;

struct launch { float *x, *y; int n; float a; };
struct graph { int count; struct launch launches[16]; };
static struct graph recording;

int cuInit(unsigned flags) { (void)flags; return OK; }
int cuDriverGetVersion(int *v) { *v = 13000; return OK; }
int cuGetErrorName(int e, const char **s) { (void)e; *s = "CUDA_ERROR_FAKE"; return OK; }
int cuGetErrorString(int e, const char **s) { (void)e; *s = "fake driver error"; return OK; }
int cuDeviceGetCount(int *n) { *n = 1; return OK; }
int cuDeviceGet(int *d, int ordinal) { *d = ordinal; return ordinal == 0 ? OK : INVALID_VALUE; }
int cuDeviceGetName(char *name, int len, int d) { (void)d; strncpy(name, "Fake GPU", len); return OK; }
int cuDeviceGetAttribute(int *v, int attr, int d) {
    (void)d;
    switch (attr) {
    case 1: *v = 1024; break;          /* MAX_THREADS_PER_BLOCK */
    case 16: *v = 132; break;          /* MULTIPROCESSOR_COUNT */
    case 75: *v = 9; break;            /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = 0; break;            /* COMPUTE_CAPABILITY_MINOR */
    case 97: *v = 227 * 1024; break;   /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    default: *v = 0;
    }
    return OK;
}
int cuDeviceTotalMem_v2(size_t *bytes, int d) { (void)d; *bytes = (size_t)80 << 30; return OK; }
int cuDevicePrimaryCtxRetain(void **ctx, int d) { (void)d; *ctx = &context_token; return OK; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return OK; }
int cuCtxSetCurrent(void *ctx) { return ctx == &context_token ? OK : INVALID_VALUE; }
int cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = &stream_token; return OK; }
int cuStreamDestroy_v2(void *s) { (void)s; return OK; }
int cuStreamSynchronize(void *s) { (void)s; return capturing ? STREAM_CAPTURE_UNSUPPORTED : OK; }
/* Like the driver, allocations are 256-byte aligned; with FAKE_CUDA_MISALIGN=1 they are
 * 16 bytes past a multiple of 256 instead (a driver breaking its guarantee). */
static int misalign(void) { const char *v = getenv("FAKE_CUDA_MISALIGN"); return v && v[0] == '1'; }
int cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    size_t shift = misalign() ? 16 : 0;
    char *m = aligned_alloc(256, (bytes + shift + 255) / 256 * 256);
    if (!m) return OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)(m + shift);
    return OK;
}
int cuMemFree_v2(CUdeviceptr p) { free((char *)(uintptr_t)p - (misalign() ? 16 : 0)); return OK; }
int cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { *free_bytes = (size_t)79 << 30; *total = (size_t)80 << 30; return OK; }
int cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) {
    (void)s; if (capturing) return STREAM_CAPTURE_UNSUPPORTED;
    memcpy((void *)(uintptr_t)d, h, n); return OK;
}
int cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s) {
    (void)s; if (capturing) return STREAM_CAPTURE_UNSUPPORTED;
    memcpy(h, (void *)(uintptr_t)d, n); return OK;
}
int cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr src, size_t n, void *s) {
    (void)s; memcpy((void *)(uintptr_t)d, (void *)(uintptr_t)src, n); return OK;
}
int cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *s) {
    (void)s; memset((void *)(uintptr_t)d, v, n); return OK;
}
/* An image is valid when it starts with "FAKE"; otherwise the JIT log says why. */
int cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *options, void **values) {
    if (strncmp((const char *)image, "FAKE", 4) == 0) { *m = &module_token; return OK; }
    char *log = 0; size_t size = 0;
    for (unsigned i = 0; i < n; i++) {
        if (options[i] == 5) log = (char *)values[i];                  /* ERROR_LOG_BUFFER */
        if (options[i] == 6) size = (size_t)(uintptr_t)values[i];      /* ..._SIZE_BYTES */
    }
    if (log && size) { strncpy(log, "fake JIT: the image does not start with FAKE", size - 1); log[size - 1] = 0; }
    return INVALID_IMAGE;
}
int cuModuleUnload(void *m) { (void)m; return OK; }
int cuModuleGetFunction(void **f, void *m, const char *name) {
    (void)m;
    if (strcmp(name, "saxpy") != 0) return NOT_FOUND;
    *f = &function_token; return OK;
}
int cuFuncGetAttribute(int *v, int attr, void *f) {
    (void)f;
    switch (attr) {
    case 0: *v = 1024; break;              /* MAX_THREADS_PER_BLOCK */
    case 1: *v = 1024; break;              /* SHARED_SIZE_BYTES */
    case 4: *v = 32; break;                /* NUM_REGS */
    case 8: *v = max_dynamic_smem; break;  /* MAX_DYNAMIC_SHARED_SIZE_BYTES */
    default: *v = 0;
    }
    return OK;
}
int cuFuncSetAttribute(void *f, int attr, int v) {
    (void)f;
    if (attr != 8 || v + 1024 > 227 * 1024) return INVALID_VALUE;
    max_dynamic_smem = v; return OK;
}
int cuFuncGetParamInfo(void *f, size_t index, size_t *offset, size_t *size) {
    static const size_t offsets[] = {0, 8, 16, 20}, sizes[] = {8, 8, 4, 4};
    (void)f;
    if (index >= 4) return INVALID_VALUE;
    *offset = offsets[index]; *size = sizes[index]; return OK;
}
static void run(const struct launch *l) { for (int i = 0; i < l->n; i++) l->y[i] = l->a * l->x[i] + l->y[i]; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, void *s, void **params, void **extra) {
    (void)f; (void)s; (void)extra;
    if (smem > (unsigned)max_dynamic_smem) return INVALID_VALUE;
    struct launch l = { *(float **)params[0], *(float **)params[1], *(int *)params[2], *(float *)params[3] };
    if ((unsigned long long)gx * gy * gz * bx * by * bz < (unsigned long long)l.n) return INVALID_VALUE;
    if (capturing) {
        if (recording.count == 16) return OUT_OF_MEMORY;
        recording.launches[recording.count++] = l;
    } else {
        run(&l);
    }
    return OK;
}
int cuEventCreate(void **e, unsigned flags) { (void)flags; *e = calloc(1, sizeof(int)); return OK; }
int cuEventRecord(void *e, void *s) { (void)s; *(int *)e = ++event_clock; return OK; }
int cuEventSynchronize(void *e) { (void)e; return OK; }
int cuEventElapsedTime(float *ms, void *start, void *end) { *ms = (float)(*(int *)end - *(int *)start); return OK; }
int cuEventDestroy_v2(void *e) { free(e); return OK; }
int cuStreamBeginCapture_v2(void *s, int mode) {
    (void)s;
    if (mode != 1 || capturing) return INVALID_VALUE;   /* THREAD_LOCAL only */
    capturing = 1; recording.count = 0; return OK;
}
int cuStreamEndCapture(void *s, void **g) {
    (void)s;
    if (!capturing) return INVALID_VALUE;
    capturing = 0;
    struct graph *copy = malloc(sizeof *copy);
    *copy = recording; *g = copy; return OK;
}
int cuGraphInstantiateWithFlags(void **exec, void *g, unsigned long long flags) {
    (void)flags;
    struct graph *copy = malloc(sizeof *copy);
    *copy = *(struct graph *)g; *exec = copy; return OK;
}
int cuGraphLaunch(void *exec, void *s) {
    (void)s;
    const struct graph *g = exec;
    for (int i = 0; i < g->count; i++) run(&g->launches[i]);
    return OK;
}
int cuGraphExecDestroy(void *exec) { free(exec); return OK; }
int cuGraphDestroy(void *g) { free(g); return OK; }
