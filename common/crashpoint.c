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

/* The environment is read on every hit (a handful per task at most, and
 * only in debug builds), so nothing needs initialising. */
void
crashpoint_hit(const char *name)
{
	static atomic_long hits;
	const char *spec = getenv("PROPHET_CRASH_AT"), *colon;
	size_t len;
	long want = 1, n;

	if (spec == NULL || *spec == '\0')
		return;
	colon = strchr(spec, ':');
	len = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
	if (len != strlen(name) || strncmp(spec, name, len) != 0)
		return;
	if (colon != NULL) {
		want = strtol(colon + 1, NULL, 10);
		if (want < 1)
			want = 1;
	}
	n = atomic_fetch_add(&hits, 1) + 1;
	if (n != want)
		return;
	log_warn("crash point reached: dying", "point=%s hit=%ld pid=%ld", name,
		 n, (long)getpid());
	raise(SIGKILL);
	_exit(137);
}
