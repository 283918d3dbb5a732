// SPDX-License-Identifier: MIT
/* Kernel text around the waits on static kernel locks (ktext.bpf.c), read
 * when the data event is written: for the first KTEXT_FRAMES return
 * addresses of each such wait's stack, the KTEXT_BYTES before it (the call
 * and the argument set up for it) and, where that is a direct call, the
 * first KTEXT_BYTES of the function called (a wrapper such as rtnl_lock).
 * Emitted as "ktext": {"0xADDR": "hex bytes", ...}; decoded in Python
 * (analyzer/kernel/ktext.py). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "ktext.h"
#include "ktext.skel.h"

#define KTEXT_FRAMES 6         /* return addresses looked at per stack (frame 0 is the lock function) */
#define MAX_KTEXT 512          /* regions read per data event */
#define CALL_REL32 0xe8        /* x86-64: call rel32, 5 bytes */

static struct ktext_bpf *skel;
static char unavailable[160];
static struct ktext_ent regions[MAX_KTEXT];
static unsigned int nregions;
static uint64_t seen[MAX_KTEXT * 4];

int ktext_load(void)
{
	int err;

	skel = ktext_bpf__open_and_load();
	if (!skel) {
		err = -errno;
		not_loaded(unavailable, sizeof(unavailable), "kernel text reader", err);
		return err;
	}
	return 0;
}

/* queue the region at addr unless it was queued before or there is no room */
static void want(__u64 addr)
{
	if (nregions >= MAX_KTEXT || !u64_set_add(seen, MAX_KTEXT * 4, addr))
		return;
	memset(&regions[nregions], 0, sizeof(regions[nregions]));
	regions[nregions++].addr = addr;
}

/* read regions [from, nregions) in batches */
static void read_regions(unsigned int from)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);

	for (unsigned int i = from; i < nregions; i += KTEXT_BATCH) {
		unsigned int n = nregions - i < KTEXT_BATCH ? nregions - i : KTEXT_BATCH;

		memcpy(skel->bss->req, &regions[i], n * sizeof(regions[0]));
		skel->bss->nreq = n;
		if (bpf_prog_test_run_opts(bpf_program__fd(skel->progs.lksc_ktext_read), &opts)) {
			snprintf(unavailable, sizeof(unavailable), "running the kernel text reader failed: %s",
				 strerror(errno));
			return;
		}
		memcpy(&regions[i], skel->bss->req, n * sizeof(regions[0]));
	}
}

static void emit(struct jw *w)
{
	char key[24];

	jw_key(w, "ktext");
	jw_obj(w);
	for (unsigned int i = 0; i < nregions; i++) {
		if (!regions[i].ok)
			continue;
		snprintf(key, sizeof(key), "0x%llx", (unsigned long long)regions[i].addr);
		jw_kbytes(w, key, regions[i].bytes, KTEXT_BYTES);
	}
	jw_obj_end(w);
}

void ktext_json(struct jw *w, int stacks_fd, const struct id_set *stack_ids)
{
	__u64 ips[MAX_STACK_DEPTH];
	unsigned int callers;

	nregions = 0;
	memset(seen, 0, sizeof(seen));
	if (!skel || unavailable[0]) {
		if (unavailable[0])
			jw_kstr(w, "ktext_unavailable", unavailable);
		return;
	}
	for (size_t i = 0; i < stack_ids->n; i++) {
		memset(ips, 0, sizeof(ips));
		if (bpf_map_lookup_elem(stacks_fd, &stack_ids->ids[i], ips))
			continue;
		for (int d = 1; d <= KTEXT_FRAMES && d < MAX_STACK_DEPTH && ips[d] >= KTEXT_STATIC_MIN; d++)
			want(ips[d] - KTEXT_BYTES);
	}
	callers = nregions;
	read_regions(0);
	/* the functions the callers call: a wrapper's own text */
	for (unsigned int i = 0; i < callers; i++) {
		const __u8 *b = regions[i].bytes + KTEXT_BYTES - 5;
		__s32 rel;

		if (!regions[i].ok || b[0] != CALL_REL32)
			continue;
		memcpy(&rel, b + 1, sizeof(rel));
		want(regions[i].addr + KTEXT_BYTES + (__s64)rel);
	}
	read_regions(callers);
	emit(w);
}

void ktext_destroy(void)
{
	ktext_bpf__destroy(skel);
	skel = NULL;
}
