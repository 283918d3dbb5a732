/* State shared between the driver and its workers (MAP_SHARED|MAP_ANONYMOUS,
 * mapped before fork so it sits at the same address everywhere), and the
 * per-worker context handed to the workload functions. */
#ifndef LS_SHM_H
#define LS_SHM_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define LS_CACHELINE 64

/* One cache line per worker; the worker is the only writer. */
struct ls_counter {
    _Alignas(LS_CACHELINE) _Atomic uint64_t ops;
};

/* Per-worker status: written during set-up, on error and on running out;
 * never in the hot loop. */
struct ls_wstate {
    _Alignas(LS_CACHELINE) _Atomic int32_t err_set; /* error record valid */
    _Atomic int32_t ran_out;
    int32_t pid, tid;
    int32_t err_errno;
    uint64_t ran_out_ns;   /* CLOCK_MONOTONIC when it ran out */
    uint64_t precreated;   /* MWUL: files pre-created */
    uint64_t aux;          /* count named by the catalog's aux_key */
    uint64_t setup_ns;     /* this worker's private set-up time */
    char err_op[32];
    char err_msg[128];     /* "" -> strerror(err_errno) */
    char err_path[PATH_MAX];
    char err_path2[PATH_MAX]; /* rename destination, else "" */
};

struct ls_shm {
    _Alignas(LS_CACHELINE) _Atomic uint32_t go;   /* barrier release (futex) */
    _Alignas(LS_CACHELINE) _Atomic uint32_t stop; /* stop flag (futex) */
    _Alignas(LS_CACHELINE) _Atomic uint32_t nready;
    pid_t driver_pid;
    uint64_t files_budget; /* MWUL: max files one worker may pre-create */
    struct ls_counter *counters; /* [nworkers], inside this mapping */
    struct ls_wstate *ws;        /* [nworkers], inside this mapping */
};

struct workload;

/* Context of one worker (process or thread). */
struct ls_ctx {
    const struct workload *wl;
    int idx, nworkers, cpu;
    const char *dir;       /* absolute --dir, or NULL */
    double warmup_s, duration_s;
    struct ls_shm *shm;
    _Atomic uint64_t *ops;
    _Atomic uint32_t *stop;
    struct ls_wstate *ws;

    /* workload scratch */
    int fd;
    void *buf;
    uint64_t nfiles;
    size_t num_at, num_len; /* decimal counter at pa[num_at..num_at+num_len) */
    char pa[PATH_MAX], pb[PATH_MAX];
};

/* Record an error (op, path, errno; path2/msg optional) for the driver and
 * terminate the worker (the whole process for thread workers). */
_Noreturn void ls_fail(struct ls_ctx *c, const char *op, const char *path,
                       const char *path2, int err, const char *msg);

/* Mark the worker as out of work and sleep until the stop flag is set. */
void ls_ran_out(struct ls_ctx *c);

static inline bool ls_stopped(const struct ls_ctx *c)
{
    return atomic_load_explicit(c->stop, memory_order_relaxed) != 0;
}

static inline void ls_count(struct ls_ctx *c, uint64_t n)
{
    atomic_store_explicit(c->ops, n, memory_order_relaxed);
}

#endif
