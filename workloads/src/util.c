#include "util.h"

#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "grow.h"          /* the loader's growable arrays (../probes) */

uint64_t ls_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int ls_mkdir_ok(const char *path, mode_t mode)
{
	if (mkdir(path, mode) == 0)
		return 0;
	if (errno == EEXIST) {
		struct stat st;
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			return 0;
		errno = EEXIST;
	}
	return -1;
}

int ls_mkdir_p(const char *path, mode_t mode, char *failed, size_t failed_sz)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf)) {
		errno = len ? ENAMETOOLONG : ENOENT;
		goto fail_whole;
	}
	memcpy(buf, path, len + 1);
	while (len > 1 && buf[len - 1] == '/')
		buf[--len] = '\0';
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (ls_mkdir_ok(buf, mode) != 0) {
			int e = errno;
			if (failed)
				snprintf(failed, failed_sz, "%s", buf);
			errno = e;
			return -1;
		}
		*p = '/';
	}
	if (ls_mkdir_ok(buf, mode) == 0)
		return 0;
fail_whole:
	if (failed) {
		int e = errno;
		snprintf(failed, failed_sz, "%s", path);
		errno = e;
	}
	return -1;
}

int ls_pin_process(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

int ls_pin_thread(pthread_t th, int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	int rc = pthread_setaffinity_np(th, sizeof(set), &set);
	if (rc != 0) {
		errno = rc;
		return -1;
	}
	return 0;
}

int ls_allowed_cpus(int *out, int max)
{
	cpu_set_t set;
	int n = 0;

	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return -1;
	for (int c = 0; c < CPU_SETSIZE && n < max; c++)
		if (CPU_ISSET(c, &set))
			out[n++] = c;
	return n;
}

int ls_futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
	return (int)syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, NULL,
			    NULL, 0);
}

int ls_futex_wake(_Atomic uint32_t *addr, int n)
{
	return (int)syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, n, NULL,
			    NULL, 0);
}

int ls_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int ls_pathf(char *out, size_t sz, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, sz, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sz) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

void *ls_xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);
	if (!p) {
		fprintf(stderr, LS_PROG ": error: out of memory\n");
		exit(1);
	}
	return p;
}

void ls_strlist_addf(struct ls_strlist *l, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		fprintf(stderr, LS_PROG ": error: out of memory\n");
		exit(1);
	}
	if (!GROW(l->v, l->cap, l->n, 8)) {
		fprintf(stderr, LS_PROG ": error: out of memory\n");
		exit(1);
	}
	l->v[l->n++] = s;
}

void ls_strlist_free(struct ls_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

/* ------------------------------------------------------ the op clock (shm.h) */

uint64_t ls_tsc_mult; /* 0: ls_clock_ns reads CLOCK_MONOTONIC */

/* Use the TSC for op latencies when the CPU says it is invariant (constant
 * rate, running in every C-state) and the kernel's own clocksource is the
 * TSC; calibrate ns per cycle against CLOCK_MONOTONIC over 20 ms. Any doubt:
 * stay with clock_gettime. */
void ls_tsc_calibrate(void)
{
#if defined(__x86_64__)
	char line[8192], src[64] = "";
	bool constant = false, nonstop = false;
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
	if (f) {
		if (!fgets(src, sizeof(src), f))
			src[0] = 0;
		fclose(f);
	}
	if (strncmp(src, "tsc", 3) != 0)
		return;
	f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		constant = strstr(line, " constant_tsc") != NULL;
		nonstop = strstr(line, " nonstop_tsc") != NULL;
		break;
	}
	fclose(f);
	if (!constant || !nonstop)
		return;
	uint64_t t0 = ls_now_ns(), c0 = __builtin_ia32_rdtsc();
	struct timespec d = { 0, 20000000 };
	while (nanosleep(&d, &d) != 0 && errno == EINTR)
		;
	uint64_t t1 = ls_now_ns(), c1 = __builtin_ia32_rdtsc();
	if (c1 <= c0 || t1 <= t0)
		return;
	ls_tsc_mult = (uint64_t)(((unsigned __int128)(t1 - t0) << 32) / (c1 - c0));
#endif
}

static void (*fatal_cleanup)(void);

void ls_on_fatal(void (*cleanup)(void))
{
	fatal_cleanup = cleanup;
}

void ls_fatal_exit(int code)
{
	if (fatal_cleanup)
		fatal_cleanup();
	exit(code);
}
