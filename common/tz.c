#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tz.h"
#include "xmalloc.h"

#define TZ_FILE_MAX (256 * 1024)
#define TZ_CACHE_MAX 1024

/* A POSIX TZ rule date: Mm.w.d, Jn or n, plus the time of day. */
struct tz_rule {
	char kind; /* 'M', 'J' or 'D' (zero-based day) */
	int m, w, d;
	int day;
	int secs;
};

struct tz {
	char name[TZ_NAME_MAX + 1];
	int64_t *trans; /* transition times, ascending */
	unsigned char *idx;
	size_t ntrans;
	int *utoff; /* per local time type */
	size_t ntypes;
	/* The footer: how time goes on after the last transition. */
	int has_rule;
	int std_off, dst_off;
	int has_dst;
	struct tz_rule start, end;
	struct tz *next; /* cache */
};

int64_t
tz_days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

void
tz_civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

static int
is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int
tz_month_days(int64_t y, int m)
{
	static const int len[12] = {31, 28, 31, 30, 31, 30,
				    31, 31, 30, 31, 30, 31};

	return m == 2 && is_leap(y) ? 29 : len[m - 1];
}

static int64_t
floordiv(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* POSIX TZ strings ---------------------------------------------------- */

static const char *
parse_name(const char *s)
{
	const char *p = s;

	if (*p == '<') {
		while (*p != '\0' && *p != '>')
			p++;
		return *p == '>' && p - s >= 4 ? p + 1 : NULL;
	}
	while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
		p++;
	return p - s >= 3 ? p : NULL;
}

/* [+-]hh[:mm[:ss]] into seconds; hours up to 167 (RFC 8536 extension). */
static const char *
parse_hms(const char *s, int *out)
{
	int sign = 1, h = 0, m = 0, sec = 0, n = 0;

	if (*s == '+' || *s == '-')
		sign = *s++ == '-' ? -1 : 1;
	while (*s >= '0' && *s <= '9' && n < 3) {
		h = h * 10 + (*s++ - '0');
		n++;
	}
	if (n == 0 || h > 167)
		return NULL;
	if (*s == ':') {
		s++;
		if (!(s[0] >= '0' && s[0] <= '5' && s[1] >= '0' && s[1] <= '9'))
			return NULL;
		m = (s[0] - '0') * 10 + s[1] - '0';
		s += 2;
		if (*s == ':') {
			s++;
			if (!(s[0] >= '0' && s[0] <= '5' && s[1] >= '0' &&
			      s[1] <= '9'))
				return NULL;
			sec = (s[0] - '0') * 10 + s[1] - '0';
			s += 2;
		}
	}
	*out = sign * (h * 3600 + m * 60 + sec);
	return s;
}

static const char *
parse_num(const char *s, int min, int max, int *out)
{
	int v = 0, n = 0;

	while (*s >= '0' && *s <= '9' && n < 4) {
		v = v * 10 + (*s++ - '0');
		n++;
	}
	if (n == 0 || v < min || v > max)
		return NULL;
	*out = v;
	return s;
}

static const char *
parse_rule(const char *s, struct tz_rule *r)
{
	memset(r, 0, sizeof(*r));
	r->secs = 7200;
	if (*s == 'M') {
		r->kind = 'M';
		if ((s = parse_num(s + 1, 1, 12, &r->m)) == NULL || *s++ != '.')
			return NULL;
		if ((s = parse_num(s, 1, 5, &r->w)) == NULL || *s++ != '.')
			return NULL;
		if ((s = parse_num(s, 0, 6, &r->d)) == NULL)
			return NULL;
	} else if (*s == 'J') {
		r->kind = 'J';
		if ((s = parse_num(s + 1, 1, 365, &r->day)) == NULL)
			return NULL;
	} else {
		r->kind = 'D';
		if ((s = parse_num(s, 0, 365, &r->day)) == NULL)
			return NULL;
	}
	if (*s == '/')
		s = parse_hms(s + 1, &r->secs);
	return s;
}

/* "STDoff[DST[off][,start[/time],end[/time]]]"; 0 if understood. */
static int
parse_posix(struct tz *z, const char *s)
{
	int off;

	if ((s = parse_name(s)) == NULL || (s = parse_hms(s, &off)) == NULL)
		return -1;
	z->std_off = -off;
	z->dst_off = z->std_off;
	if (*s == '\0') {
		z->has_rule = 1;
		return 0;
	}
	if ((s = parse_name(s)) == NULL)
		return -1;
	z->dst_off = z->std_off + 3600;
	if (*s != ',' && *s != '\0') {
		if ((s = parse_hms(s, &off)) == NULL)
			return -1;
		z->dst_off = -off;
	}
	/* A DST name without rules means implementation-defined rules. */
	if (*s != ',')
		return -1;
	if ((s = parse_rule(s + 1, &z->start)) == NULL || *s != ',')
		return -1;
	if ((s = parse_rule(s + 1, &z->end)) == NULL || *s != '\0')
		return -1;
	z->has_dst = 1;
	z->has_rule = 1;
	return 0;
}

/* The local wall time (seconds) at which rule r falls in year y. */
static int64_t
rule_wall(const struct tz_rule *r, int64_t y)
{
	int64_t days;

	if (r->kind == 'M') {
		int64_t first = tz_days_from_civil(y, r->m, 1);
		int wd = (int)(((first + 4) % 7 + 7) % 7);
		int day = 1 + (r->d - wd + 7) % 7 + (r->w - 1) * 7;

		while (day > tz_month_days(y, r->m))
			day -= 7;
		days = first + day - 1;
	} else if (r->kind == 'J') {
		days = tz_days_from_civil(y, 1, 1) + r->day - 1 +
		       (is_leap(y) && r->day >= 60);
	} else {
		days = tz_days_from_civil(y, 1, 1) + r->day;
	}
	return days * 86400 + r->secs;
}

static int
rule_offset(const struct tz *z, int64_t t)
{
	int64_t y, s, e;
	int m, d;

	if (!z->has_dst)
		return z->std_off;
	tz_civil_from_days(floordiv(t + z->std_off, 86400), &y, &m, &d);
	s = rule_wall(&z->start, y) - z->std_off;
	e = rule_wall(&z->end, y) - z->dst_off;
	if (s < e)
		return t >= s && t < e ? z->dst_off : z->std_off;
	return t >= e && t < s ? z->std_off : z->dst_off;
}

int
tz_offset(const struct tz *z, int64_t t)
{
	size_t lo = 0, hi;

	if (z->ntrans == 0)
		return z->has_rule ? rule_offset(z, t) : z->utoff[0];
	if (t < z->trans[0])
		return z->utoff[0];
	if (t >= z->trans[z->ntrans - 1] && z->has_rule)
		return rule_offset(z, t);
	/* The last transition at or before t. */
	hi = z->ntrans;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (z->trans[mid] <= t)
			lo = mid;
		else
			hi = mid;
	}
	return z->utoff[z->idx[lo]];
}

