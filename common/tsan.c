/*
 * ThreadSanitizer builds only (--enable-tsan). librdkafka makes its
 * threads, mutexes and condition variables with C11 <threads.h>, and
 * glibc implements those by calling its pthread functions internally,
 * where TSan's interceptors do not see them (GCC 12's runtime has no
 * C11 ones): its threads then crash in the TSan allocator, and its locks
 * order nothing. Defined here, in the program, these take precedence over
 * libc's for librdkafka and go through the intercepted pthread calls.
 * glibc's C11 types are its pthread types (thrd_t is pthread_t, mtx_t and
 * cnd_t share the layout of pthread_mutex_t and pthread_cond_t,
 * once_flag that of pthread_once_t). The link keeps this object with
 * -Wl,-u,thrd_create (configure.ac).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <threads.h>

#include "xmalloc.h"

struct start {
	thrd_start_t fn;
	void *arg;
};

static int
thrd_result(int rc)
{
	if (rc == 0)
		return thrd_success;
	if (rc == ENOMEM || rc == EAGAIN)
		return thrd_nomem;
	if (rc == ETIMEDOUT)
		return thrd_timedout;
	if (rc == EBUSY)
		return thrd_busy;
	return thrd_error;
}

static void *
start_main(void *arg)
{
	struct start s = *(struct start *)arg;

	xfree(arg);
	return (void *)(intptr_t)s.fn(s.arg);
}

int
thrd_create(thrd_t *thr, thrd_start_t fn, void *arg)
{
	struct start *s = xmalloc(sizeof(*s));
	int rc;

	s->fn = fn;
	s->arg = arg;
	rc = pthread_create(thr, NULL, start_main, s);
	if (rc != 0)
		xfree(s);
	return thrd_result(rc);
}

int
thrd_join(thrd_t thr, int *res)
{
	void *ret;
	int rc = pthread_join(thr, &ret);

	if (rc == 0 && res != NULL)
		*res = (int)(intptr_t)ret;
	return thrd_result(rc);
}

int
mtx_init(mtx_t *m, int type)
{
	pthread_mutexattr_t a;
	int rc;

	pthread_mutexattr_init(&a);
	if (type & mtx_recursive)
		pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	rc = pthread_mutex_init((pthread_mutex_t *)m, &a);
	pthread_mutexattr_destroy(&a);
	return thrd_result(rc);
}

int
mtx_lock(mtx_t *m)
{
	return thrd_result(pthread_mutex_lock((pthread_mutex_t *)m));
}

int
mtx_trylock(mtx_t *m)
{
	return thrd_result(pthread_mutex_trylock((pthread_mutex_t *)m));
}

int
mtx_unlock(mtx_t *m)
{
	return thrd_result(pthread_mutex_unlock((pthread_mutex_t *)m));
}

void
mtx_destroy(mtx_t *m)
{
	pthread_mutex_destroy((pthread_mutex_t *)m);
}

int
cnd_init(cnd_t *c)
{
	return thrd_result(pthread_cond_init((pthread_cond_t *)c, NULL));
}

int
cnd_signal(cnd_t *c)
{
	return thrd_result(pthread_cond_signal((pthread_cond_t *)c));
}

int
cnd_broadcast(cnd_t *c)
{
	return thrd_result(pthread_cond_broadcast((pthread_cond_t *)c));
}

int
cnd_wait(cnd_t *c, mtx_t *m)
{
	return thrd_result(
		pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}

int
cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m,
	      const struct timespec *restrict ts)
{
	return thrd_result(pthread_cond_timedwait((pthread_cond_t *)c,
						  (pthread_mutex_t *)m, ts));
}

void
cnd_destroy(cnd_t *c)
{
	pthread_cond_destroy((pthread_cond_t *)c);
}

void
call_once(once_flag *flag, void (*fn)(void))
{
	pthread_once((pthread_once_t *)flag, fn);
}
