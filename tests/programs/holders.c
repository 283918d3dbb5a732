// Holders with a known split (tests/test_holders.py): THREADS threads
// (argv[1]) take one global pthread mutex, `ledger_lock`, for SECONDS
// (argv[2]), in one of two functions, by MODE (argv[3]):
//   split: three calls in four through post_entry (a short critical
//          section), one in four through settle_batch (a long one);
//   sync:  append_record holds it for a little work and, one call in eight,
//          calls fdatasync() on a file (argv[4]: its directory) while still
//          holding it (flush_journal);
//   chain: THREADS auditors take `books_lock` and, holding it, the ledger
//          (audit_books), while one more thread flushes under the ledger all
//          the time (flush_journal): the auditors wait on books_lock, whose
//          holders wait on ledger_lock, whose holder sleeps in fdatasync.
//   rw:    a reader-writer lock, `catalog_lock` (pthread_rwlock): seven calls
//          in eight read under it briefly (lookup_entry), one in eight
//          rewrites under its write lock for long (rebuild_catalog).
//          Its clock also times each wait for the lock (a try that failed,
//          then the blocking call) and charges it to the function whose
//          release was the first after the wait began: with 2 threads, the
//          other thread's, the release that woke the waiter. That is the
//          quantity lockscope's holders measure (wait ended by a release,
//          by the releasing site).
// The program's own clock: each critical section's length is measured from
// lock acquired to just before the unlock, added up per function; at exit
// it prints one JSON line {"hold_ns": {"post_entry": N, ...}, "calls": {...},
// "sync_ns": N, "wait_ns_by_releaser": {...}} (sync_ns: the time inside
// fdatasync, under the lock; wait_ns_by_releaser: rw mode's waits), to
// stdout, or to the file $HOLDERS_OUT when set; and "ops/s: N" (critical
// sections per second) to stderr, for --throughput-regex.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t ledger_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t books_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_rwlock_t catalog_lock = PTHREAD_RWLOCK_INITIALIZER;

enum { POST, SETTLE, APPEND, FLUSH, AUDIT, LOOKUP, REBUILD, NFUNCS };
static const char *names[NFUNCS] = { "post_entry", "settle_batch", "append_record", "flush_journal",
				     "audit_books", "lookup_entry", "rebuild_catalog" };
enum mode { SPLIT, SYNC, CHAIN, RW };
static unsigned long long hold_ns[NFUNCS], calls[NFUNCS], sync_ns, wait_by[NFUNCS];
/* rw: catalog_lock's releases in order, by function (the ring: the last
 * RELEASES of them) */
#define RELEASES 4096
static unsigned long release_seq;
static int release_site[RELEASES];
static volatile int stop;
static int fd = -1;
static char block[4096];

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void spin(int n)
{
	for (volatile int i = 0; i < n; i++)
		;
}

/* after an unlock that ends a function: the compiler may not turn the
 * unlock into a tail call, which would leave no frame of the function that
 * released the lock on the stack (its caller would be the release site) */
#define NO_TAIL_CALL() __asm__ volatile("" ::: "memory")

/* called with the lock held, since t0 */
static void account(int f, unsigned long long t0)
{
	hold_ns[f] += now_ns() - t0;
	calls[f]++;
}

__attribute__((noinline)) static void post_entry(void)
{
	pthread_mutex_lock(&ledger_lock);
	unsigned long long t0 = now_ns();
	spin(1000);
	account(POST, t0);
	pthread_mutex_unlock(&ledger_lock);
	NO_TAIL_CALL();
}

__attribute__((noinline)) static void settle_batch(void)
{
	pthread_mutex_lock(&ledger_lock);
	unsigned long long t0 = now_ns();
	spin(20000);
	account(SETTLE, t0);
	pthread_mutex_unlock(&ledger_lock);
	NO_TAIL_CALL();
}

__attribute__((noinline)) static void append_record(void)
{
	pthread_mutex_lock(&ledger_lock);
	unsigned long long t0 = now_ns();
	spin(1000);
	if (write(fd, block, sizeof(block)) < 0)
		perror("write");
	account(APPEND, t0);
	pthread_mutex_unlock(&ledger_lock);
	NO_TAIL_CALL();
}

__attribute__((noinline)) static void flush_journal(void)
{
	pthread_mutex_lock(&ledger_lock);
	unsigned long long t0 = now_ns();
	if (write(fd, block, sizeof(block)) < 0)
		perror("write");
	unsigned long long s0 = now_ns();
	fdatasync(fd);
	sync_ns += now_ns() - s0;
	account(FLUSH, t0);
	pthread_mutex_unlock(&ledger_lock);
	NO_TAIL_CALL();
}

/* books_lock held (its hold time counted) while it waits for the ledger */
__attribute__((noinline)) static void audit_books(void)
{
	pthread_mutex_lock(&books_lock);
	unsigned long long t0 = now_ns();
	pthread_mutex_lock(&ledger_lock);
	spin(1000);
	pthread_mutex_unlock(&ledger_lock);
	account(AUDIT, t0);
	pthread_mutex_unlock(&books_lock);
	NO_TAIL_CALL();
}

