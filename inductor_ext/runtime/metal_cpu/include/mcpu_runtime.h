// The Metal-on-CPU executor's scheduler: one threadgroup at a time, each of its threads a fiber.
//
// A fiber runs until it reaches a threadgroup barrier, a SIMD-group collective or its end, then
// yields to the scheduler. When no fiber can run, the scheduler first completes collectives
// (per SIMD group of 32 lanes, over the lanes waiting at the same call site: the active lanes),
// and only when none is pending releases a barrier that every unfinished thread reached at the
// same call site. Anything else (a thread that finished or waits elsewhere while others wait at
// a barrier) is a divergent barrier and fails the launch with a message. Compiled into every
// kernel library; included before the MSL shim defines its keywords as macros.
#pragma once
#include <setjmp.h>
#include <stdarg.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if !defined(__x86_64__) || defined(MCPU_USE_UCONTEXT)
#include <ucontext.h>
#define MCPU_UCONTEXT 1
#endif

#ifndef MCPU_SIMD_WIDTH
#define MCPU_SIMD_WIDTH 32  // Apple GPUs: 32 lanes per SIMD group (tests rebuild with other widths)
#endif
#define MCPU_DEPOSIT_BYTES 64  // largest value a lane hands to a SIMD collective
#define MCPU_MAX_THREADS 1024  // Apple GPUs: at most 1024 threads per threadgroup
#ifndef MCPU_THREADGROUP_MEMORY_BYTES
#define MCPU_THREADGROUP_MEMORY_BYTES 32768  // Apple GPUs: maxThreadgroupMemoryLength
#endif

namespace mcpu {

struct u3 {
  uint32_t x, y, z;
};

// Thread-position attributes of one thread, as the trampolines hand them to a kernel.
struct ThreadInfo {
  u3 thread_position_in_grid, thread_position_in_threadgroup, threadgroup_position_in_grid;
  u3 threads_per_threadgroup, threadgroups_per_grid, threads_per_grid, dispatch_threads_per_threadgroup;
  uint32_t thread_index_in_threadgroup, thread_index_in_simdgroup, simdgroup_index_in_threadgroup;
  uint32_t threads_per_simdgroup, simdgroups_per_threadgroup, dispatch_simdgroups_per_threadgroup;
  uint32_t thread_index_in_quadgroup, quadgroup_index_in_threadgroup, quadgroups_per_threadgroup;
  uint32_t dispatch_quadgroups_per_threadgroup;
};

// What Python passes to mcpu_dispatch (mirrored by ctypes in launch.py).
struct Launch {
  char* stacks;            // MCPU_MAX_THREADS fiber stacks, one every stack_stride bytes, each
  uint64_t stack_stride;   // stack_bytes long after a guard page; shared by every library of
  uint64_t stack_bytes;    // the process (launch.py maps them once)
  void** buffers;
  int32_t nbuffers;
  uint32_t threads[3];     // threads per grid
  uint32_t group[3];       // threads per threadgroup as dispatched (the last one may be partial)
  int32_t checked;         // report SIMD reads of inactive lanes as errors
  char* error;             // out: message when the launch fails
  int32_t error_bytes;
  uint64_t fault_address;  // out: address of a memory fault (0 when none)
};

enum State { RUNNABLE, AT_BARRIER, AT_SIMD, DONE };

// Where a thread waits: the call site of a barrier or collective (g++ 12 has no column builtin,
// so two collectives on one source line count as one site).
struct Site {
  const char* file;
  int line;
  const char* what;
  bool same(const Site& o) const { return line == o.line && (file == o.file || strcmp(file, o.file) == 0); }
};

typedef void (*ThreadFn)(void** buffers, const ThreadInfo* info);

struct Fiber {
  void* sp;  // saved stack pointer (asm switch)
#ifdef MCPU_UCONTEXT
  ucontext_t ctx;
#endif
  char* stack;
  size_t stack_bytes;
  State state;
  Site site;
  ThreadInfo info;
  alignas(16) unsigned char deposit[MCPU_DEPOSIT_BYTES];
};

struct Snapshot {  // the values of one completed SIMD collective, read by its lanes on resume
  alignas(16) unsigned char values[MCPU_SIMD_WIDTH][MCPU_DEPOSIT_BYTES];
  uint64_t active;  // bit per lane that took part
};

struct Group {
  Fiber* fibers;
  int nthreads, nsimd;
  Snapshot* snaps;  // one per SIMD group
  void** buffers;
  ThreadFn fn;
  bool checked;
  bool failed;
  char message[1024];
  uint64_t generation;  // counts threadgroups, for threadgroup-memory poisoning
  size_t tg_bytes;  // threadgroup memory this threadgroup has declared so far
  void* sched_sp;
#ifdef MCPU_UCONTEXT
  ucontext_t sched_ctx;
#endif
};

// One launch at a time per library (the Python side holds a lock).
static Group* g_group = nullptr;
static Fiber* g_current = nullptr;

// ------------------------------------------------------------------------ context switch
#ifndef MCPU_UCONTEXT
extern "C" void mcpu_ctx_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .hidden mcpu_ctx_switch
  .type mcpu_ctx_switch,@function
mcpu_ctx_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mcpu_ctx_switch,.-mcpu_ctx_switch
)");
#endif