const char *
tz_name(const struct tz *z)
{
	return z->name;
}

/* TZif (RFC 8536) --------------------------------------------------- */

static uint32_t
be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static int64_t
be64(const unsigned char *p)
{
	return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

struct tzif_hdr {
	uint32_t isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt;
};

static int
read_hdr(const unsigned char *p, size_t len, struct tzif_hdr *h)
{
	if (len < 44 || memcmp(p, "TZif", 4) != 0)
		return -1;
	h->isutcnt = be32(p + 20);
	h->isstdcnt = be32(p + 24);
	h->leapcnt = be32(p + 28);
	h->timecnt = be32(p + 32);
	h->typecnt = be32(p + 36);
	h->charcnt = be32(p + 40);
	if (h->typecnt == 0 || h->typecnt > 256 || h->timecnt > 100000 ||
	    h->leapcnt > 10000 || h->charcnt > 10000 ||
	    (h->isutcnt != 0 && h->isutcnt != h->typecnt) ||
	    (h->isstdcnt != 0 && h->isstdcnt != h->typecnt))
		return -1;
	return 0;
}

static size_t
block_len(const struct tzif_hdr *h, size_t tsize)
{
	return h->timecnt * tsize + h->timecnt + h->typecnt * 6 + h->charcnt +
	       h->leapcnt * (tsize + 4) + h->isstdcnt + h->isutcnt;
}

struct tz *
tz_parse(const char *name, const unsigned char *buf, size_t len, char *err,
	 size_t errlen)
{
	struct tzif_hdr h;
	const unsigned char *p = buf, *end = buf + len;
	size_t tsize = 4;
	struct tz *z;

	if (read_hdr(p, len, &h) < 0)
		goto bad;
	if (buf[4] >= '2') {
		/* Skip the 32-bit block; use the 64-bit one. */
		p += 44 + block_len(&h, 4);
		if (p > end || read_hdr(p, (size_t)(end - p), &h) < 0)
			goto bad;
		tsize = 8;
	}
	p += 44;
	if ((size_t)(end - p) < block_len(&h, tsize))
		goto bad;
	z = xcalloc(1, sizeof(*z));
	snprintf(z->name, sizeof(z->name), "%s", name);
	z->ntrans = h.timecnt;
	z->ntypes = h.typecnt;
	z->trans = xcalloc(h.timecnt + 1, sizeof(*z->trans));
	z->idx = xcalloc(h.timecnt + 1, 1);
	z->utoff = xcalloc(h.typecnt, sizeof(*z->utoff));
	for (size_t i = 0; i < h.timecnt; i++, p += tsize)
		z->trans[i] = tsize == 8 ? be64(p) : (int32_t)be32(p);
	for (size_t i = 0; i < h.timecnt; i++, p++) {
		if (*p >= h.typecnt)
			goto bad_free;
		z->idx[i] = *p;
		if (i > 0 && z->trans[i] <= z->trans[i - 1])
			goto bad_free;
	}
	for (size_t i = 0; i < h.typecnt; i++, p += 6) {
		int32_t off = (int32_t)be32(p);

		if (off < -89999 || off > 93599)
			goto bad_free;
		z->utoff[i] = off;
	}
	p += h.charcnt + h.leapcnt * (tsize + 4) + h.isstdcnt + h.isutcnt;
	/* Footer: "\n<POSIX TZ string>\n" (version 2+). */
	if (tsize == 8 && p < end && *p == '\n') {
		const unsigned char *nl =
			memchr(p + 1, '\n', (size_t)(end - p - 1));
		char rule[128];

		if (nl != NULL && (size_t)(nl - p - 1) < sizeof(rule) &&
		    nl > p + 1) {
			memcpy(rule, p + 1, (size_t)(nl - p - 1));
			rule[nl - p - 1] = '\0';
			if (parse_posix(z, rule) < 0)
				z->has_rule = 0;
		}
	}
	return z;
bad_free:
	tz_destroy(z);
bad:
	snprintf(err, errlen, "time zone '%s': not a valid TZif file", name);
	return NULL;
}

void
tz_destroy(struct tz *z)
{
	if (z == NULL)
		return;
	xfree(z->trans);
	xfree(z->idx);
	xfree(z->utoff);
	xfree(z);
}

/* Loading and the cache -------------------------------------------- */

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tz *cache;
static size_t cache_n;

/* IANA names: components of [A-Za-z0-9_+-] not starting with '.' or '-',
 * so a name can never leave the zoneinfo directory. */
static int
name_valid(const char *s)
{
	size_t n = strlen(s);
	int start = 1;

	if (n == 0 || n > TZ_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == '/') {
			if (start)
				return 0;
			start = 1;
			continue;
		}
		if (start && (c == '.' || c == '-'))
			return 0;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '+' ||
		      c == '-' || c == '.'))
			return 0;
		start = 0;
	}
	return !start;
}

