#include "mmbench.h"

#include <errno.h>
#include <sys/mman.h>

#define MAP_UNIT 4096

void mm_mmap_run(struct ls_ctx *c)
{
	uint64_t n = 0;

	while (!ls_stopped(c)) {
		void *p = mmap(NULL, MAP_UNIT, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			ls_fail(c, "mmap", NULL, NULL, errno, NULL);
		if (munmap(p, MAP_UNIT) != 0)
			ls_fail(c, "munmap", NULL, NULL, errno, NULL);
		ls_count(c, ++n);
	}
}
