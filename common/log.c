#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static const char *log_prog = "prophet";
static enum log_level log_min = PLOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error",
					  "fatal"};

void
log_init(const char *prog, enum log_level min)
{
	log_prog = prog;
	log_min = min;
}

void
log_set_level(enum log_level min)
{
	log_min = min;
}

int
log_enabled(enum log_level lvl)
{
	return lvl >= log_min;
}

int
log_level_parse(const char *s, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]);
	     i++) {
		if (strcasecmp(s, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

static void
log_vwrite(enum log_level lvl, const char *msg, const char *kvfmt, va_list ap)
{
	char line[4096];
	struct timeval tv;
	struct tm tm;
	size_t n;
	int r;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
	r = snprintf(line + n, sizeof(line) - n,
		     ".%03ldZ level=%s prog=%s msg=\"%s\"",
		     (long)tv.tv_usec / 1000, level_names[lvl], log_prog, msg);
	if (r > 0)
		n += (size_t)r;
	if (n < sizeof(line) - 2 && kvfmt != NULL && kvfmt[0] != '\0') {
		line[n++] = ' ';
		r = vsnprintf(line + n, sizeof(line) - n, kvfmt, ap);
		if (r > 0)
			n += (size_t)r;
	}
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line keeps lines whole across threads. */
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}

void
log_write(enum log_level lvl, const char *msg, const char *kvfmt, ...)
{
	va_list ap;

	if (lvl < log_min)
		return;
	va_start(ap, kvfmt);
	log_vwrite(lvl, msg, kvfmt, ap);
	va_end(ap);
}

void
log_fatal(const char *msg, const char *kvfmt, ...)
{
	va_list ap;

	va_start(ap, kvfmt);
	log_vwrite(PLOG_FATAL, msg, kvfmt, ap);
	va_end(ap);
	/* Not exit(): its handlers (OpenSSL's cleanup among them) would free
	 * what librdkafka's and the ZooKeeper client's threads, still
	 * running, use. */
	fflush(NULL);
	_exit(1);
}

int
log_every(struct log_every *l, long long now_ms, long long every_ms,
	  long *skipped)
{
	if (l->last_ms != 0 && now_ms - l->last_ms < every_ms) {
		l->skipped++;
		return 0;
	}
	*skipped = l->skipped;
	l->last_ms = now_ms;
	l->skipped = 0;
	return 1;
}

const char *
log_mask_url(const char *url, char *buf, size_t len)
{
	const char *scheme = strstr(url, "://");
	const char *start = scheme ? scheme + 3 : url;
	const char *at = strrchr(start, '@');
	const char *colon;

	if (at == NULL) {
		snprintf(buf, len, "%s", url);
		return buf;
	}
	colon = memchr(start, ':', (size_t)(at - start));
	if (colon == NULL) {
		snprintf(buf, len, "%s", url);
		return buf;
	}
	snprintf(buf, len, "%.*s:***%s", (int)(colon - url), url, at);
	return buf;
}
