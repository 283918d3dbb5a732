// SQLite writers with a busy handler of their own, which times every call:
// the independent clock of SQLite's busy waits for lockscope's file-lock
// tests (issue 44).
//
//	sqlbusy N HOLD_US SECONDS DB CLOCK_FILE [procs|threads]
//
// N writers (processes by default, each with its own connection), loop:
// BEGIN IMMEDIATE (the database's write lock), insert a row, spin HOLD_US,
// COMMIT, spin HOLD_US / 4. A writer that finds the lock held gets
// SQLITE_BUSY inside and calls its busy handler, busy(): it sleeps 200 us
// (usleep) and asks for a retry; each call is timed. Processes find the lock
// held in the kernel (SQLite's F_SETLK on the database's lock bytes fails);
// threads of one process find it held inside SQLite (its per-inode lock
// table), without a system call. The parent waits for its workers
// (waitpid, or joins its threads). Prints "ops: N" every 0.1 s, then
// "ops/s: X"; CLOCK_FILE gets {"busy_s": S, "busy_share": B,
// "begin_share": W}: the writers' time in busy() (seconds, and over their
// running time) and inside BEGIN IMMEDIATE (over their running time).
#define _GNU_SOURCE
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct totals {                 /* shared by the writers (an anonymous shared mapping) */
	atomic_ullong ops, busy_ns, begin_ns, run_ns;
};

static struct totals *tot;
static const char *db_path;
static int hold_us;
static double deadline;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void spin_us(int us)
{
	struct timespec ts;
	double end;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	end = ts.tv_sec + ts.tv_nsec / 1e9 + us / 1e6;
	do
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
}

/* the busy handler: every call timed (the program's clock of its busy waits) */
static int busy(void *arg, int calls)
{
	double t0 = now_s();

	(void)arg;
	(void)calls;
	usleep(200);
	atomic_fetch_add(&tot->busy_ns, (unsigned long long)((now_s() - t0) * 1e9));
	return 1;
}

static void must(int rc, sqlite3 *db, const char *what)
{
	if (rc != SQLITE_OK) {
		fprintf(stderr, "sqlbusy: %s: %s\n", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		exit(1);
	}
}

static void *writer(void *arg)
{
	double start = now_s(), t0;
	sqlite3 *db;

	(void)arg;
	must(sqlite3_open(db_path, &db), NULL, db_path);
	must(sqlite3_busy_handler(db, busy, NULL), db, "sqlite3_busy_handler");
	while (now_s() < deadline) {
		t0 = now_s();
		must(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), db, "BEGIN IMMEDIATE");
		atomic_fetch_add(&tot->begin_ns, (unsigned long long)((now_s() - t0) * 1e9));
		must(sqlite3_exec(db, "INSERT INTO t (v) VALUES (1)", NULL, NULL, NULL), db, "INSERT");
		spin_us(hold_us);
		must(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), db, "COMMIT");
		atomic_fetch_add(&tot->ops, 1);
		spin_us(hold_us / 4);
	}
	atomic_fetch_add(&tot->run_ns, (unsigned long long)((now_s() - start) * 1e9));
	sqlite3_close(db);
	return NULL;
}

static void *progress(void *arg)
{
	(void)arg;
	while (now_s() < deadline) {
		usleep(100000);
		printf("ops: %llu\n", (unsigned long long)atomic_load(&tot->ops));
		fflush(stdout);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0, threads = argc > 6 && strcmp(argv[6], "threads") == 0;
	pthread_t tid[64], prog;
	double start;
	sqlite3 *db;
	FILE *f;

	if (argc < 6 || n < 1 || n > 64) {
		fprintf(stderr, "usage: sqlbusy N HOLD_US SECONDS DB CLOCK_FILE [procs|threads]\n");
		return 2;
	}
	hold_us = atoi(argv[2]);
	db_path = argv[4];
	tot = mmap(NULL, sizeof(*tot), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (tot == MAP_FAILED)
		return perror("mmap"), 1;
	must(sqlite3_open(db_path, &db), NULL, db_path);
	must(sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS t (v INTEGER)", NULL, NULL, NULL), db, "CREATE TABLE");
	sqlite3_close(db);
	start = now_s();
	deadline = start + atof(argv[3]);
	pthread_create(&prog, NULL, progress, NULL);
	for (int i = 0; i < n; i++) {
		if (threads) {
			pthread_create(&tid[i], NULL, writer, NULL);
		} else if (fork() == 0) {
			writer(NULL);
			_exit(0);
		}
	}
	for (int i = 0; i < n; i++)
		threads ? pthread_join(tid[i], NULL) : wait(NULL);
	pthread_join(prog, NULL);
	printf("ops/s: %.1f\n", atomic_load(&tot->ops) / (now_s() - start));
	f = fopen(argv[5], "w");
	if (!f)
		return perror(argv[5]), 1;
	fprintf(f, "{\"busy_s\": %.4f, \"busy_share\": %.4f, \"begin_share\": %.4f}\n",
		atomic_load(&tot->busy_ns) / 1e9, (double)atomic_load(&tot->busy_ns) / atomic_load(&tot->run_ns),
		(double)atomic_load(&tot->begin_ns) / atomic_load(&tot->run_ns));
	fclose(f);
	return 0;
}