/* rw: take catalog_lock for reading or writing; a wait (the try failed) is
 * timed and charged to the function that released the lock last */
static inline __attribute__((always_inline)) void catalog_take(int writer)
{
	unsigned long seq = __atomic_load_n(&release_seq, __ATOMIC_ACQUIRE);
	unsigned long long w0;
	int site;

	if ((writer ? pthread_rwlock_trywrlock : pthread_rwlock_tryrdlock)(&catalog_lock) == 0)
		return;
	w0 = now_ns();
	(writer ? pthread_rwlock_wrlock : pthread_rwlock_rdlock)(&catalog_lock);
	/* the first release since the try: the one that let this wait end */
	site = __atomic_load_n(&release_site[seq % RELEASES], __ATOMIC_RELAXED);
	__atomic_add_fetch(&wait_by[site], now_ns() - w0, __ATOMIC_RELAXED);
}

/* rw: a release of catalog_lock by function f, in the order of releases
 * (inlined: the unlock is f's, its release site) */
static inline __attribute__((always_inline)) void catalog_release(int f)
{
	unsigned long seq = __atomic_fetch_add(&release_seq, 1, __ATOMIC_ACQ_REL);

	__atomic_store_n(&release_site[seq % RELEASES], f, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&catalog_lock);
}

/* readers overlap: each reader's hold is added to the readers' total */
__attribute__((noinline)) static void lookup_entry(void)
{
	catalog_take(0);
	unsigned long long t0 = now_ns();
	spin(1000);
	unsigned long long t1 = now_ns();
	__atomic_add_fetch(&hold_ns[LOOKUP], t1 - t0, __ATOMIC_RELAXED);
	__atomic_add_fetch(&calls[LOOKUP], 1, __ATOMIC_RELAXED);
	catalog_release(LOOKUP);
	NO_TAIL_CALL();
}

__attribute__((noinline)) static void rebuild_catalog(void)
{
	catalog_take(1);
	unsigned long long t0 = now_ns();
	spin(20000);
	account(REBUILD, t0);
	catalog_release(REBUILD);
	NO_TAIL_CALL();
}

static void *worker(void *arg)
{
	enum mode mode = (enum mode)(long)arg;

	for (unsigned long i = 0; !stop; i++) {
		if (mode == SYNC)
			(i % 8 == 7) ? flush_journal() : append_record();
		else if (mode == CHAIN)
			audit_books();
		else if (mode == RW)
			(i % 8 == 7) ? rebuild_catalog() : lookup_entry();
		else
			(i % 4 == 3) ? settle_batch() : post_entry();
		spin(300);
	}
	return NULL;
}

static void *flusher(void *arg)
{
	(void)arg;
	while (!stop) {
		flush_journal();
		spin(300);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	double seconds = argc > 2 ? atof(argv[2]) : 3;
	enum mode mode = argc <= 3 ? SPLIT : strcmp(argv[3], "sync") == 0 ? SYNC :
			 strcmp(argv[3], "chain") == 0 ? CHAIN : strcmp(argv[3], "rw") == 0 ? RW : SPLIT;
	pthread_t tid[65];
	char path[4096];

	if (threads < 1 || threads > 64)
		threads = 4;
	if (mode == SYNC || mode == CHAIN) {
		snprintf(path, sizeof(path), "%s/holders.journal", argc > 4 ? argv[4] : ".");
		fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
		if (fd < 0) {
			perror(path);
			return 1;
		}
	}
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, worker, (void *)(long)mode);
	if (mode == CHAIN)
		pthread_create(&tid[threads], NULL, flusher, NULL);
	usleep((useconds_t)(seconds * 1e6));
	stop = 1;
	for (int i = 0; i < threads + (mode == CHAIN); i++)
		pthread_join(tid[i], NULL);
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	{
		unsigned long long n = 0;

		for (int f = 0; f < NFUNCS; f++)
			n += calls[f];
		fprintf(stderr, "ops/s: %.0f\n", n / seconds);
	}
	if (getenv("HOLDERS_OUT") && !freopen(getenv("HOLDERS_OUT"), "w", stdout)) {
		perror(getenv("HOLDERS_OUT"));
		return 1;
	}
	printf("{\"hold_ns\": {");
	for (int f = 0, first = 1; f < NFUNCS; f++)
		if (calls[f]) {
			printf("%s\"%s\": %llu", first ? "" : ", ", names[f], hold_ns[f]);
			first = 0;
		}
	printf("}, \"calls\": {");
	for (int f = 0, first = 1; f < NFUNCS; f++)
		if (calls[f]) {
			printf("%s\"%s\": %llu", first ? "" : ", ", names[f], calls[f]);
			first = 0;
		}
	printf("}, \"wait_ns_by_releaser\": {");
	for (int f = 0, first = 1; f < NFUNCS; f++)
		if (wait_by[f]) {
			printf("%s\"%s\": %llu", first ? "" : ", ", names[f], wait_by[f]);
			first = 0;
		}
	printf("}, \"sync_ns\": %llu}\n", sync_ns);
	return 0;
}
