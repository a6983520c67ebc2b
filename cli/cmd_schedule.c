#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <curl/curl.h>

#include "cli.h"

#define BAR_WIDTH 50

/* "now", "+D" (a duration from now) or ms since the epoch; -1 if none. */
static long long
when_ms(const char *s, long long now)
{
	char *end;
	long long v;

	if (!strcmp(s, "now"))
		return now;
	if (*s == '+') {
		v = cli_duration_ms(s + 1);
		return v < 0 ? -1 : now + v;
	}
	if (*s < '0' || *s > '9')
		return -1;
	v = strtoll(s, &end, 10);
	return *end == '\0' ? v : -1;
}

static const char *
local_time(long long ms, char *buf, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	localtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
	return buf;
}

static void
histogram(const json_t *ans)
{
	const json_t *counts = json_object_get(ans, "counts"), *v;
	long long from = json_integer_value(json_object_get(ans, "from"));
	long long step = json_integer_value(json_object_get(ans, "step"));
	long long max = 0;
	const char *topic = json_string_value(json_object_get(ans, "topic"));
	char a[64], b[64];
	size_t i;

	json_array_foreach (counts, i, v)
		if (json_integer_value(v) > max)
			max = json_integer_value(v);
	printf("%s .. %s  step %llds  topic %s  total %lld\n",
	       local_time(from, a, sizeof(a)),
	       local_time(json_integer_value(json_object_get(ans, "to")), b,
			  sizeof(b)),
	       step / 1000, topic ? topic : "(all)",
	       (long long)json_integer_value(json_object_get(ans, "total")));
	json_array_foreach (counts, i, v) {
		long long n = json_integer_value(v);
		int w = max > 0 ? (int)((n * BAR_WIDTH + max - 1) / max) : 0;

		printf("%s %10lld %.*s\n",
		       local_time(from + (long long)i * step, a, sizeof(a)), n,
		       w, "##################################################");
	}
}

/* prophetctl schedule: the booked load, a line per step. */
int
cmd_schedule(struct cli *c, int argc, char **argv)
{
	char path[1024], err[512], *esc;
	struct timeval tv;
	long long now, from = -1, to = -1, step = -1;
	const char *topic = NULL;
	json_t *ans;
	size_t len;
	long st;

	gettimeofday(&tv, NULL);
	now = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
	for (int k = 1; k < argc; k++) {
		if (k + 1 < argc && !strcmp(argv[k], "--from"))
			from = when_ms(argv[++k], now);
		else if (k + 1 < argc && !strcmp(argv[k], "--to"))
			to = when_ms(argv[++k], now);
		else if (k + 1 < argc && !strcmp(argv[k], "--step"))
			step = cli_duration_ms(argv[++k]);
		else if (k + 1 < argc && !strcmp(argv[k], "--topic"))
			topic = argv[++k];
		else
			goto usage;
		if ((!strcmp(argv[k - 1], "--from") && from < 0) ||
		    (!strcmp(argv[k - 1], "--to") && to < 0) ||
		    (!strcmp(argv[k - 1], "--step") && step < 0))
			goto usage;
	}
	if (from < 0)
		from = now;
	len = (size_t)snprintf(path, sizeof(path), "/v1/schedule?from=%lld",
			       from);
	if (to >= 0)
		len += (size_t)snprintf(path + len, sizeof(path) - len,
					"&to=%lld", to);
	if (step >= 0)
		len += (size_t)snprintf(path + len, sizeof(path) - len,
					"&step=%lld", step);
	if (topic != NULL) {
		esc = curl_escape(topic, 0);
		snprintf(path + len, sizeof(path) - len, "&topic=%s", esc);
		curl_free(esc);
	}
	st = cli_request(c, "GET", path, NULL, &ans, err, sizeof(err));
	if (st != 200)
		return cli_fail(st, ans, err);
	if (c->json)
		cli_print_json(ans);
	else
		histogram(ans);
	json_decref(ans);
	return 0;
usage:
	fprintf(stderr, "usage: prophetctl schedule [--from T] [--to T] "
			"[--step D] [--topic T]\n"
			"  T: now, +D (from now) or ms since the epoch; D: "
			"1500ms, 30s, 5m, 2h, 1d\n");
	return 2;
}
