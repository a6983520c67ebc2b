#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cron.h"
#include "tz.h"

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F__COUNT };

static const struct field {
	const char *name;
	int min, max;
	const char *const *names; /* index = value - min */
} fields[F__COUNT] = {
	{"second", 0, 59, NULL},
	{"minute", 0, 59, NULL},
	{"hour", 0, 23, NULL},
	{"day_of_month", 1, 31, NULL},
	{"month", 1, 12,
	 (const char *const[]){"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL",
			       "AUG", "SEP", "OCT", "NOV", "DEC", NULL}},
	{"day_of_week", 0, 7,
	 (const char *const[]){"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT",
			       NULL}},
};

static const struct {
	const char *name, *expr;
} macros[] = {
	{"@yearly", "0 0 0 1 1 *"},  {"@annually", "0 0 0 1 1 *"},
	{"@monthly", "0 0 0 1 * *"}, {"@weekly", "0 0 0 * * 0"},
	{"@daily", "0 0 0 * * *"},   {"@midnight", "0 0 0 * * *"},
	{"@hourly", "0 0 * * * *"},
};

static int
fail(struct cron_error *err, int f, const char *fmt, const char *item)
{
	snprintf(err->field, sizeof(err->field), "%s",
		 f < 0 ? "cron" : fields[f].name);
	/* Callers quote the message after "cron ": "cron minute: ...",
	 * "cron expression: ...". */
	snprintf(err->message, sizeof(err->message), fmt,
		 f < 0 ? "expression" : fields[f].name, item);
	return -1;
}

/* A number or (where the field has them) a three-letter name. */
static int
parse_value(int f, const char *s, size_t n, int *out)
{
	const struct field *fd = &fields[f];
	long v = 0;

	if (n == 0)
		return -1;
	if (isdigit((unsigned char)s[0])) {
		for (size_t i = 0; i < n; i++) {
			if (!isdigit((unsigned char)s[i]) || v > 1000)
				return -1;
			v = v * 10 + (s[i] - '0');
		}
		if (v < fd->min || v > fd->max)
			return -2;
		*out = (int)v;
		return 0;
	}
	if (fd->names == NULL || n != 3)
		return -1;
	for (int i = 0; fd->names[i] != NULL; i++)
		if (!strncasecmp(s, fd->names[i], 3)) {
			*out = fd->min + i;
			return 0;
		}
	return -1;
}

static int
value_error(struct cron_error *err, int f, int rc, const char *item)
{
	char msg[128];

	if (rc == -2) {
		snprintf(msg, sizeof(msg), "%%s: '%%s' is out of range %d-%d",
			 fields[f].min, fields[f].max);
		return fail(err, f, msg, item);
	}
	return fail(err, f, "%s: '%s' is not a valid value", item);
}

