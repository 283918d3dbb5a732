// Threads asleep in the C library's blocking calls, for as long as stdin is
// open: one in pthread_cond_wait, one in pthread_mutex_lock of a mutex held
// elsewhere (glibc: __lll_lock_wait), one in pthread_rwlock_wrlock of a
// write-locked rwlock, and the main thread in pthread_join. Each waits from
// a function of its own (wait_on_cond, lock_mutex, lock_rwlock,
// join_holder), so an unwinder of the thread's user stack must get through
// the C library (built without frame pointers on Debian) to them. Used by
// tests/test_unwind.py; each waiter writes one line "name tid" to stdout
// (cond, mutex, rwlock, join).
//
// The holder thread takes the mutex and the write lock, then reads stdin;
// at end of file it lets everyone go and the program exits 0.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t cond_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int released;
static pthread_barrier_t held;

static void say(const char *name)
{
	printf("%s %d\n", name, gettid());
	fflush(stdout);
}

__attribute__((noinline)) static void wait_on_cond(void)
{
	pthread_mutex_lock(&cond_mu);
	while (!released)
		pthread_cond_wait(&cond, &cond_mu);
	pthread_mutex_unlock(&cond_mu);
}

__attribute__((noinline)) static void lock_mutex(void)
{
	pthread_mutex_lock(&mu);
	pthread_mutex_unlock(&mu);
}

__attribute__((noinline)) static void lock_rwlock(void)
{
	pthread_rwlock_wrlock(&rw);
	pthread_rwlock_unlock(&rw);
}

static void *cond_thread(void *arg)
{
	say("cond");
	wait_on_cond();
	return arg;
}

static void *mutex_thread(void *arg)
{
	say("mutex");
	lock_mutex();
	return arg;
}

static void *rwlock_thread(void *arg)
{
	say("rwlock");
	lock_rwlock();
	return arg;
}

static void *holder_thread(void *arg)
{
	char buf[64];

	pthread_mutex_lock(&mu);
	pthread_rwlock_wrlock(&rw);
	pthread_barrier_wait(&held);
	while (read(0, buf, sizeof(buf)) > 0)
		;
	pthread_mutex_unlock(&mu);
	pthread_rwlock_unlock(&rw);
	pthread_mutex_lock(&cond_mu);
	released = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&cond_mu);
	return arg;
}

__attribute__((noinline)) static void join_holder(pthread_t holder)
{
	if (pthread_join(holder, NULL))    /* not a tail call: this frame stays */
		abort();
}

int main(void)
{
	pthread_t holder, waiters[3];
	void *(*fns[3])(void *) = { cond_thread, mutex_thread, rwlock_thread };

	pthread_barrier_init(&held, NULL, 2);
	if (pthread_create(&holder, NULL, holder_thread, NULL))
		return 1;
	pthread_barrier_wait(&held);
	for (int i = 0; i < 3; i++)
		if (pthread_create(&waiters[i], NULL, fns[i], NULL))
			return 1;
	say("join");
	join_holder(holder);
	for (int i = 0; i < 3; i++)
		pthread_join(waiters[i], NULL);
	return 0;
}
