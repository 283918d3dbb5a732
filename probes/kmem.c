// SPDX-License-Identifier: MIT
/* Slab caches of contended lock addresses (kmem.bpf.c): resolved while the
 * run goes on, at each object snapshot, so that the objects still exist. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "probe.h"
#include "jsonw.h"
#include "bpfutil.h"
#include "kmem.h"
#include "kmem.skel.h"

#define MAX_KMEM 4096

static struct kmem_bpf *skel;
static char unavailable[160];        /* why slab resolution is off; "" if on */
static struct kmem_ent found[MAX_KMEM];
static unsigned int nfound;
/* addresses already asked in this window (found or not): open addressing,
 * half full at most; 0 is empty (no lock lives at address 0) */
#define ASKED_SLOTS (MAX_KMEM * 4)
static uint64_t asked[ASKED_SLOTS];
static unsigned int nasked;

int kmem_load(void)
{
	int err;

	skel = kmem_bpf__open();
	if (!skel) {
		snprintf(unavailable, sizeof(unavailable), "cannot open the slab program: %s", strerror(errno));
		return -errno;
	}
	skel->rodata->page_size = (__u64)sysconf(_SC_PAGESIZE);
	err = kmem_bpf__load(skel);
	if (err) {
		snprintf(unavailable, sizeof(unavailable),
			 "this kernel does not let the slab program load (bpf_get_kmem_cache kfunc, Linux 6.13+): %s",
			 strerror(-err));
		kmem_bpf__destroy(skel);
		skel = NULL;
		return err;
	}
	return 0;
}

void kmem_reset(void)
{
	nfound = nasked = 0;
	memset(asked, 0, sizeof(asked));
}

/* true if addr was asked before; else remembers it */
static bool was_asked(__u64 addr)
{
	if (!u64_set_add(asked, ASKED_SLOTS, addr))
		return true;
	nasked++;
	return false;
}

static void run_batch(unsigned int n)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);

	skel->bss->nreq = n;
	if (bpf_prog_test_run_opts(bpf_program__fd(skel->progs.lksc_kmem_resolve), &opts)) {
		snprintf(unavailable, sizeof(unavailable), "running the slab program failed: %s", strerror(errno));
		return;
	}
	for (unsigned int i = 0; i < n && nfound < MAX_KMEM; i++)
		if (skel->bss->req[i].cache)
			found[nfound++] = skel->bss->req[i];
}

void kmem_resolve_map(int fd)
{
	struct lock_key key, *prev = NULL;
	unsigned int n = 0;

	if (!skel || unavailable[0])
		return;
	while (bpf_map_get_next_key(fd, prev, &key) == 0) {
		prev = &key;
		if (nasked >= ASKED_SLOTS / 2)
			break;
		if (!key.lock || was_asked(key.lock))
			continue;
		memset(&skel->bss->req[n], 0, sizeof(skel->bss->req[n]));
		skel->bss->req[n++].addr = key.lock;
		if (n == KMEM_BATCH) {
			run_batch(n);
			n = 0;
		}
	}
	if (n)
		run_batch(n);
}

void kmem_json(struct jw *w)
{
	jw_key(w, "slab");
	jw_obj(w);
	jw_kstr(w, "status", unavailable[0] ? "unavailable" : "ok");
	if (unavailable[0])
		jw_kstr(w, "reason", unavailable);
	jw_key(w, "entries");
	jw_arr(w);
	for (unsigned int i = 0; i < nfound; i++)
		EMIT_ROW_SLAB_ENTRIES(w, &found[i]);
	jw_arr_end(w);
	jw_obj_end(w);
}

void kmem_destroy(void)
{
	kmem_bpf__destroy(skel);
	skel = NULL;
}
