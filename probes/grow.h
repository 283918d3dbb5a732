/* SPDX-License-Identifier: MIT */
/* The loader's growable arrays: one way to make room (the capacity doubles,
 * from a first size per array), instead of a copy of the realloc dance at
 * every array. */
#ifndef LOCKSCOPE_GROW_H
#define LOCKSCOPE_GROW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* the capacity that holds `need` elements: `cap` doubled (from `first` when
 * 0) until it does */
static inline size_t grow_capacity(size_t cap, size_t need, size_t first)
{
	size_t c = cap ? cap : (first ? first : 1);

	while (c < need)
		c *= 2;
	return c;
}

/* room for `need` elements in the array `arr` of capacity `cap` (both
 * lvalues, updated): true, or false when memory ran out (then both are left
 * as they were, the array still valid) */
#define GROW_TO(arr, cap, need, first) ({					\
	bool ok_ = true;							\
	size_t need_ = (need);							\
	if (need_ > (cap)) {							\
		size_t c_ = grow_capacity((cap), need_, (first));		\
		__typeof__(arr) p_ = realloc((arr), c_ * sizeof(*(arr)));	\
		if (p_) {							\
			(arr) = p_;						\
			(cap) = c_;						\
		} else {							\
			ok_ = false;						\
		}								\
	}									\
	ok_; })

/* room for one more element after the `n` in use */
#define GROW(arr, cap, n, first) GROW_TO(arr, cap, (size_t)(n) + 1, first)

#endif
