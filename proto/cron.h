#ifndef PROPHET_CRON_H
#define PROPHET_CRON_H

#include <stddef.h>
#include <stdint.h>

struct tz;

/*
 * Cron expressions: 5 fields (minute hour day-of-month month day-of-week)
 * or 6 (seconds first). Each field is a list of "*", "?", n, a-b, "*\/s",
 * a/s, a-b/s; months and weekdays also by name (JAN-DEC, SUN-SAT); weekday 0
 * and 7 are Sunday; @yearly, @monthly, @weekly, @daily, @hourly too. When
 * both day fields are restricted a day matches either (classic cron).
 * Quartz's L, W, # and ranges that wrap are rejected with the field named.
 */
#define CRON_EXPR_MAX 128

struct cron {
	uint64_t sec, min; /* bit n: value n */
	uint32_t hour, dom;
	uint16_t mon;
	uint8_t dow;
	int dom_any, dow_any; /* the field was * or ? */
};

struct cron_error {
	char field[32];
	char message[200];
};

int cron_parse(const char *expr, struct cron *c, struct cron_error *err);

/*
 * The first occurrence strictly after after_ms (ms since the epoch) in
 * zone z, in ms (always a whole second), or -1 if there is none within
 * ten years. DST: a wall time that does not exist (the spring-forward
 * gap) fires at the first instant after the gap, once, however many gap
 * times match; a wall time that exists twice (fall back) fires once, at
 * its first (summer time) instance.
 */
int64_t cron_next(const struct cron *c, const struct tz *z, int64_t after_ms);

#endif