static void fiber_main();

static void start_fiber(Fiber* f) {
  char* top = f->stack + f->stack_bytes;
#ifdef MCPU_UCONTEXT
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = f->stack_bytes;
  f->ctx.uc_link = nullptr;
  makecontext(&f->ctx, (void (*)())fiber_main, 0);
  (void)top;
#else
  // Frame popped by mcpu_ctx_switch: mxcsr/x87 control word, r15..rbp, then `ret` into
  // fiber_main with the stack aligned as after a call.
  uint64_t* sp = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15)));
  *--sp = 0;                                      // fake return address of fiber_main
  *--sp = reinterpret_cast<uint64_t>(&fiber_main);
  for (int i = 0; i < 6; i++) *--sp = 0;          // rbp rbx r12 r13 r14 r15
  *--sp = 0x1F80ull | (0x037Full << 32);           // mxcsr, x87 control word
  f->sp = sp;
#endif
}

static inline void switch_to_fiber(Fiber* f) {
  g_current = f;
#ifdef MCPU_UCONTEXT
  swapcontext(&g_group->sched_ctx, &f->ctx);
#else
  mcpu_ctx_switch(&g_group->sched_sp, f->sp);
#endif
  g_current = nullptr;
}

static inline void yield_to_scheduler() {
  Fiber* f = g_current;
#ifdef MCPU_UCONTEXT
  swapcontext(&f->ctx, &g_group->sched_ctx);
#else
  mcpu_ctx_switch(&f->sp, g_group->sched_sp);
#endif
}

static void fiber_main() {
  Fiber* f = g_current;
  g_group->fn(g_group->buffers, &f->info);
  f->state = DONE;
  yield_to_scheduler();
  abort();  // a finished fiber is never resumed
}

// ------------------------------------------------------------------------ errors
static void describe_thread(char* out, size_t n, const Fiber* f) {
  const ThreadInfo& t = f->info;
  snprintf(out, n, "thread (%u, %u, %u) of threadgroup (%u, %u, %u) [SIMD group %u, lane %u]",
           t.thread_position_in_threadgroup.x, t.thread_position_in_threadgroup.y,
           t.thread_position_in_threadgroup.z, t.threadgroup_position_in_grid.x,
           t.threadgroup_position_in_grid.y, t.threadgroup_position_in_grid.z,
           t.simdgroup_index_in_threadgroup, t.thread_index_in_simdgroup);
}

// Fail the launch from inside a kernel thread: record the message, never resume this thread.
__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char* fmt, ...) {
  Group* g = g_group;
  if (!g->failed) {
    char who[160];
    describe_thread(who, sizeof who, g_current);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g->message, sizeof g->message, fmt, ap);
    va_end(ap);
    if (n >= 0 && size_t(n) < sizeof g->message)
      snprintf(g->message + n, sizeof g->message - n, " (in %s)", who);
    g->failed = true;
  }
  g_current->state = DONE;
  yield_to_scheduler();
  abort();
}