static struct tz *
tz_load(const char *name, char *err, size_t errlen)
{
	const char *dir = getenv("TZDIR");
	char path[512];
	unsigned char *buf;
	size_t len;
	struct tz *z;
	FILE *f;

	if (dir == NULL || dir[0] == '\0')
		dir = "/usr/share/zoneinfo";
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (f == NULL) {
		snprintf(err, errlen,
			 "unknown time zone '%s' (no %s; is tzdata installed?)",
			 name, path);
		return NULL;
	}
	buf = xmalloc(TZ_FILE_MAX);
	len = fread(buf, 1, TZ_FILE_MAX, f);
	fclose(f);
	z = tz_parse(name, buf, len, err, errlen);
	xfree(buf);
	return z;
}

const struct tz *
tz_get(const char *name, char *err, size_t errlen)
{
	struct tz *z;

	if (!name_valid(name)) {
		snprintf(err, errlen,
			 "'%.64s' is not an IANA time zone name "
			 "(like Europe/Berlin)",
			 name);
		return NULL;
	}
	pthread_mutex_lock(&cache_lock);
	for (z = cache; z != NULL; z = z->next)
		if (!strcmp(z->name, name))
			break;
	if (z == NULL) {
		if (cache_n >= TZ_CACHE_MAX) {
			snprintf(err, errlen, "too many time zones in use");
		} else if ((z = tz_load(name, err, errlen)) != NULL) {
			z->next = cache;
			cache = z;
			cache_n++;
		}
	}
	pthread_mutex_unlock(&cache_lock);
	return z;
}