static int
parse_item(int f, const char *item, uint64_t *bits, struct cron_error *err)
{
	const struct field *fd = &fields[f];
	const char *slash = strchr(item, '/'), *dash;
	size_t blen = slash ? (size_t)(slash - item) : strlen(item);
	int lo, hi, step = 1, rc;

	size_t ilen = strlen(item);

	if (strchr(item, '#') != NULL ||
	    (f == F_DOM && strpbrk(item, "LlWw") != NULL) ||
	    (f == F_DOW && (item[ilen - 1] == 'L' || item[ilen - 1] == 'l') &&
	     (ilen == 1 || isdigit((unsigned char)item[ilen - 2]))))
		return fail(err, f,
			    "%s: '%s' uses L, W or #, which are not "
			    "supported",
			    item);
	if (slash != NULL) {
		long s = 0;
		const char *p = slash + 1;

		if (*p == '\0')
			return fail(err, f, "%s: '%s' has an empty step", item);
		for (; *p != '\0'; p++) {
			if (!isdigit((unsigned char)*p) || s > 1000)
				return fail(err, f,
					    "%s: '%s' has an invalid step",
					    item);
			s = s * 10 + (*p - '0');
		}
		if (s < 1 || s > fd->max - fd->min + 1)
			return fail(err, f,
				    "%s: the step of '%s' is out of range",
				    item);
		step = (int)s;
	}
	if ((blen == 1 && item[0] == '*') ||
	    (blen == 1 && item[0] == '?' && (f == F_DOM || f == F_DOW))) {
		lo = fd->min;
		hi = f == F_DOW ? 6 : fd->max;
	} else {
		dash = memchr(item, '-', blen);
		if (dash == NULL) {
			if ((rc = parse_value(f, item, blen, &lo)) < 0)
				return value_error(err, f, rc, item);
			hi = slash ? (f == F_DOW ? 6 : fd->max) : lo;
			if (hi < lo)
				hi = lo;
		} else {
			if ((rc = parse_value(f, item, (size_t)(dash - item),
					      &lo)) < 0 ||
			    (rc = parse_value(f, dash + 1,
					      blen - (size_t)(dash - item) - 1,
					      &hi)) < 0)
				return value_error(err, f, rc, item);
			if (hi < lo)
				return fail(err, f,
					    "%s: the range '%s' runs backwards "
					    "(wrapping ranges are not "
					    "supported)",
					    item);
		}
	}
	for (int v = lo; v <= hi; v += step)
		*bits |= 1ULL << (f == F_DOW && v == 7 ? 0 : v);
	return 0;
}

static int
parse_field(int f, const char *text, uint64_t *bits, int *any,
	    struct cron_error *err)
{
	char buf[CRON_EXPR_MAX + 1], *save = NULL, *item;

	*bits = 0;
	*any = !strcmp(text, "*") || !strcmp(text, "?");
	snprintf(buf, sizeof(buf), "%s", text);
	if (buf[0] == ',' || buf[strlen(buf) - 1] == ',' ||
	    strstr(buf, ",,") != NULL)
		return fail(err, f, "%s: '%s' has an empty list item", text);
	for (item = strtok_r(buf, ",", &save); item != NULL;
	     item = strtok_r(NULL, ",", &save))
		if (parse_item(f, item, bits, err) < 0)
			return -1;
	return 0;
}