static inline const char* short_file(const char* file) {
  const char* slash = strrchr(file, '/');
  return slash ? slash + 1 : file;
}

// ------------------------------------------------------------------------ waiting points
static inline void wait_barrier(Site site) {
  Fiber* f = g_current;
  f->state = AT_BARRIER;
  f->site = site;
  yield_to_scheduler();
}

// Hand `bytes` of this lane's value to a SIMD collective; returns the group's snapshot.
static inline const Snapshot* simd_exchange(const void* value, size_t bytes, Site site) {
  Fiber* f = g_current;
  memcpy(f->deposit, value, bytes);
  f->state = AT_SIMD;
  f->site = site;
  yield_to_scheduler();
  return &g_group->snaps[f->info.simdgroup_index_in_threadgroup];
}

// ------------------------------------------------------------------------ threadgroup memory
// `threadgroup` arrays become function statics; the first thread that passes the declaration
// in each threadgroup fills them with 0xFF bytes (NaN, -1), since Metal leaves them undefined,
// and counts them against the threadgroup memory an Apple GPU has (a Mac refuses such a kernel).
static const int kMaxTgVars = 64;
static void* g_tg_ptr[kMaxTgVars];
static uint64_t g_tg_gen[kMaxTgVars];
static int g_tg_count = 0;

static inline void threadgroup_declared(size_t bytes) {
  g_group->tg_bytes += bytes;
  if (g_group->tg_bytes > MCPU_THREADGROUP_MEMORY_BYTES)
    fail("threadgroup memory: the kernel declares %zu bytes, more than the %d bytes of an Apple GPU "
         "(maxThreadgroupMemoryLength)", g_group->tg_bytes, MCPU_THREADGROUP_MEMORY_BYTES);
}

static inline void threadgroup_var(void* p, size_t bytes) {
  for (int i = 0; i < g_tg_count; i++) {
    if (g_tg_ptr[i] == p) {
      if (g_tg_gen[i] != g_group->generation) {
        g_tg_gen[i] = g_group->generation;
        memset(p, 0xFF, bytes);
        threadgroup_declared(bytes);
      }
      return;
    }
  }
  memset(p, 0xFF, bytes);
  if (g_tg_count < kMaxTgVars) {  // (past that many, arrays are neither tracked nor counted)
    g_tg_ptr[g_tg_count] = p;
    g_tg_gen[g_tg_count++] = g_group->generation;
    threadgroup_declared(bytes);
  }
}

// ------------------------------------------------------------------------ scheduler
static void sched_error(Group* g, const char* fmt, ...) {
  if (g->failed) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->message, sizeof g->message, fmt, ap);
  va_end(ap);
  g->failed = true;
}

// Complete at most one collective per SIMD group: the lanes waiting at the call site of its
// lowest waiting lane. Returns whether any completed.
static bool complete_simd_collectives(Group* g) {
  bool any = false;
  for (int s = 0; s < g->nsimd; s++) {
    Fiber* lanes = g->fibers + s * MCPU_SIMD_WIDTH;
    int nlanes = g->nthreads - s * MCPU_SIMD_WIDTH;
    if (nlanes > MCPU_SIMD_WIDTH) nlanes = MCPU_SIMD_WIDTH;
    const Site* site = nullptr;
    for (int l = 0; l < nlanes; l++) {
      if (lanes[l].state == AT_SIMD) {
        site = &lanes[l].site;
        break;
      }
    }
    if (!site) continue;
    Snapshot* snap = &g->snaps[s];
    snap->active = 0;
    Site chosen = *site;
    for (int l = 0; l < nlanes; l++) {
      Fiber* f = &lanes[l];
      if (f->state == AT_SIMD && f->site.same(chosen)) {
        snap->active |= uint64_t(1) << l;
        memcpy(snap->values[l], f->deposit, MCPU_DEPOSIT_BYTES);
        f->state = RUNNABLE;
      }
    }
    any = true;
  }
  return any;
}

