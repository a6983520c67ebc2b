#ifndef PROPHET_LOG_H
#define PROPHET_LOG_H

/*
 * One line per event on stderr:
 *   ts=2026-11-30T12:00:00.123Z level=info prog=worker msg="slot gained" slot=3
 * Thread-safe: each line is written with a single write(2).
 */
enum log_level { PLOG_DEBUG, PLOG_INFO, PLOG_WARN, PLOG_ERROR, PLOG_FATAL };

void log_init(const char *prog, enum log_level min);
void log_set_level(enum log_level min);
int log_level_parse(const char *s, enum log_level *out);
int log_enabled(enum log_level lvl);
/* kvfmt is a printf format for the key=value tail; it may be "". */
void log_write(enum log_level lvl, const char *msg, const char *kvfmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Logs and exits(1); for startup errors only. */
void log_fatal(const char *msg, const char *kvfmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
/*
 * A warning that can repeat fast (every failed call of an outage): one
 * line per interval at most, the others counted. Zeroed: never logged.
 */
struct log_every {
	long long last_ms; /* monotonic, of the last line */
	long skipped;	   /* occurrences not logged since */
};
/* Whether this occurrence (at now_ms, monotonic) gets its line: the first
 * one and then at most one per every_ms. On 1, *skipped is how many were
 * not logged since the last line (the count starts again); on 0 this one
 * is counted. */
int log_every(struct log_every *l, long long now_ms, long long every_ms,
	      long *skipped);
/* Copies url into buf with any password replaced by "***". */
const char *log_mask_url(const char *url, char *buf, size_t len);

#define log_debug(msg, ...)                                      \
	do {                                                     \
		if (log_enabled(PLOG_DEBUG))                     \
			log_write(PLOG_DEBUG, msg, __VA_ARGS__); \
	} while (0)
#define log_info(msg, ...) log_write(PLOG_INFO, msg, __VA_ARGS__)
#define log_warn(msg, ...) log_write(PLOG_WARN, msg, __VA_ARGS__)
#define log_error(msg, ...) log_write(PLOG_ERROR, msg, __VA_ARGS__)

#endif
