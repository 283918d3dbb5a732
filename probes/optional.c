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
 * event says why it is missing. */
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

void optional_load(struct contention_bpf *cskel, bool system_wide, bool futex, int ncpus)
{
	int tracked_fd = bpf_map__fd(cskel->maps.tracked);

	core = cskel;
	if (futex) {
		futex_init(cskel, ncpus);
		gomutex_load(ncpus);
	}
	tasks_load(system_wide, tracked_fd, bpf_map__fd(cskel->maps.task_times), bpf_map__fd(cskel->maps.task_counters),
		   futex_open_fd(), bpf_map__fd(cskel->maps.tstate), bpf_map__fd(cskel->maps.usdt_waiting),
		   bpf_map__fd(cskel->maps.usdt_held), ncpus);
	kmem_load();          /* without it, slab locks are not resolved */
	ktext_load();         /* without it, globals taken through wrappers stay call sites */
	usdt_load(system_wide, tracked_fd, bpf_map__fd(cskel->maps.usdt_waiting), ncpus, usdt_on);
	filelocks_load(system_wide, tracked_fd, ncpus);   /* without it, file-lock sleeps stay off-CPU time */
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