static void release_barrier(Group* g) {
  const Fiber* waiting = nullptr;
  const Fiber* finished = nullptr;
  for (int i = 0; i < g->nthreads; i++) {
    const Fiber* f = &g->fibers[i];
    if (f->state == AT_BARRIER && !waiting) waiting = f;
    if (f->state == DONE && !finished) finished = f;
  }
  char a[160], b[160];
  if (finished) {
    describe_thread(a, sizeof a, waiting);
    describe_thread(b, sizeof b, finished);
    sched_error(g,
                "divergent threadgroup_barrier: %s waits at %s:%d but %s finished without reaching it; "
                "every thread of a threadgroup must reach each barrier",
                a, short_file(waiting->site.file), waiting->site.line, b);
    return;
  }
  for (int i = 0; i < g->nthreads; i++) {
    const Fiber* f = &g->fibers[i];
    if (!f->site.same(waiting->site)) {
      describe_thread(a, sizeof a, waiting);
      describe_thread(b, sizeof b, f);
      sched_error(g,
                  "divergent threadgroup_barrier: %s waits at %s:%d but %s waits at %s:%d; "
                  "every thread of a threadgroup must reach the same barriers",
                  a, short_file(waiting->site.file), waiting->site.line, b, short_file(f->site.file), f->site.line);
      return;
    }
  }
  for (int i = 0; i < g->nthreads; i++) g->fibers[i].state = RUNNABLE;
}

static void run_threadgroup(Group* g) {
  for (int i = 0; i < g->nthreads; i++) {
    g->fibers[i].state = RUNNABLE;
    start_fiber(&g->fibers[i]);
  }
  for (;;) {
    for (int i = 0; i < g->nthreads && !g->failed; i++) {
      if (g->fibers[i].state == RUNNABLE) switch_to_fiber(&g->fibers[i]);
    }
    if (g->failed) return;
    if (complete_simd_collectives(g)) continue;
    bool any_barrier = false;
    for (int i = 0; i < g->nthreads; i++) any_barrier |= g->fibers[i].state == AT_BARRIER;
    if (!any_barrier) return;  // all threads finished
    release_barrier(g);
    if (g->failed) return;
  }
}

// ------------------------------------------------------------------------ memory faults
static sigjmp_buf g_fault_jump;
static volatile uint64_t g_fault_address = 0;
static struct sigaction g_old_segv, g_old_bus;

static void on_fault(int sig, siginfo_t* info, void*) {
  g_fault_address = reinterpret_cast<uint64_t>(info->si_addr);
  siglongjmp(g_fault_jump, sig);
}

static uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// Thread-position attributes of the threads of threadgroup `gpos` whose actual size is `size`
// (the last threadgroup of a dimension may be partial) out of dispatched size G.
static void set_positions(Fiber* fibers, const uint32_t* gpos, const uint32_t* size, const uint32_t* G,
                          const uint32_t* groups, const uint32_t* T) {
  uint32_t n = size[0] * size[1] * size[2], dispatch_n = G[0] * G[1] * G[2];
  for (uint32_t i = 0; i < n; i++) {
    ThreadInfo& t = fibers[i].info;
    uint32_t lx = i % size[0], ly = (i / size[0]) % size[1], lz = i / (size[0] * size[1]);
    t.thread_position_in_threadgroup = {lx, ly, lz};
    t.threadgroup_position_in_grid = {gpos[0], gpos[1], gpos[2]};
    t.thread_position_in_grid = {gpos[0] * G[0] + lx, gpos[1] * G[1] + ly, gpos[2] * G[2] + lz};
    t.threads_per_threadgroup = {size[0], size[1], size[2]};
    t.dispatch_threads_per_threadgroup = {G[0], G[1], G[2]};
    t.threadgroups_per_grid = {groups[0], groups[1], groups[2]};
    t.threads_per_grid = {T[0], T[1], T[2]};
    t.thread_index_in_threadgroup = i;
    t.thread_index_in_simdgroup = i % MCPU_SIMD_WIDTH;
    t.simdgroup_index_in_threadgroup = i / MCPU_SIMD_WIDTH;
    t.threads_per_simdgroup = MCPU_SIMD_WIDTH;
    t.simdgroups_per_threadgroup = (n + MCPU_SIMD_WIDTH - 1) / MCPU_SIMD_WIDTH;
    t.dispatch_simdgroups_per_threadgroup = (dispatch_n + MCPU_SIMD_WIDTH - 1) / MCPU_SIMD_WIDTH;
    t.thread_index_in_quadgroup = i % 4;
    t.quadgroup_index_in_threadgroup = i / 4;
    t.quadgroups_per_threadgroup = (n + 3) / 4;
    t.dispatch_quadgroups_per_threadgroup = (dispatch_n + 3) / 4;
  }
}

