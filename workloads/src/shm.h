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
#include <time.h>

#define LS_CACHELINE 64

/* Latency histograms: bucket b counts operations that took [2^b, 2^(b+1))
 * ns (bucket 0: [0, 2) ns; the last bucket is open-ended). */
#define LS_LAT_BUCKETS 42
#define LS_MAX_OPTYPES 8   /* operation types of one workload */
#define LS_MAX_PARAMS 8    /* --param keys of one workload */

/* One operation type of one worker. The worker is the only writer (inside
 * its seqlock); the driver reads consistent copies and resets max_ns. */
struct ls_hist {
	_Atomic uint64_t count;
	_Atomic uint64_t sum_ns;
	_Atomic uint64_t max_ns;  /* since the driver last took it */
	_Atomic uint64_t b[LS_LAT_BUCKETS];
};

/* Per-worker latency record: seqlock, then one ls_hist per operation type
 * (the mapping holds shm->lat_stride bytes per worker). */
struct ls_lat {
	_Alignas(LS_CACHELINE) _Atomic uint32_t seq;
	struct ls_hist h[];
};

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
	bool timing;           /* per-op latency on (off: --no-latency) */
	int nops;              /* operation types of the workload (>= 1) */
	size_t lat_stride;     /* bytes per worker in lat */
	char *lat;             /* [nworkers] struct ls_lat, inside this mapping */
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
	struct ls_lat *lat;    /* this worker's histograms */
	bool timing;
	uint64_t t_mark;       /* end of the previous op (or ls_op_start) */
	/* single-operation workloads: one op in lat_every is timed (adapted to
	 * the op's cost, see ls_count); lat_left ops to go until the next */
	uint32_t lat_every, lat_left, lat_n;
	uint64_t lat_sum;
	uint64_t nops;         /* ops so far (ls_op) */
	const long long *param; /* --param values, in catalog order */

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

/* The op clock. With an invariant TSC (x86, calibrated by the driver
 * before the workers start: ls_tsc_mult = ns per cycle << 32) it is the
 * TSC, read in about 20 ns here; otherwise CLOCK_MONOTONIC through the vDSO,
 * about 45 ns. Only differences of two readings are used, converted to ns
 * by ls_clock_delta_ns. */
extern uint64_t ls_tsc_mult;
void ls_tsc_calibrate(void);

static inline uint64_t ls_clock_ns(void)
{
#if defined(__x86_64__)
	if (ls_tsc_mult)
		return __builtin_ia32_rdtsc();
#endif
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t ls_clock_delta_ns(uint64_t from, uint64_t to)
{
	uint64_t d = to - from;
	if (ls_tsc_mult)
		return (uint64_t)(((unsigned __int128)d * ls_tsc_mult) >> 32);
	return d;
}

static inline unsigned ls_lat_bucket(uint64_t ns)
{
	unsigned b = 63u - (unsigned)__builtin_clzll(ns | 1);
	return b < LS_LAT_BUCKETS ? b : LS_LAT_BUCKETS - 1;
}

/* Seqlock writer: one op of `type` that took ns (timed) or was only
 * counted, and the worker's cumulative op count n. */
static inline void ls_lat_put(struct ls_ctx *c, int type, bool timed,
			      uint64_t ns, uint64_t n)
{
	struct ls_lat *l = c->lat;
	struct ls_hist *h = &l->h[type];
	uint32_t s = atomic_load_explicit(&l->seq, memory_order_relaxed);

	atomic_store_explicit(&l->seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&h->count,
	    atomic_load_explicit(&h->count, memory_order_relaxed) + 1,
	    memory_order_relaxed);
	if (timed) {
		_Atomic uint64_t *b = &h->b[ls_lat_bucket(ns)];
		atomic_store_explicit(b, atomic_load_explicit(b, memory_order_relaxed)
				      + 1, memory_order_relaxed);
		atomic_store_explicit(&h->sum_ns,
		    atomic_load_explicit(&h->sum_ns, memory_order_relaxed) + ns,
		    memory_order_relaxed);
		if (ns > atomic_load_explicit(&h->max_ns, memory_order_relaxed))
			atomic_store_explicit(&h->max_ns, ns, memory_order_relaxed);
	}
	atomic_store_explicit(c->ops, n, memory_order_relaxed);
	atomic_store_explicit(&l->seq, s + 2, memory_order_release);
}

/* Timing an op costs two clock reads when the ops around it are not timed
 * (one when every op is: the end of one is the start of the next). Ops
 * cheaper than LS_LAT_BUDGET_NS / 100 are sampled, one in lat_every, so
 * that timing adds at most about 1% to them (a read is ~20 ns with the
 * TSC); ops that take longer are all timed. The histogram then holds the
 * timed ops (`timed` in the result), the op count all of them. */
#define LS_LAT_BUDGET_NS 5000
#define LS_LAT_MAX_EVERY 64
#define LS_LAT_ADAPT_N 64

static inline void ls_lat_adapt(struct ls_ctx *c, uint64_t ns)
{
	c->lat_sum += ns;
	if (++c->lat_n == LS_LAT_ADAPT_N) {
		uint64_t mean = c->lat_sum / c->lat_n;
		uint64_t k = mean ? (LS_LAT_BUDGET_NS + mean - 1) / mean : LS_LAT_MAX_EVERY;
		c->lat_every = k < 3 ? 1 : k > LS_LAT_MAX_EVERY ? LS_LAT_MAX_EVERY : (uint32_t)k;
		c->lat_sum = 0;
		c->lat_n = 0;
	}
	if (c->lat_every > 1)
		c->lat_left = c->lat_every - 1;
}

/* The per-op hook of single-operation workloads: n ops done so far. A
 * timed op's latency is the time since the previous op ended (it includes
 * the loop's own few instructions). */
static inline void ls_count(struct ls_ctx *c, uint64_t n)
{
	if (!c->timing) {
		atomic_store_explicit(c->ops, n, memory_order_relaxed);
		return;
	}
	if (c->lat_left) {                      /* counted, not timed */
		ls_lat_put(c, 0, false, 0, n);
		if (--c->lat_left == 0)
			c->t_mark = ls_clock_ns();      /* the next op is timed: it starts now */
		return;
	}
	uint64_t t = ls_clock_ns();
	uint64_t ns = ls_clock_delta_ns(c->t_mark, t);
	c->t_mark = t;
	ls_lat_put(c, 0, true, ns, n);
	ls_lat_adapt(c, ns);
}

/* Multi-operation workloads: ls_op_start() before an op whose start is
 * not the end of the previous one, ls_op(c, type) after each op. */
static inline void ls_op_start(struct ls_ctx *c)
{
	if (c->timing)
		c->t_mark = ls_clock_ns();
}

/* Time since the mark (0 when not timing); the mark moves to now. */
static inline uint64_t ls_op_lap(struct ls_ctx *c)
{
	if (!c->timing)
		return 0;
	uint64_t t = ls_clock_ns();
	uint64_t ns = ls_clock_delta_ns(c->t_mark, t);
	c->t_mark = t;
	return ns;
}

static inline void ls_op(struct ls_ctx *c, int type)
{
	uint64_t ns = ls_op_lap(c);
	ls_lat_put(c, type, c->timing, ns, ++c->nops);
}

/* Like ls_op, for a step that is timed and counted under its type but is
 * not an op of its own (ops counts whole operations, e.g. syncs). */
static inline void ls_op_part(struct ls_ctx *c, int type)
{
	uint64_t ns = ls_op_lap(c);
	ls_lat_put(c, type, c->timing, ns, c->nops);
}

#endif
