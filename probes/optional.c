// SPDX-License-Identifier: MIT
/* The optional probes, loaded after the core ones (contention.bpf.c, the
 * object iterators): futex waits (futex.c: contention.bpf.c's, loaded with
 * it with --futex), then wake-ups and the per-thread times' iterator
 * (tasks.c), which read contention.bpf.c's open futex waits and per-thread
 * times, and slab caches
 * (kmem.c), the kernel text around waits on globals (ktext.c), with the futex waits Go sync.Mutex waits (gomutex.c), and application lock waits
 * from USDT probes (usdt.c, attached later, by command, to the binaries the probe table names),
 * and file-lock waits (filelocks.c).
 * Each may fail to load without failing lockscope-probe: the data
 * event says why it is missing.
 *
 * Each load parses the kernel's BTF (~0.1 s here) and waits for the
 * verifier; the loads only set their own state (what they print comes
 * later), so optional_begin starts the longest, USDT's, in a thread of its
 * own while the caller loads the object iterators and optional_end the
 * rest, and optional_end waits for it (the loader's time to ready:
 * bench/README.md, "The loader ready sooner"). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <bpf/libbpf.h>
#include "contention.skel.h"
#include "futex.h"
#include "tasks.h"
#include "kmem.h"
#include "ktext.h"
#include "gomutex.h"
#include "usdt.h"
#include "filelocks.h"
#include "optional.h"

static struct contention_bpf *core;

/* a USDT probe is attached: the waits it names are looked for at switch-out
 * (contention.bpf.c) and wake-up (tasks.bpf.c) from now on */
static void usdt_on(void)
{
	if (core)
		core->bss->usdt_on = true;
	tasks_usdt_on();
}

struct loads {
	bool system_wide;
	int tracked_fd, ncpus;
};
static struct loads args;
static pthread_t other;
static bool other_running;

/* USDT waits: the longest to verify (~0.25 s here, as long as all the others together) */
static void *load_usdt(void *unused)
{
	(void)unused;
	usdt_load(args.system_wide, args.tracked_fd, bpf_map__fd(core->maps.usdt_waiting), args.ncpus, usdt_on);
	return NULL;
}

void optional_begin(struct contention_bpf *cskel, bool system_wide, bool futex, int ncpus)
{
	core = cskel;
	args = (struct loads){ .system_wide = system_wide, .tracked_fd = bpf_map__fd(cskel->maps.tracked),
			       .ncpus = ncpus };
	if (futex)
		futex_init(cskel, ncpus);
	other_running = pthread_create(&other, NULL, load_usdt, NULL) == 0;
	if (!other_running)      /* no thread: loaded here, before the others */
		load_usdt(NULL);
}

void optional_end(bool futex)
{
	struct contention_bpf *cskel = core;

	tasks_load(args.system_wide, args.tracked_fd, bpf_map__fd(cskel->maps.task_times),
		   bpf_map__fd(cskel->maps.task_counters), futex_open_fd(), bpf_map__fd(cskel->maps.tstate),
		   bpf_map__fd(cskel->maps.usdt_waiting), bpf_map__fd(cskel->maps.usdt_held),
		   bpf_map__fd(cskel->maps.flk_open), args.ncpus);
	if (futex)
		gomutex_load(args.ncpus);
	kmem_load();          /* without it, slab locks are not resolved */
	ktext_load();         /* without it, globals taken through wrappers stay call sites */
	filelocks_load(args.system_wide, cskel, args.ncpus);  /* without it, file-lock sleeps stay off-CPU time */
	if (other_running)
		pthread_join(other, NULL);
	other_running = false;
}

void optional_destroy(void)
{
	core = NULL;
	tasks_destroy();
	futex_destroy();
	kmem_destroy();
	ktext_destroy();
	gomutex_destroy();
	usdt_destroy();
	filelocks_destroy();
}