static int dispatch(ThreadFn fn, Launch* L) {
  static Group group;
  static Fiber fibers[MCPU_MAX_THREADS];
  static Snapshot snaps[(MCPU_MAX_THREADS + MCPU_SIMD_WIDTH - 1) / MCPU_SIMD_WIDTH];
  Group* g = &group;
  g->fibers = fibers;
  g->snaps = snaps;
  g->buffers = L->buffers;
  g->fn = fn;
  g->checked = L->checked != 0;
  g->failed = false;
  g->message[0] = 0;
  L->fault_address = 0;
  const uint32_t* T = L->threads;
  const uint32_t* G = L->group;
  uint32_t groups[3] = {ceil_div(T[0], G[0]), ceil_div(T[1], G[1]), ceil_div(T[2], G[2])};
  if (uint64_t(G[0]) * G[1] * G[2] > MCPU_MAX_THREADS) {
    snprintf(L->error, L->error_bytes, "threadgroup of %u x %u x %u threads exceeds %d", G[0], G[1], G[2],
             MCPU_MAX_THREADS);
    return 1;
  }
  for (int i = 0; i < MCPU_MAX_THREADS; i++) {
    fibers[i].stack = L->stacks + i * L->stack_stride + (L->stack_stride - L->stack_bytes);
    fibers[i].stack_bytes = L->stack_bytes;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  static char alt_stack[64 * 1024];
  stack_t ss, old_ss;
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  ss.ss_flags = 0;
  sigaltstack(&ss, &old_ss);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sigaction(SIGBUS, &sa, &g_old_bus);
  g_group = g;
  int rc = 0;
  if (sigsetjmp(g_fault_jump, 1) != 0) {
    // A fault inside a kernel thread: report it with the thread that made it.
    char who[160] = "";
    if (g_current) describe_thread(who, sizeof who, g_current);
    L->fault_address = g_fault_address;
    snprintf(L->error, L->error_bytes, "memory fault at address 0x%llx%s%s", (unsigned long long)g_fault_address,
             who[0] ? " in " : "", who);
    rc = 2;
  } else {
    for (uint32_t gz = 0; gz < groups[2] && !rc; gz++)
      for (uint32_t gy = 0; gy < groups[1] && !rc; gy++)
        for (uint32_t gx = 0; gx < groups[0] && !rc; gx++) {
          uint32_t gpos[3] = {gx, gy, gz};
          uint32_t size[3];
          for (int d = 0; d < 3; d++) {
            uint32_t left = T[d] - gpos[d] * G[d];
            size[d] = left < G[d] ? left : G[d];
          }
          int n = int(size[0] * size[1] * size[2]);
          g->nthreads = n;
          g->nsimd = (n + MCPU_SIMD_WIDTH - 1) / MCPU_SIMD_WIDTH;
          g->generation++;
          g->tg_bytes = 0;
          set_positions(fibers, gpos, size, G, groups, T);
          run_threadgroup(g);
          if (g->failed) {
            snprintf(L->error, L->error_bytes, "%s", g->message);
            rc = 1;
          }
        }
  }
  g_current = nullptr;
  sigaction(SIGSEGV, &g_old_segv, nullptr);
  sigaction(SIGBUS, &g_old_bus, nullptr);
  sigaltstack(&old_ss, nullptr);
  g_group = nullptr;
  return rc;
}

}  // namespace mcpu

extern "C" __attribute__((visibility("default"))) int mcpu_dispatch(mcpu::ThreadFn fn, mcpu::Launch* launch) {
  return mcpu::dispatch(fn, launch);
}