int
cron_parse(const char *expr, struct cron *c, struct cron_error *err)
{
	char buf[CRON_EXPR_MAX + 1], *tok[F__COUNT + 1], *save = NULL, *p;
	uint64_t bits[F__COUNT];
	int any[F__COUNT], n = 0, first;

	memset(c, 0, sizeof(*c));
	memset(err, 0, sizeof(*err));
	if (strlen(expr) > CRON_EXPR_MAX)
		return fail(err, -1,
			    "%s: the expression is longer than 128 "
			    "bytes%s",
			    "");
	while (isspace((unsigned char)*expr))
		expr++;
	if (expr[0] == '@') {
		size_t i;

		for (i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
			if (!strcasecmp(expr, macros[i].name))
				break;
		if (i == sizeof(macros) / sizeof(macros[0]))
			return fail(err, -1,
				    "%s: unknown macro '%s' (@yearly, "
				    "@monthly, @weekly, @daily, @hourly)",
				    expr);
		expr = macros[i].expr;
	}
	snprintf(buf, sizeof(buf), "%s", expr);
	for (p = strtok_r(buf, " \t", &save); p != NULL;
	     p = strtok_r(NULL, " \t", &save)) {
		if (n == F__COUNT)
			return fail(err, -1,
				    "%s: expected 5 or 6 fields, got more%s",
				    "");
		tok[n++] = p;
	}
	if (n != 5 && n != 6)
		return fail(err, -1,
			    "%s: expected 5 fields (minute hour day month "
			    "weekday) or 6 (seconds first)%s",
			    "");
	first = n == 5 ? F_MIN : F_SEC;
	bits[F_SEC] = 1;
	any[F_SEC] = 0;
	for (int f = first; f < F__COUNT; f++)
		if (parse_field(f, tok[f - first], &bits[f], &any[f], err) < 0)
			return -1;
	c->sec = bits[F_SEC];
	c->min = bits[F_MIN];
	c->hour = (uint32_t)bits[F_HOUR];
	c->dom = (uint32_t)bits[F_DOM];
	c->mon = (uint16_t)bits[F_MON];
	c->dow = (uint8_t)bits[F_DOW];
	c->dom_any = any[F_DOM];
	c->dow_any = any[F_DOW];
	return 0;
}

/* Occurrences --------------------------------------------------------- */

static int64_t
floordiv(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

static int
day_matches(const struct cron *c, int64_t days, int d)
{
	int wd = (int)(((days + 4) % 7 + 7) % 7); /* 1970-01-01: Thursday */
	int dom_ok = (int)(c->dom >> d & 1), dow_ok = c->dow >> wd & 1;

	if (c->dom_any || c->dow_any)
		return dom_ok && dow_ok;
	return dom_ok || dow_ok;
}

/* The first matching wall time (seconds, local time read as if UTC) at or
 * after w, or INT64_MIN past limit. */
static int64_t
next_wall(const struct cron *c, int64_t w, int64_t limit)
{
	while (w <= limit) {
		int64_t days = floordiv(w, 86400), y;
		int sod = (int)(w - days * 86400), m, d;
		int h = sod / 3600, mi = sod / 60 % 60, s = sod % 60;

		tz_civil_from_days(days, &y, &m, &d);
		if (!(c->mon >> m & 1)) {
			w = tz_days_from_civil(m == 12 ? y + 1 : y,
					       m == 12 ? 1 : m + 1, 1) *
			    86400;
			continue;
		}
		if (!day_matches(c, days, d)) {
			w = (days + 1) * 86400;
			continue;
		}
		if (!(c->hour >> h & 1)) {
			w = days * 86400 + (h + 1) * 3600;
			continue;
		}
		if (!(c->min >> mi & 1)) {
			w = days * 86400 + h * 3600 + (mi + 1) * 60;
			continue;
		}
		if (!(c->sec >> s & 1)) {
			uint64_t later = c->sec >> s;

			if (later == 0)
				w += 60 - s;
			else
				w += __builtin_ctzll(later);
			continue;
		}
		return w;
	}
	return INT64_MIN;
}

/* The UTC instant of wall time w: the first one if it occurs twice, the
 * end of the gap if it does not occur at all. */
static int64_t
wall_to_utc(const struct tz *z, int64_t w)
{
	int offs[3] = {tz_offset(z, w - 86400), tz_offset(z, w + 86400),
		       tz_offset(z, w)};
	int64_t best = INT64_MAX, lo, hi;
	int omin = offs[0], omax = offs[0];

	for (int i = 0; i < 3; i++) {
		int64_t u = w - offs[i];

		if (tz_offset(z, u) == offs[i] && u < best)
			best = u;
		if (offs[i] < omin)
			omin = offs[i];
		if (offs[i] > omax)
			omax = offs[i];
	}
	if (best != INT64_MAX)
		return best;
	/* In a gap: the transition lies in (w - omax, w - omin]. */
	lo = w - omax;
	hi = w - omin;
	if (tz_offset(z, lo) == tz_offset(z, hi))
		return hi;
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;

		if (tz_offset(z, mid) == tz_offset(z, lo))
			lo = mid;
		else
			hi = mid;
	}
	return hi;
}

int64_t
cron_next(const struct cron *c, const struct tz *z, int64_t after_ms)
{
	int64_t umin = floordiv(after_ms, 1000) + 1;
	int64_t w = umin + tz_offset(z, umin);
	int64_t limit = w + 10LL * 366 * 86400;

	for (;;) {
		int64_t u;

		w = next_wall(c, w, limit);
		if (w == INT64_MIN)
			return -1;
		u = wall_to_utc(z, w);
		if (u >= umin)
			return u * 1000;
		w++;
	}
}
