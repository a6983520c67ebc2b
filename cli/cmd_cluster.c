#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *
str_or(const json_t *o, const char *field, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, field));

	return s ? s : dflt;
}

static void
print_count(const json_t *o, const char *field)
{
	const json_t *v = json_object_get(o, field);

	if (json_is_integer(v))
		printf("%9lld", (long long)json_integer_value(v));
	else
		printf("%9s", "?");
}

static void
print_strings(const json_t *a, int *first)
{
	size_t i;
	json_t *v;

	json_array_foreach (a, i, v) {
		printf("%s%s", *first ? "" : ", ", json_string_value(v));
		*first = 0;
	}
}

/* The notifiers and what they consume; callback tasks none covers. */
static void
print_callbacks(const json_t *cb)
{
	const json_t *last = json_object_get(cb, "last_uncovered");
	char when[64];
	size_t i;
	json_t *n;

	if (!json_is_object(cb))
		return;
	printf("notifiers %zu\n",
	       json_array_size(json_object_get(cb, "notifiers")));
	json_array_foreach (json_object_get(cb, "notifiers"), i, n) {
		int first = 1;

		printf("         %-24s group %s consumes ",
		       str_or(n, "id", "?"), str_or(n, "group", "?"));
		print_strings(json_object_get(n, "patterns"), &first);
		print_strings(json_object_get(n, "topics"), &first);
		putchar('\n');
	}
	if (json_is_object(last))
		printf("uncovered %lld task(s) with a callback on a topic no "
		       "notifier consumes; the last: %s on topic %s at %s\n",
		       (long long)json_integer_value(
			       json_object_get(cb, "uncovered_total")),
		       str_or(last, "id", "?"), str_or(last, "topic", "?"),
		       cli_time(json_integer_value(json_object_get(last, "at")),
				when, sizeof(when)));
}

/* prophetctl cluster: the slot table as ZooKeeper and Redis see it. */
int
cmd_cluster(struct cli *c, int argc, char **argv)
{
	char err[512], when[64];
	json_t *ans, *w, *s;
	size_t i;
	long st;

	st = cli_request(c, "GET", "/v1/cluster", NULL, &ans, err, sizeof(err));
	if (st != 200)
		return cli_fail(st, ans, err);
	if (c->json) {
		cli_print_json(ans);
		json_decref(ans);
		return 0;
	}
	w = json_object_get(ans, "master");
	if (json_is_object(w))
		printf("master   %s (since %s)\n", str_or(w, "id", "?"),
		       cli_time(json_integer_value(json_object_get(w, "since")),
				when, sizeof(when)));
	else
		printf("master   none\n");
	printf("workers  %zu\n",
	       json_array_size(json_object_get(ans, "workers")));
	json_array_foreach (json_object_get(ans, "workers"), i, w)
		printf("         %-24s host %s pid %lld\n",
		       str_or(w, "id", "?"), str_or(w, "host", "?"),
		       (long long)json_integer_value(
			       json_object_get(w, "pid")));
	print_callbacks(json_object_get(ans, "callbacks"));
	printf("\n%4s  %-24s %6s  %-24s %9s %9s %9s\n", "SLOT", "OWNER",
	       "EPOCH", "REQUESTED", "PENDING", "INFLIGHT", "LAG_MS");
	json_array_foreach (json_object_get(ans, "slots"), i, s) {
		printf("%4lld  %-24s %6lld  %-24s",
		       (long long)json_integer_value(
			       json_object_get(s, "slot")),
		       str_or(s, "owner", "-"),
		       (long long)json_integer_value(
			       json_object_get(s, "epoch")),
		       str_or(s, "requested", "-"));
		print_count(s, "pending");
		print_count(s, "inflight");
		print_count(s, "lag_ms");
		putchar('\n');
	}
	json_decref(ans);
	return 0;
}
