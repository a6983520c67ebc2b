#ifndef PROPHET_CRASHPOINT_H
#define PROPHET_CRASHPOINT_H

/*
 * Crash points: named places between two steps of a protocol where a test
 * can make the process die as kill -9 would (no flush, no cleanup), to
 * check that recovery covers that exact moment.
 *
 *   PROPHET_CRASH_AT=after_publish_before_mark      the first time
 *   PROPHET_CRASH_AT=after_publish_before_mark:5    the fifth time
 *
 * PROPHET_STOP_AT names a point the same way and stops the whole process
 * there (SIGSTOP, as a frozen host would; SIGCONT resumes it).
 *
 * Compiled in only in debug builds (--enable-debug) and in the crash-point
 * test binaries (tests/crash/, built with -DPROPHET_CRASHPOINTS); anywhere
 * else CRASHPOINT() is nothing. The names are listed in docs/testing.md.
 */
#if defined(PROPHET_DEBUG) || defined(PROPHET_CRASHPOINTS)
#define CRASHPOINT(name) crashpoint_hit(name)
#define FAULTPOINT(name) faultpoint_hit(name)
#else
#define CRASHPOINT(name) ((void)0)
#define FAULTPOINT(name) 0
#endif

/* Dies (SIGKILL to itself) if PROPHET_CRASH_AT names this point and this
 * is the requested hit, stops (SIGSTOP) if PROPHET_STOP_AT does; logs one
 * line first. Thread-safe. */
void crashpoint_hit(const char *name);

/*
 * Fault points: the same, for an error no signal can cause (librdkafka's
 * fatal producer error): PROPHET_FAULT_AT=kafka_producer_fatal:50 makes
 * the 50th hit return 1 (logged), every other 0.
 */
int faultpoint_hit(const char *name);

#endif
