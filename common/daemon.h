#ifndef PROPHET_DAEMON_H
#define PROPHET_DAEMON_H

#include <stdint.h>

struct event_base;

/* Wall clock (task due times) and monotonic clock (leases, timeouts). */
int64_t clock_now_ms(void);
int64_t clock_now_us(void); /* CLOCK_REALTIME in microseconds */
int64_t clock_mono_ms(void);
int64_t clock_mono_us(void);

/*
 * Signals as loop events: SIGTERM/SIGINT call stop_cb with the count so
 * far (1: graceful, 2: now); SIGHUP calls reload_cb; SIGPIPE is ignored.
 * Also starts the systemd watchdog pings when WATCHDOG_USEC is set.
 */
struct daemon;
struct daemon *daemon_create(struct event_base *base,
			     void (*stop_cb)(int count, void *arg),
			     void (*reload_cb)(void *arg), void *arg);
void daemon_destroy(struct daemon *d);
/*
 * The loop has ended and the program tears down: the loop no longer hears
 * signals, so from here a SIGTERM or SIGINT (a second stop: "exit now")
 * exits at once, and so does a teardown still running after seconds (a
 * library waiting for a server that went away must not hold the stop
 * until systemd's SIGKILL). Either writes one line to stderr first; exit
 * status 1.
 */
void daemon_teardown(int seconds);
/* Seconds a teardown may take (daemon_teardown). */
#define DAEMON_TEARDOWN_S 30
/* sd_notify: "READY=1", "STOPPING=1", "STATUS=..." */
void daemon_notify(const char *state);
/* libevent before the first event base: threads, and allocation through
 * malloc (daemon.c says why). */
void daemon_libevent_init(void);
/* A default worker id: hostname-pid. */
void daemon_default_id(char *buf, size_t len);

#endif
