#ifndef PROPHET_TZ_H
#define PROPHET_TZ_H

#include <stddef.h>
#include <stdint.h>

/*
 * IANA time zones, read from the system's compiled tz database (TZif files
 * under $TZDIR or /usr/share/zoneinfo, Debian package tzdata). We read the
 * files ourselves instead of switching TZ for localtime_r(): the TZ
 * variable is process-global, and the DB pool threads compute occurrences
 * concurrently with the loop thread.
 *
 * Zones are loaded once and kept for the life of the process (there are a
 * few hundred at most); the returned pointer is borrowed and thread-safe to
 * use.
 */
struct tz;

#define TZ_NAME_MAX 64

/* The zone named name, or NULL with err filled (unknown name, unreadable or
 * malformed file). */
const struct tz *tz_get(const char *name, char *err, size_t errlen);
/* Offset from UTC in seconds (east positive) at the UTC time t (seconds). */
int tz_offset(const struct tz *z, int64_t t);
const char *tz_name(const struct tz *z);

/* Parses a TZif image (exposed for tests). The result is the caller's. */
struct tz *tz_parse(const char *name, const unsigned char *buf, size_t len,
		    char *err, size_t errlen);
void tz_destroy(struct tz *z);

/* Proleptic Gregorian calendar helpers (days since 1970-01-01). */
int64_t tz_days_from_civil(int64_t y, int m, int d);
void tz_civil_from_days(int64_t days, int64_t *y, int *m, int *d);
int tz_month_days(int64_t y, int m);

#endif
