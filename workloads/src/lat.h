/* Driver side of the latency histograms: consistent snapshots of every
 * worker's counters, window/interval differences, percentiles, JSON. */
#ifndef LS_LAT_H
#define LS_LAT_H

#include "jsonw.h"
#include "shm.h"

/* Sum over workers of one operation type. */
struct lat_agg {
	uint64_t count, sum_ns, max_ns;
	uint64_t b[LS_LAT_BUCKETS];
};

struct lat_snap {
	uint64_t t_ns;
	uint64_t *ops;                     /* [nworkers] cumulative ops */
	struct lat_agg a[LS_MAX_OPTYPES];  /* cumulative; max_ns: since the
					      previous snapshot only */
};

void lat_snap_init(struct lat_snap *s, int nworkers);

/* Read every worker's op count and histograms (seqlock-consistent per
 * worker) and take (reset) their maxima. */
void lat_take(struct ls_shm *shm, int nworkers, struct lat_snap *s);

/* out = s1 - s0 for type k (max_ns = s1's: the max since s0). */
void lat_diff(const struct lat_snap *s0, const struct lat_snap *s1, int k,
	      struct lat_agg *out);

/* Latency at quantile q (0..1) estimated from the buckets: linear inside
 * the bucket that holds the rank, never above max_ns. 0 if empty. */
uint64_t lat_quantile(const struct lat_agg *a, double q);

/* {"count":..,"mean_ns":..,"p50_ns":..,"p99_ns":..,"max_ns":..
 *  [,"buckets":[..]]} (buckets up to the last non-empty one). */
void lat_emit(struct jw *w, const struct lat_agg *a, bool buckets);

#endif
