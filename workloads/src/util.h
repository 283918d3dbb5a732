/* Small helpers: time, directories, CPU pinning, futexes, string lists. */
#ifndef LS_UTIL_H
#define LS_UTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define LS_PROG "lockscope-workload"

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t ls_now_ns(void);
static inline double ls_ns_to_s(uint64_t ns) { return (double)ns / 1e9; }

/* mkdir that accepts an already existing directory. 0 or -1/errno. */
int ls_mkdir_ok(const char *path, mode_t mode);
/* mkdir -p. On failure returns -1, sets errno and copies the path that
 * failed into failed (if non-NULL, size failed_sz). */
int ls_mkdir_p(const char *path, mode_t mode, char *failed, size_t failed_sz);

/* Pin the calling process (sched_setaffinity(0)) / thread. 0 or -1/errno. */
int ls_pin_process(int cpu);
int ls_pin_thread(pthread_t th, int cpu);
/* CPUs the calling process may run on, ascending. Returns count or -1. */
int ls_allowed_cpus(int *out, int max);

/* Process-shared futex on a 32-bit word (works across fork on
 * MAP_SHARED memory). */
int ls_futex_wait(_Atomic uint32_t *addr, uint32_t val);
int ls_futex_wake(_Atomic uint32_t *addr, int n);

/* write(2) the whole buffer, retrying on EINTR/short writes. */
int ls_write_all(int fd, const void *buf, size_t len);

/* snprintf that reports truncation: 0 or -1 (errno = ENAMETOOLONG). */
int ls_pathf(char *out, size_t sz, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Growable list of owned strings. */
struct ls_strlist {
	char **v;
	size_t n, cap;
};
void ls_strlist_addf(struct ls_strlist *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void ls_strlist_free(struct ls_strlist *l);

/* Leaving on a fatal error: ls_fatal_exit(code) runs the one cleanup
 * registered with ls_on_fatal (the driver's: kill and reap the workers), then
 * exit(code). A file that meets a fatal error needs no knowledge of what
 * there is to clean up. */
void ls_on_fatal(void (*cleanup)(void));
__attribute__((noreturn)) void ls_fatal_exit(int code);

/* Allocation that aborts (with a message) on OOM. */
void *ls_xcalloc(size_t n, size_t sz);

#endif
