// SPDX-License-Identifier: MIT
/* The optional probes, loaded after the core ones (contention.bpf.c, the
 * object iterators): futex waits (futex.c), then per-thread times and
 * wake-ups (tasks.c), which read futex.bpf.c's open waits, and slab caches
 * (kmem.c), with the futex waits Go sync.Mutex waits (gomutex.c), and application lock waits
 * from USDT probes (usdt.c, attached later, by command, to the binaries the probe table names).
 * Each may fail to load without failing lockscope-probe: the data
 * event says why it is missing. */
#include <stdbool.h>
#include "futex.h"
#include "tasks.h"
#include "kmem.h"
#include "gomutex.h"
#include "usdt.h"
#include "optional.h"

void optional_load(bool system_wide, bool futex, int tracked_fd, int ncpus)
{
	if (futex) {
		futex_load(system_wide, tracked_fd, ncpus);
		gomutex_load(ncpus);
	}
	tasks_load(system_wide, tracked_fd, futex_open_fd(), ncpus);
	kmem_load();          /* without it, slab locks are not resolved */
	usdt_load(system_wide, tracked_fd, ncpus);
}

void optional_destroy(void)
{
	tasks_destroy();
	futex_destroy();
	kmem_destroy();
	gomutex_destroy();
	usdt_destroy();
}
