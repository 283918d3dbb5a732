#include "lat.h"

#include <sched.h>
#include <stdbool.h>
#include <string.h>

#include "util.h"

/* how long a worker may stay inside one histogram update before its
 * values are read anyway */
#define LAT_STUCK_NS 2000000000ull

void lat_snap_init(struct lat_snap *s, int nworkers)
{
	memset(s, 0, sizeof(*s));
	s->ops = ls_xcalloc((size_t)nworkers, sizeof(*s->ops));
}

static struct ls_lat *lat_of(struct ls_shm *shm, int w)
{
	return (struct ls_lat *)(shm->lat + (size_t)w * shm->lat_stride);
}

void lat_take(struct ls_shm *shm, int nworkers, struct lat_snap *s)
{
	const int nops = shm->nops;
	struct lat_agg one[LS_MAX_OPTYPES];

	for (int k = 0; k < nops; k++) {
		memset(&s->a[k], 0, sizeof(s->a[k]));
	}
	for (int w = 0; w < nworkers; w++) {
		struct ls_lat *l = lat_of(shm, w);
		uint64_t ops, odd_since = 0;
		for (unsigned tries = 0;; tries++) {
			uint32_t s1 = atomic_load_explicit(&l->seq, memory_order_acquire);
			/* Odd: the worker is inside its update. It may be preempted
			 * there (wait), or have died there (a killed process): after
			 * LAT_STUCK_NS take the values as they are, off by at most the
			 * one op being recorded, rather than spin forever. */
			bool stuck = false;
			if (s1 & 1) {
				if (tries > 64) {
					uint64_t now = ls_now_ns();
					if (!odd_since)
						odd_since = now;
					stuck = now - odd_since > LAT_STUCK_NS;
					if (!stuck)
						sched_yield();
				}
				if (!stuck)
					continue;
			}
			ops = atomic_load_explicit(&shm->counters[w].ops,
						   memory_order_relaxed);
			for (int k = 0; k < nops; k++) {
				struct ls_hist *h = &l->h[k];
				one[k].count = atomic_load_explicit(&h->count,
								    memory_order_relaxed);
				one[k].sum_ns = atomic_load_explicit(&h->sum_ns,
								     memory_order_relaxed);
				for (int b = 0; b < LS_LAT_BUCKETS; b++)
					one[k].b[b] = atomic_load_explicit(&h->b[b],
									   memory_order_relaxed);
			}
			atomic_thread_fence(memory_order_acquire);
			if (stuck || atomic_load_explicit(&l->seq, memory_order_relaxed) == s1)
				break;
		}
		s->ops[w] = ops;
		for (int k = 0; k < nops; k++) {
			struct lat_agg *a = &s->a[k];
			/* A sample racing with this exchange lands in either interval. */
			uint64_t m = atomic_exchange_explicit(&l->h[k].max_ns, 0,
							      memory_order_relaxed);
			a->count += one[k].count;
			a->sum_ns += one[k].sum_ns;
			for (int b = 0; b < LS_LAT_BUCKETS; b++)
				a->b[b] += one[k].b[b];
			if (m > a->max_ns)
				a->max_ns = m;
		}
	}
	s->t_ns = ls_now_ns();
}

void lat_diff(const struct lat_snap *s0, const struct lat_snap *s1, int k,
	      struct lat_agg *out)
{
	const struct lat_agg *a = &s0->a[k], *b = &s1->a[k];
	out->count = b->count - a->count;
	out->sum_ns = b->sum_ns - a->sum_ns;
	out->max_ns = b->max_ns;
	for (int i = 0; i < LS_LAT_BUCKETS; i++)
		out->b[i] = b->b[i] - a->b[i];
}

static int top_bucket(const struct lat_agg *a)
{
	for (int i = LS_LAT_BUCKETS - 1; i >= 0; i--)
		if (a->b[i])
			return i;
	return -1;
}

/* The max is taken separately from the buckets; keep them consistent. */
static uint64_t agg_max(const struct lat_agg *a)
{
	int t = top_bucket(a);
	uint64_t lo = t <= 0 ? 0 : 1ull << t;
	return a->max_ns > lo ? a->max_ns : lo;
}

uint64_t lat_quantile(const struct lat_agg *a, double q)
{
	uint64_t n = 0;
	for (int i = 0; i < LS_LAT_BUCKETS; i++)
		n += a->b[i];
	if (n == 0)
		return 0;
	uint64_t rank = (uint64_t)(q * (double)n);
	if ((double)rank < q * (double)n)
		rank++;
	if (rank < 1)
		rank = 1;
	uint64_t cum = 0, max = agg_max(a);
	for (int i = 0; i < LS_LAT_BUCKETS; i++) {
		if (a->b[i] == 0 || cum + a->b[i] < rank) {
			cum += a->b[i];
			continue;
		}
		double lo = i == 0 ? 0.0 : (double)(1ull << i);
		double hi = (double)(1ull << (i + 1));
		double v = lo + (hi - lo) * (double)(rank - cum) / (double)a->b[i];
		uint64_t r = (uint64_t)v;
		return r < max ? r : max;
	}
	return max;
}

void lat_emit(struct jw *w, const struct lat_agg *a, bool buckets)
{
	uint64_t timed = 0;
	for (int i = 0; i < LS_LAT_BUCKETS; i++)
		timed += a->b[i];
	jw_obj(w);
	jw_ku64(w, "count", a->count);     /* ops of this type */
	jw_ku64(w, "timed", timed);        /* of which timed (in the buckets) */
	jw_ku64(w, "mean_ns", timed ? a->sum_ns / timed : 0);
	jw_ku64(w, "p50_ns", lat_quantile(a, 0.50));
	jw_ku64(w, "p99_ns", lat_quantile(a, 0.99));
	jw_ku64(w, "max_ns", timed ? agg_max(a) : 0);
	if (buckets) {
		jw_key(w, "buckets");
		jw_arr(w);
		int t = top_bucket(a);
		for (int i = 0; i <= t; i++)
			jw_u64(w, a->b[i]);
		jw_arr_end(w);
	}
	jw_obj_end(w);
}
