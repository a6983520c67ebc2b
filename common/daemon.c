#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <systemd/sd-daemon.h>

#include "daemon.h"
#include "log.h"
#include "xmalloc.h"

struct daemon {
	struct event *term_ev;
	struct event *int_ev;
	struct event *hup_ev;
	struct event *wd_ev;
	void (*stop_cb)(int count, void *arg);
	void (*reload_cb)(void *arg);
	void *arg;
	int stops;
};

int64_t
clock_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
clock_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t
clock_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
clock_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
teardown_exit(int sig)
{
	static const char term[] =
		"level=error msg=\"stop requested again during teardown: "
		"exiting now\"\n";
	static const char late[] =
		"level=error msg=\"teardown did not finish in time: "
		"exiting now\"\n";
	const char *s = sig == SIGALRM ? late : term;
	ssize_t r = write(2, s, strlen(s));

	(void)r;
	_exit(1);
}

void
daemon_teardown(int seconds)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = teardown_exit;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	alarm((unsigned)seconds);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct daemon *d = arg;

	if (sig == SIGHUP) {
		log_info("reload requested", "signal=HUP");
		if (d->reload_cb != NULL)
			d->reload_cb(d->arg);
		return;
	}
	d->stops++;
	log_info("stop requested", "signal=%s count=%d",
		 sig == SIGTERM ? "TERM" : "INT", d->stops);
	if (d->stops == 1)
		daemon_notify("STOPPING=1");
	d->stop_cb(d->stops, d->arg);
}

/*
 * A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes one line and
 * the stack's addresses to stderr (the log: journald, or the tests' log
 * files) and then dies of the same signal, so the exit status and a core
 * are as without it. Addresses of static functions print as
 * "prophet-<daemon>(+0x...)": `addr2line -f -e prophet-<daemon> 0x...`
 * names them. Only write(2) and backtrace_symbols_fd(3), which do not
 * allocate; backtrace(3) is called once at install so that its library is
 * loaded before any crash. Not under AddressSanitizer: its own handler
 * reports more.
 */
#if !defined(__SANITIZE_ADDRESS__)
static void
crash_write(const char *s)
{
	ssize_t r = write(2, s, strlen(s));

	(void)r;
}

static void
crash_handler(int sig)
{
	void *frames[64];
	char num[16], *p = num + sizeof(num);
	int n, v = sig;

	*--p = '\0';
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0 && p > num);
	crash_write("level=fatal msg=\"fatal signal, stack follows\" signal=");
	crash_write(p);
	crash_write("\n");
	n = backtrace(frames, (int)(sizeof(frames) / sizeof(frames[0])));
	backtrace_symbols_fd(frames, n, 2);
	raise(sig); /* SA_RESETHAND: the default action now */
}

static void
crash_handlers_install(void)
{
	static char altstack[64 * 1024];
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
	stack_t ss = {0};
	struct sigaction sa;
	void *probe[1];

	(void)backtrace(probe, 1);
	ss.ss_sp = altstack;
	ss.ss_size = sizeof(altstack);
	(void)sigaltstack(&ss, NULL); /* a stack overflow still reports */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = crash_handler;
	sa.sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		(void)sigaction(sigs[i], &sa, NULL);
}
#else
static void
crash_handlers_install(void)
{
}
#endif

static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	sd_notify(0, "WATCHDOG=1");
}

struct daemon *
daemon_create(struct event_base *base, void (*stop_cb)(int count, void *arg),
	      void (*reload_cb)(void *arg), void *arg)
{
	struct daemon *d = xcalloc(1, sizeof(*d));
	uint64_t usec = 0;

	signal(SIGPIPE, SIG_IGN);
	crash_handlers_install();
	d->stop_cb = stop_cb;
	d->reload_cb = reload_cb;
	d->arg = arg;
	d->term_ev = evsignal_new(base, SIGTERM, signal_cb, d);
	d->int_ev = evsignal_new(base, SIGINT, signal_cb, d);
	d->hup_ev = evsignal_new(base, SIGHUP, signal_cb, d);
	event_add(d->term_ev, NULL);
	event_add(d->int_ev, NULL);
	event_add(d->hup_ev, NULL);
	if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
		struct timeval tv = {(time_t)(usec / 2 / 1000000),
				     (suseconds_t)(usec / 2 % 1000000)};

		d->wd_ev = event_new(base, -1, EV_PERSIST, watchdog_cb, d);
		event_add(d->wd_ev, &tv);
	}
	return d;
}

void
daemon_destroy(struct daemon *d)
{
	if (d == NULL)
		return;
	alarm(0); /* the teardown's deadline (daemon_teardown): done */
	event_free(d->term_ev);
	event_free(d->int_ev);
	event_free(d->hup_ev);
	if (d->wd_ev != NULL)
		event_free(d->wd_ev);
	xfree(d);
}

void
daemon_notify(const char *state)
{
	sd_notify(0, state);
}

void
daemon_default_id(char *buf, size_t len)
{
	char host[128];

	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "host");
	host[sizeof(host) - 1] = '\0';
	/* A hostname may hold any byte: the id goes into ZooKeeper paths and
	 * JSON, so it keeps to what worker.id allows (and its length). */
	host[80] = '\0';
	for (char *p = host; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-')
			*p = '_';
	snprintf(buf, len, "%s-%d", host, (int)getpid());
}

void
daemon_libevent_init(void)
{
	/* libevent's calloc is then malloc and memset: glibc's calloc
	 * bypasses its per-thread cache, and evhttp callocs a dozen objects
	 * a request (about 2,000 instructions of a single submission's
	 * 70,000). The same allocator underneath: nothing allocated before
	 * is freed wrongly. */
	event_set_mem_functions(malloc, realloc, free);
	evthread_use_pthreads();
}
