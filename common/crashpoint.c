#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crashpoint.h"
#include "log.h"

/* The hit's number if it is the hit of name that spec ("name" or
 * "name:N") asks for, else 0. */
static long
wanted(const char *spec, const char *name, atomic_long *hits)
{
	const char *colon;
	size_t len;
	long want = 1;

	if (spec == NULL || *spec == '\0')
		return 0;
	colon = strchr(spec, ':');
	len = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
	if (len != strlen(name) || strncmp(spec, name, len) != 0)
		return 0;
	if (colon != NULL) {
		want = strtol(colon + 1, NULL, 10);
		if (want < 1)
			want = 1;
	}
	return atomic_fetch_add(hits, 1) + 1 == want ? want : 0;
}

int
faultpoint_hit(const char *name)
{
	static atomic_long hits;

	if (!wanted(getenv("PROPHET_FAULT_AT"), name, &hits))
		return 0;
	log_warn("fault point reached", "point=%s", name);
	return 1;
}

/* The environment is read on every hit (a handful per task at most, and
 * only in debug builds), so nothing needs initialising. */
void
crashpoint_hit(const char *name)
{
	static atomic_long hits, stop_hits;
	long n = wanted(getenv("PROPHET_STOP_AT"), name, &stop_hits);

	if (n != 0) {
		log_warn("stop point reached: stopping",
			 "point=%s hit=%ld pid=%ld", name, n, (long)getpid());
		kill(getpid(), SIGSTOP);
	}
	n = wanted(getenv("PROPHET_CRASH_AT"), name, &hits);
	if (n == 0)
		return;
	log_warn("crash point reached: dying", "point=%s hit=%ld pid=%ld", name,
		 n, (long)getpid());
	raise(SIGKILL);
	_exit(137);
}
